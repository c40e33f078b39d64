// Package artifacts is fmgate's artifact ledger: the versions of everything a
// turn touches. A prompt is versioned by its content (name@sha12 of the
// text), the graph by the pipeline's configured version and a hash of its
// configuration, models by their provider ids. Every span carries the
// versions it used, and GET /admin/versions lists what is live.
//
// The system prompt is the one artifact that switches without a restart: the
// Ledger re-reads its source (the config file and the prompt file it names)
// on Reload, which Watch calls on an interval and the server calls on SIGHUP
// and POST /admin/versions/reload. A new turn takes the prompt in force when
// it starts; turns in flight keep theirs.
package artifacts

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Prompt is one version of a system prompt.
type Prompt struct {
	Name string `json:"name"`
	// Version is Name@sha12: the first 12 hex digits of the SHA-256 of Text.
	Version string `json:"version"`
	// Path is the file the text came from ("" for a prompt inline in the
	// config).
	Path     string    `json:"path"`
	Active   bool      `json:"active"`
	LoadedAt time.Time `json:"loadedAt"`
	Text     string    `json:"-"`
}

// Version labels a prompt text: name@sha12.
func Version(name, text string) string { return name + "@" + Hash12([]byte(text)) }

// Hash12 is the first 12 hex digits of the SHA-256 of b.
func Hash12(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:6])
}

// Graph is the pipeline's version.
type Graph struct {
	// Version is the configured label (events.graphVersion, e.g. "v17.4").
	Version string `json:"version"`
	// ConfigHash is sha12 of the effective configuration without secrets:
	// it changes when the pipeline's settings change under the same label.
	ConfigHash string `json:"configHash"`
}

// Model is a model tier and the provider's id for it.
type Model struct {
	Name     string `json:"name"`
	ModelID  string `json:"modelId"`
	Provider string `json:"provider"`
}

// Tool is a tool the pipeline calls, by id and semver.
type Tool struct {
	ID      string `json:"id"`
	Version string `json:"version"`
}

// PromptSource reads the prompt in force: its name, text and the file it
// came from. It is called on every Reload, so it should re-read its files.
type PromptSource func() (name, text, path string, err error)

// Ledger holds the live versions. It is safe for concurrent use.
type Ledger struct {
	graph  Graph
	models []Model
	// embeddings are the embedding tiers, listed apart from the models:
	// nothing that reads models (the primary, the cost views) means them.
	embeddings []Model
	tools      []Tool
	source     PromptSource
	now        func() time.Time
	log        *slog.Logger

	active atomic.Pointer[Prompt]
	mu     sync.Mutex // serializes Reload and guards seen, graph, models and embeddings
	seen   []Prompt   // every prompt version loaded since start, oldest first
}

// maxSeen bounds the prompt versions /admin/versions remembers.
const maxSeen = 50

// New loads the prompt from source and returns the ledger. now and log may
// be nil.
func New(graph Graph, models []Model, tools []Tool, source PromptSource, now func() time.Time, log *slog.Logger) (*Ledger, error) {
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	l := &Ledger{graph: graph, models: models, tools: tools, source: source, now: now, log: log}
	if _, err := l.Reload(); err != nil {
		return nil, err
	}
	return l, nil
}

// Active returns the text and version of the prompt in force.
func (l *Ledger) Active() (text, version string) {
	p := l.active.Load()
	return p.Text, p.Version
}

// Graph returns the pipeline's version.
func (l *Ledger) Graph() Graph {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.graph
}

// SetConfigHash records the hash of the configuration a reload put in
// force; the graph's label stays.
func (l *Ledger) SetConfigHash(h string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.graph.ConfigHash = h
}

// SetModels replaces the models listed, after a config reload.
func (l *Ledger) SetModels(models []Model) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.models = models
}

// SetEmbeddings replaces the embedding tiers listed, at start and after a
// config reload.
func (l *Ledger) SetEmbeddings(embeddings []Model) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.embeddings = embeddings
}

// Reload re-reads the prompt source. It reports whether the active version
// changed. On error the prompt in force stays and the error says why.
func (l *Ledger) Reload() (changed bool, err error) {
	name, text, path, err := l.source()
	if err != nil {
		return false, fmt.Errorf("artifacts: reload prompt: %w", err)
	}
	return l.Use(name, text, path)
}

// Use puts the prompt text (named name, read from path when it came from
// a file) in force, as Reload does with what the source returns: a config
// reload hands the prompt of the config it applied. It reports whether
// the active version changed.
func (l *Ledger) Use(name, text, path string) (changed bool, err error) {
	if text == "" {
		return false, fmt.Errorf("artifacts: reload prompt: %s: the prompt text is empty", name)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	v := Version(name, text)
	old := l.active.Load()
	if old != nil && old.Version == v && old.Path == path {
		return false, nil
	}
	p := &Prompt{Name: name, Version: v, Path: path, Text: text, LoadedAt: l.now().UTC()}
	l.active.Store(p)
	l.remember(*p)
	if old != nil {
		l.log.Info("prompt version switched", "from", old.Version, "to", v, "path", path)
	}
	return old == nil || old.Version != v, nil
}

func (l *Ledger) remember(p Prompt) {
	for i := range l.seen {
		if l.seen[i].Version == p.Version {
			l.seen = append(l.seen[:i], l.seen[i+1:]...)
			break
		}
	}
	l.seen = append(l.seen, p)
	if len(l.seen) > maxSeen {
		l.seen = l.seen[len(l.seen)-maxSeen:]
	}
}

// Watch calls Reload every interval until ctx ends, logging failures (a bad
// edit keeps the prompt in force).
func (l *Ledger) Watch(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	var lastErr string
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := l.Reload(); err != nil {
			if err.Error() != lastErr {
				l.log.Warn("prompt reload failed; keeping the prompt in force", "err", err)
			}
			lastErr = err.Error()
			continue
		}
		lastErr = ""
	}
}

// Versions is the body of GET /admin/versions.
type Versions struct {
	Graph   Graph    `json:"graph"`
	Prompts []Prompt `json:"prompts"`
	Models  []Model  `json:"models"`
	// Embeddings are the embedding tiers, in their cascade order.
	Embeddings []Model `json:"embeddings"`
	Tools      []Tool  `json:"tools"`
}

// Versions lists what is live: the graph, the prompt versions loaded since
// start (the active one flagged), the models, the embedding tiers and the
// tools.
func (l *Ledger) Versions() Versions {
	l.mu.Lock()
	defer l.mu.Unlock()
	active := l.active.Load().Version
	ps := make([]Prompt, len(l.seen))
	for i, p := range l.seen {
		p.Active = p.Version == active
		ps[i] = p
	}
	v := Versions{Graph: l.graph, Prompts: ps, Models: l.models, Embeddings: l.embeddings, Tools: l.tools}
	if v.Models == nil {
		v.Models = []Model{}
	}
	if v.Embeddings == nil {
		v.Embeddings = []Model{}
	}
	if v.Tools == nil {
		v.Tools = []Tool{}
	}
	return v
}

// Handler serves GET /admin/versions and POST /admin/versions/reload. Mount
// it behind the admin token.
func (l *Ledger) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /admin/versions", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, l.Versions())
	})
	mux.HandleFunc("POST /admin/versions/reload", func(w http.ResponseWriter, _ *http.Request) {
		changed, err := l.Reload()
		if err != nil {
			writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"error": map[string]string{
				"code": "invalid_config", "message": err.Error() + "; the prompt in force is unchanged"}})
			return
		}
		_, v := l.Active()
		writeJSON(w, http.StatusOK, map[string]any{"changed": changed, "active": v})
	})
	return mux
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}
