package breaker

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Factory builds the breaker for one name. onTransition is the Set's hook
// (never nil) to install on the breaker.
type Factory func(name string, cfg Config, onTransition TransitionFunc) Breaker

// MemoryFactory builds Memory breakers reading the clock now.
func MemoryFactory(now func() time.Time) Factory {
	return func(name string, cfg Config, onTransition TransitionFunc) Breaker {
		b := NewMemory(name, cfg, now)
		b.OnTransition = onTransition
		return b
	}
}

// RedisFactory builds Redis breakers sharing client, with keys under
// keyPrefix and calls bounded by timeout (zero: DefaultRedisTimeout).
func RedisFactory(client redis.UniversalClient, keyPrefix string, timeout time.Duration) Factory {
	return func(name string, cfg Config, onTransition TransitionFunc) Breaker {
		b := NewRedis(client, keyPrefix, name, cfg)
		b.OnTransition = onTransition
		b.Timeout = timeout
		return b
	}
}

// SetOption configures a Set.
type SetOption func(*Set)

// WithTransitionHook reports every state change of every breaker in the set
// (for logs and metrics).
func WithTransitionHook(fn TransitionFunc) SetOption {
	return func(s *Set) { s.hook = fn }
}

// Set holds one breaker per model and dependency. It is safe for concurrent
// use.
type Set struct {
	factory Factory
	hook    TransitionFunc

	mu       sync.RWMutex
	breakers map[string]Breaker
}

// NewSet builds a breaker for every entry of configs. Names not in configs
// get a DefaultConfig breaker on first Get, so that every model is guarded.
func NewSet(factory Factory, configs map[string]Config, opts ...SetOption) *Set {
	s := &Set{factory: factory, breakers: make(map[string]Breaker, len(configs))}
	for _, o := range opts {
		o(s)
	}
	for name, cfg := range configs {
		s.breakers[name] = factory(name, cfg, s.transition)
	}
	return s
}

func (s *Set) transition(name string, from, to State) {
	if s.hook != nil {
		s.hook(name, from, to)
	}
}

// Get returns the named breaker, creating a DefaultConfig one if the name
// was not configured.
func (s *Set) Get(name string) Breaker {
	if b, ok := s.lookup(name); ok {
		return b // DefaultConfig allocates: only a new breaker needs it
	}
	return s.GetOr(name, DefaultConfig())
}

func (s *Set) lookup(name string) (Breaker, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	b, ok := s.breakers[name]
	return b, ok
}

// GetOr returns the named breaker, creating one with cfg if there is none
// yet (a model tier's deployment added while running takes its tier's).
func (s *Set) GetOr(name string, cfg Config) Breaker {
	if b, ok := s.lookup(name); ok {
		return b
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if b, ok := s.breakers[name]; ok {
		return b
	}
	b := s.factory(name, cfg, s.transition)
	s.breakers[name] = b
	return b
}

// Snapshots returns every breaker's snapshot by name, for the admin API and
// metrics. A breaker whose state cannot be read appears with only Name and
// Error set.
func (s *Set) Snapshots(ctx context.Context) map[string]Snapshot {
	s.mu.RLock()
	all := make(map[string]Breaker, len(s.breakers))
	for n, b := range s.breakers {
		all[n] = b
	}
	s.mu.RUnlock()
	out := make(map[string]Snapshot, len(all))
	for n, b := range all {
		snap, err := b.Snapshot(ctx)
		if err != nil {
			snap = Snapshot{Name: n, Error: err.Error()}
		}
		out[n] = snap
	}
	return out
}
