package events

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Config is the events section of fmgate's YAML.
type Config struct {
	// BufferSize is the capacity, in events, of each sink's queue and of the
	// WAL's intake queue. When a queue is full the event is dropped for that
	// sink and counted. Default 8192; limit 1<<20.
	BufferSize int `yaml:"bufferSize"`
	// BatchSize is the most events handed to one Sink.Write. Default 256.
	BatchSize int `yaml:"batchSize"`
	// WriteTimeout bounds one Sink.Write, and how long a must-persist Emit
	// waits for the log. Default 2s.
	WriteTimeout time.Duration `yaml:"writeTimeout"`
	// GraphVersion is stamped into node.graph_version. Default "v1".
	GraphVersion string `yaml:"graphVersion"`

	WAL     WALConfig     `yaml:"wal"`
	Sinks   SinksConfig   `yaml:"sinks"`
	Privacy PrivacyConfig `yaml:"privacy"`
}

// WALConfig configures the write-ahead log for must-persist events.
type WALConfig struct {
	// Dir holds the log segments and the acknowledgement file. Empty
	// disables the WAL: must-persist events then go straight to the sinks
	// and can be lost in a crash. Default "" (set it in production).
	Dir string `yaml:"dir"`
	// FsyncInterval is how often the log is fsync'd, acknowledgements are
	// persisted and acknowledged segments deleted. A must-persist Emit
	// returns once its record is written to the file (a killed process
	// loses nothing); a power loss can lose the records of the last
	// interval. Default 50ms.
	FsyncInterval time.Duration `yaml:"fsyncInterval"`
	// Batch is the most records written in one go. Default 256.
	Batch int `yaml:"batch"`
	// SegmentBytes rotates the active segment beyond this size; fully
	// acknowledged segments are deleted. Default 16 MiB.
	SegmentBytes int64 `yaml:"segmentBytes"`
}

// SinksConfig lists the optional sinks; each is enabled by setting its
// address (path, endpoint, url).
type SinksConfig struct {
	JSONL JSONLConfig `yaml:"jsonl"`
	OTLP  OTLPConfig  `yaml:"otlp"`
	NATS  NATSConfig  `yaml:"nats"`
}

// JSONLConfig configures the JSON-lines file sink.
type JSONLConfig struct {
	// Path of the live file; rotated files get ".1", ".2", … Empty disables.
	Path string `yaml:"path"`
	// MaxBytes rotates the file before it would exceed this size. Default
	// 64 MiB.
	MaxBytes int64 `yaml:"maxBytes"`
	// MaxFiles is how many rotated files are kept besides the live one.
	// Default 5.
	MaxFiles int `yaml:"maxFiles"`
}

// OTLPConfig configures export of spans over OTLP/HTTP.
type OTLPConfig struct {
	// Endpoint is host:port (e.g. "127.0.0.1:4318") or a full URL
	// ("http://collector:4318/v1/traces"). Empty disables.
	Endpoint string `yaml:"endpoint"`
	// Insecure uses plain HTTP for a host:port endpoint. Default false.
	Insecure bool `yaml:"insecure"`
}

// NATSConfig configures publishing to NATS JetStream.
type NATSConfig struct {
	// URL of the NATS server, e.g. "nats://127.0.0.1:4222". Empty disables.
	URL string `yaml:"url"`
	// Subject events are published on. Default "fmgate.events".
	Subject string `yaml:"subject"`
	// Stream is created (capturing Subject) if missing. Default
	// "FMGATE_EVENTS".
	Stream string `yaml:"stream"`
	// MaxAge and MaxBytes bound a stream this sink creates: while no
	// ingester drains it, spans wait up to this long and this much, the
	// oldest discarded first. Defaults 72h and 8 GiB; 0 means no bound.
	// An existing stream keeps its own limits.
	MaxAge   time.Duration `yaml:"maxAge"`
	MaxBytes int64         `yaml:"maxBytes"`
}

// PrivacyConfig controls what identifying data events may carry.
type PrivacyConfig struct {
	// HashSecret keys the user id hash. Empty draws a random key at start
	// (hashes then do not join across restarts). When set: at least 16 bytes.
	HashSecret string `yaml:"hashSecret"`
	// Excerpt allows a redacted prompt_excerpt in events. Default false.
	Excerpt bool `yaml:"excerpt"`
	// ExcerptChars caps the excerpt, in characters. Default 200; limit 2000.
	ExcerptChars int `yaml:"excerptChars"`
}

// DefaultConfig returns the MangaAssist defaults: in-process only (no WAL
// directory, no external sinks), excerpts off.
func DefaultConfig() Config {
	return Config{
		BufferSize:   8192,
		BatchSize:    256,
		WriteTimeout: 2 * time.Second,
		GraphVersion: "v1",
		WAL: WALConfig{
			FsyncInterval: 50 * time.Millisecond,
			Batch:         256,
			SegmentBytes:  16 << 20,
		},
		Sinks: SinksConfig{
			JSONL: JSONLConfig{MaxBytes: 64 << 20, MaxFiles: 5},
			NATS:  NATSConfig{Subject: "fmgate.events", Stream: "FMGATE_EVENTS", MaxAge: 72 * time.Hour, MaxBytes: 8 << 30},
		},
		Privacy: PrivacyConfig{ExcerptChars: 200},
	}
}

// Validate reports every problem in c, each as "field: problem".
func (c Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}
	if c.BufferSize <= 0 || c.BufferSize > 1<<20 {
		bad("bufferSize", "must be in 1..%d", 1<<20)
	}
	if c.BatchSize <= 0 {
		bad("batchSize", "must be > 0")
	}
	if c.WriteTimeout <= 0 {
		bad("writeTimeout", "must be > 0")
	}
	if c.WAL.Dir != "" {
		if c.WAL.FsyncInterval <= 0 {
			bad("wal.fsyncInterval", "must be > 0")
		}
		if c.WAL.Batch <= 0 {
			bad("wal.batch", "must be > 0")
		}
		if c.WAL.SegmentBytes < 1<<10 {
			bad("wal.segmentBytes", "must be >= 1024")
		}
	}
	if j := c.Sinks.JSONL; j.Path != "" {
		if j.MaxBytes < 1<<10 {
			bad("sinks.jsonl.maxBytes", "must be >= 1024")
		}
		if j.MaxFiles < 0 {
			bad("sinks.jsonl.maxFiles", "must be >= 0")
		}
	}
	if n := c.Sinks.NATS; n.URL != "" {
		if n.Subject == "" || strings.ContainsAny(n.Subject, " \t*>") {
			bad("sinks.nats.subject", "must be a literal subject without spaces or wildcards")
		}
		if n.Stream == "" || strings.ContainsAny(n.Stream, " \t.*>/\\") {
			bad("sinks.nats.stream", "must be a name without spaces, dots, wildcards or slashes")
		}
		if n.MaxAge < 0 || n.MaxBytes < 0 {
			bad("sinks.nats", "maxAge and maxBytes must be >= 0")
		}
	}
	if s := c.Privacy.HashSecret; s != "" && len(s) < 16 {
		bad("privacy.hashSecret", "must be at least 16 bytes")
	}
	if c.Privacy.Excerpt && (c.Privacy.ExcerptChars <= 0 || c.Privacy.ExcerptChars > 2000) {
		bad("privacy.excerptChars", "must be in 1..2000 when excerpt is on")
	}
	return errors.Join(errs...)
}
