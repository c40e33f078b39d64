// Package payloadlog keeps, for the turns an operator chose (payloadLog in
// the config: per API key, per feature, or a sampled share), the request
// and the answer of the turn as the model and the client saw them: after
// the guardrails' redaction. It is off by default.
//
// A payload is sealed with AES-256-GCM under a key from the environment
// before it reaches the store (the SQLite file payloads.db beside the
// embedded event store, or PostgreSQL in fleet mode); the columns beside
// it (trace id, time, user id hash, key id, feature) are what the store
// filters on and say nothing of what was written. Payloads are kept for a
// retention period (Log.Prune deletes older ones, a bounded batch at a
// time), deleted by user (Log.Forget, a user's right to be forgotten), and
// read only through the admin API.
//
// The pipeline hands a payload over without waiting (Writer.Keep): a
// bounded queue, written in batches in the background under a deadline.
// A payload that cannot be queued or written is counted by reason, never
// lost silently, and the turn never waits for a slow disk.
package payloadlog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// Config is the payloadLog section.
type Config struct {
	// Enabled switches payload logs on; the turns logged are then those of
	// the API keys marked payloadLog, of Features, and a SampleRate share
	// of the others. It needs the sealing key in the environment variable
	// KeyEnv: the gateway refuses to start without it. Default false;
	// takes effect on a restart.
	Enabled bool `yaml:"enabled"`
	// Features are the features every turn of which is logged.
	Features []string `yaml:"features"`
	// SampleRate is the share, 0..1, of the other turns logged. Default 0.
	SampleRate float64 `yaml:"sampleRate"`
	// KeyEnv names the environment variable holding the 32-byte key that
	// seals payloads at rest, in hex (64 characters) or base64. Default
	// FMGATE_PAYLOAD_KEY. A payload sealed under another key does not
	// open: keep the key as long as the payloads it sealed.
	KeyEnv string `yaml:"keyEnv"`
	// Retention is how long a payload is kept after its turn; older ones
	// are deleted every PruneInterval. Default 720h (30 days); at least
	// 1h.
	Retention time.Duration `yaml:"retention"`
	// PruneInterval is how often expired payloads are deleted, at most
	// 10,000 of them each time. Default 10m.
	PruneInterval time.Duration `yaml:"pruneInterval"`
	// Queue bounds the payloads waiting to be written; one more is
	// dropped and counted (fmgate_payload_log_dropped_total{reason=
	// "queue_full"}). Default 1024; at most 65536.
	Queue int `yaml:"queue"`
	// WriteTimeout bounds the write of one batch; a batch that fails or
	// outlasts it is tried once more, then dropped and counted
	// (reason="write_failed"). Default 2s.
	WriteTimeout time.Duration `yaml:"writeTimeout"`
	// CaptureContent exports the prompt and answer of a logged turn as a
	// span event (gen_ai.client.inference.operation.details, with
	// gen_ai.input.messages and gen_ai.output.messages) on its model
	// attempts' spans in the OTLP export; the turns not logged never
	// carry their text there. Default false.
	CaptureContent bool `yaml:"captureContent"`
}

// DefaultKeyEnv is the default of Config.KeyEnv.
const DefaultKeyEnv = "FMGATE_PAYLOAD_KEY"

// Bounds of a Config.
const (
	maxQueue     = 1 << 16
	minRetention = time.Hour
	// PruneBatch is the most rows one delete of Prune removes.
	PruneBatch = 1000
	// pruneRounds bounds the deletes of one Prune.
	pruneRounds = 10
)

// DefaultConfig is payload logs off, with the defaults they take when
// switched on.
func DefaultConfig() Config {
	return Config{KeyEnv: DefaultKeyEnv, Retention: 30 * 24 * time.Hour, PruneInterval: 10 * time.Minute,
		Queue: 1024, WriteTimeout: 2 * time.Second}
}

// Validate names each field that is wrong.
func (c Config) Validate() error {
	var errs []error
	bad := func(field, problem string) { errs = append(errs, fmt.Errorf("%s: %s", field, problem)) }
	if c.SampleRate < 0 || c.SampleRate > 1 || math.IsNaN(c.SampleRate) {
		bad("sampleRate", "must be in 0..1")
	}
	for i, f := range c.Features {
		if f == "" {
			bad(fmt.Sprintf("features[%d]", i), "must not be empty")
		}
	}
	if c.Retention < minRetention {
		bad("retention", "must be at least 1h")
	}
	if c.PruneInterval <= 0 {
		bad("pruneInterval", "must be > 0")
	}
	if c.Queue < 1 || c.Queue > maxQueue {
		bad("queue", fmt.Sprintf("must be in 1..%d", maxQueue))
	}
	if c.WriteTimeout <= 0 {
		bad("writeTimeout", "must be > 0")
	}
	if !envName(c.KeyEnv) {
		bad("keyEnv", "must name an environment variable (letters, digits and _), e.g. "+DefaultKeyEnv)
	}
	if !c.Enabled && (len(c.Features) > 0 || c.SampleRate > 0 || c.CaptureContent) {
		bad("enabled", "is false: features, sampleRate and captureContent apply only with payload logs on")
	}
	return errors.Join(errs...)
}

func envName(s string) bool {
	for i, r := range s {
		if !(r == '_' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return s != ""
}

// Chooses reports whether a turn is logged: payload logs are on, and its
// API key is marked (key), its feature is listed, or draw (uniform in
// [0, 1), fixed per turn) falls within SampleRate.
func (c Config) Chooses(key bool, feature string, draw float64) bool {
	if !c.Enabled {
		return false
	}
	return key || slices.Contains(c.Features, feature) || draw < c.SampleRate
}

// Record is one turn's payload with the columns it is found by.
type Record struct {
	// TraceID is the turn's trace (32 hex): one record per turn.
	TraceID string `json:"traceId"`
	// At is when the turn was received.
	At time.Time `json:"at"`
	// UserHash is the turn's user_id_hash, as its spans carry it.
	UserHash string `json:"userIdHash"`
	// KeyID names the API key the turn came with: a run-time key's id, a
	// configured key's keyed hash; empty without a key.
	KeyID   string `json:"keyId,omitempty"`
	Feature string `json:"feature"`
	// Payload is what is sealed at rest.
	Payload Payload `json:"payload"`
}

// Payload is what a turn was asked and answered, after the guardrails'
// redaction.
type Payload struct {
	Locale  string `json:"locale,omitempty"`
	Surface string `json:"surface,omitempty"`
	// PromptVersion is the system prompt's version (its text is the
	// operator's, versioned by the artifact ledger).
	PromptVersion string `json:"promptVersion,omitempty"`
	// Question is the user's message as the model saw it: redacted, and
	// for a blocked message its text with every finding replaced by its
	// placeholder.
	Question string `json:"question"`
	// History counts the earlier messages sent with it (each stateful
	// turn's own payload holds its text); Images and ToolResults count what
	// the message carried besides its text.
	History     int `json:"history,omitempty"`
	Images      int `json:"images,omitempty"`
	ToolResults int `json:"toolResults,omitempty"`
	// Context is the catalog text retrieved for the question.
	Context string `json:"context,omitempty"`
	// Answer is the answer as the client received it.
	Answer string `json:"answer"`
	// Tier answered (a model tier, cache, faq, graceful); Source is
	// "model" for a model tier, else the tier; ModelID the vendor's model.
	Tier       string     `json:"tier"`
	Source     string     `json:"source"`
	ModelID    string     `json:"modelId,omitempty"`
	Degraded   bool       `json:"degraded,omitempty"`
	StopReason string     `json:"stopReason,omitempty"`
	ToolCalls  []ToolCall `json:"toolCalls,omitempty"`
	// Guardrail lists the guardrails' verdicts on the turn
	// ("blocked:card", "redacted:email"), none when it found nothing.
	Guardrail []string `json:"guardrail,omitempty"`
}

// ToolCall is a tool the model called, with its arguments.
type ToolCall struct {
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input,omitempty"`
}

// Row is a record as a Store keeps it: the payload sealed.
type Row struct {
	TraceID  string
	At       time.Time
	UserHash string
	KeyID    string
	Feature  string
	Sealed   []byte
}

// Filter selects records: From ≤ At < To (zero: unbounded), and the
// columns given. Limit caps the rows (0: no cap).
type Filter struct {
	From, To time.Time
	Feature  string
	UserHash string
	KeyID    string
	Limit    int
}

// Store keeps rows. Put stores a batch in one transaction, keeping a row
// whose trace is stored already as it is (a payload is written once).
// Scan calls fn in At order, then trace order. DeleteBefore deletes at
// most limit rows with At before before, oldest first.
type Store interface {
	Put(ctx context.Context, rows []Row) error
	Get(ctx context.Context, traceID string) (Row, bool, error)
	Scan(ctx context.Context, f Filter, fn func(Row) error) error
	DeleteUser(ctx context.Context, userHash string) (int64, error)
	DeleteBefore(ctx context.Context, before time.Time, limit int) (int64, error)
	Close() error
}

// ErrUnavailable is matched (errors.Is) by every error of a store whose
// database could not be reached or answered too late.
var ErrUnavailable = errors.New("payload store unavailable")
