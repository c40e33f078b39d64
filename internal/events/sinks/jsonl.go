// Package sinks holds the optional event sinks fmgate can export to: a
// rotating JSON-lines file, OTLP/HTTP traces and NATS JetStream. Each
// encodes through events.Encode (or, for OTLP, a fixed attribute mapping),
// so only the schema's allow-listed fields leave the process.
package sinks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/fmgate/fmgate/internal/events"
)

// JSONL appends events, one per line, to a file rotated by size: path,
// path.1 (newest rotated) … path.N. Not durable: it is a local trail, not
// the event store.
type JSONL struct {
	cfg  events.JSONLConfig
	f    *os.File
	size int64
	buf  []byte
}

// NewJSONL opens (or creates) cfg.Path for appending.
func NewJSONL(cfg events.JSONLConfig) (*JSONL, error) {
	if cfg.Path == "" {
		return nil, errors.New("sinks: jsonl: empty path")
	}
	j := &JSONL{cfg: cfg}
	if err := j.open(); err != nil {
		return nil, err
	}
	return j, nil
}

func (j *JSONL) open() error {
	if err := os.MkdirAll(filepath.Dir(j.cfg.Path), 0o750); err != nil {
		return fmt.Errorf("sinks: jsonl: %w", err)
	}
	f, err := os.OpenFile(j.cfg.Path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return fmt.Errorf("sinks: jsonl: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("sinks: jsonl: %w", err)
	}
	j.f, j.size = f, st.Size()
	return nil
}

// Name is "jsonl".
func (j *JSONL) Name() string { return "jsonl" }

// Write appends the batch, rotating first when it would push the file past
// MaxBytes.
func (j *JSONL) Write(_ context.Context, batch []events.Event) error {
	b := j.buf[:0]
	for i := range batch {
		b = events.AppendJSON(b, &batch[i])
		b = append(b, '\n')
	}
	j.buf = b
	if j.cfg.MaxBytes > 0 && j.size > 0 && j.size+int64(len(b)) > j.cfg.MaxBytes {
		if err := j.rotate(); err != nil {
			return err
		}
	}
	n, err := j.f.Write(b)
	j.size += int64(n)
	if err != nil {
		return fmt.Errorf("sinks: jsonl: %w", err)
	}
	return nil
}

func (j *JSONL) rotate() error {
	if err := j.f.Close(); err != nil {
		return fmt.Errorf("sinks: jsonl: %w", err)
	}
	p := j.cfg.Path
	if j.cfg.MaxFiles <= 0 {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("sinks: jsonl: %w", err)
		}
		return j.open()
	}
	_ = os.Remove(fmt.Sprintf("%s.%d", p, j.cfg.MaxFiles))
	for i := j.cfg.MaxFiles - 1; i >= 1; i-- {
		if err := os.Rename(fmt.Sprintf("%s.%d", p, i), fmt.Sprintf("%s.%d", p, i+1)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("sinks: jsonl: %w", err)
		}
	}
	if err := os.Rename(p, p+".1"); err != nil {
		return fmt.Errorf("sinks: jsonl: %w", err)
	}
	return j.open()
}

// Close closes the file.
func (j *JSONL) Close() error { return j.f.Close() }

// FromConfig opens every sink cfg enables, in the order jsonl, otlp, nats.
// On error the sinks already opened are closed.
func FromConfig(ctx context.Context, cfg events.SinksConfig, log *slog.Logger) ([]events.Sink, error) {
	var out []events.Sink
	fail := func(err error) ([]events.Sink, error) {
		for _, s := range out {
			if c, ok := s.(interface{ Close() error }); ok {
				_ = c.Close()
			}
		}
		return nil, err
	}
	if cfg.JSONL.Path != "" {
		s, err := NewJSONL(cfg.JSONL)
		if err != nil {
			return fail(err)
		}
		out = append(out, s)
	}
	if cfg.OTLP.Endpoint != "" {
		s, err := NewOTLP(ctx, cfg.OTLP)
		if err != nil {
			return fail(err)
		}
		out = append(out, s)
	}
	if cfg.NATS.URL != "" {
		s, err := NewNATS(ctx, cfg.NATS, log)
		if err != nil {
			return fail(err)
		}
		out = append(out, s)
	}
	return out, nil
}
