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
	// BatchWait is how long a sink's batch, once its first event is in,
	// waits for more (up to BatchSize) before the sink writes it: fewer,
	// larger writes (the event store commits a transaction per write, OTLP
	// posts a request). Events reach the sinks this much later; a turn
	// never waits for it. Default 20ms; 0 writes what is queued at once.
	BatchWait time.Duration `yaml:"batchWait"`
	// WriteTimeout bounds one Sink.Write, and how long a must-persist Emit
	// waits for the log. Default 2s.
	WriteTimeout time.Duration `yaml:"writeTimeout"`
	// GraphVersion is stamped into node.graph_version. Default "v1".
	GraphVersion string `yaml:"graphVersion"`

	WAL     WALConfig     `yaml:"wal"`
	Sinks   SinksConfig   `yaml:"sinks"`
	Privacy PrivacyConfig `yaml:"privacy"`
	// Sampling thins the trace export and the raw span log; see
	// SamplingConfig.
	Sampling SamplingConfig `yaml:"sampling"`
}

// SamplingConfig decides which turns' traces are kept in full. A turn is
// sampled when its head decision says so (Rate of new traces, or the sampled
// flag of an incoming traceparent) or, at its end, when it failed, fell back
// or was slow; the turn span of a turn that was not records it
// (Event.SampledOut). The OTLP export receives only sampled turns; the JSONL
// span log receives every span of sampled turns and the turn and
// must-persist (cost) records of the others, the spans waiting for their
// turn's decision in a bounded buffer. The NATS stream receives everything;
// the event stores (embedded, or PostgreSQL through fmgate ingest) receive
// everything too, sum every span into their roll-ups, and keep in full only
// what the span log keeps: the other spans of an unsampled turn are reduced
// to the figures the views sum. With Enabled false every turn is sampled.
type SamplingConfig struct {
	// Enabled switches sampling on. Default true.
	Enabled bool `yaml:"enabled"`
	// Rate is the share of new traces sampled at their start, 0..1.
	// Default 0.05.
	Rate float64 `yaml:"rate"`
	// SlowTurn: a turn lasting at least this long is always sampled.
	// Default 3s (the first-byte goal).
	SlowTurn time.Duration `yaml:"slowTurn"`
	// MaxPendingTraces bounds the traces whose spans wait for a decision;
	// beyond it the oldest is kept whole. Default 10,000.
	MaxPendingTraces int `yaml:"maxPendingTraces"`
	// PendingTTL keeps a trace's spans whole when its turn has not ended
	// this long after its first span. Default 5m.
	PendingTTL time.Duration `yaml:"pendingTTL"`
}

// WALConfig configures the write-ahead log for must-persist events.
type WALConfig struct {
	// Dir holds the log segments and the acknowledgement file. Empty
	// disables the WAL: must-persist events then go straight to the sinks
	// and can be lost in a crash. Default "" (set it in production).
	Dir string `yaml:"dir"`
	// FsyncInterval is how often the log is fsync'd and acknowledged
	// segments deleted (the acknowledgements are persisted every second). A must-persist Emit
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
	// Providers names each model tier's vendor as OpenTelemetry's GenAI
	// conventions do (gen_ai.provider.name: anthropic, aws.bedrock,
	// openai), by tier name, for the model attempts' spans; nil names
	// none. Set by the server from the models in force, not read from the
	// file.
	Providers func(tier string) string `yaml:"-" json:"-"`
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
		BatchWait:    20 * time.Millisecond,
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
		Privacy:  PrivacyConfig{ExcerptChars: 200},
		Sampling: SamplingConfig{Enabled: true, Rate: 0.05, SlowTurn: 3 * time.Second, MaxPendingTraces: 10_000, PendingTTL: 5 * time.Minute},
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
	if c.BatchWait < 0 || c.BatchWait > time.Second {
		bad("batchWait", "must be in 0..1s")
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
	if sm := c.Sampling; sm.Enabled {
		if !(sm.Rate >= 0 && sm.Rate <= 1) {
			bad("sampling.rate", "must be in 0..1")
		}
		if sm.SlowTurn <= 0 {
			bad("sampling.slowTurn", "must be > 0")
		}
		if sm.MaxPendingTraces <= 0 {
			bad("sampling.maxPendingTraces", "must be > 0")
		}
		if sm.PendingTTL <= 0 {
			bad("sampling.pendingTTL", "must be > 0")
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
