// Package session keeps the recent conversation of each chat session, so
// every turn carries its context to the model. The in-memory store is the
// embedded default; it bounds both the exchanges kept per session and the
// number of sessions, evicting the least recently used.
package session

import (
	"container/list"
	"context"
	"sync"
	"time"

	"github.com/fmgate/fmgate/internal/provider"
)

// Store keeps conversation history per session. A session belongs to the
// caller that owns it: the same session id sent by another caller names
// another, separate conversation, so no caller ever reads or extends
// someone else's history.
type Store interface {
	// History returns owner's session messages, oldest first.
	History(ctx context.Context, owner, sessionID string) ([]provider.Message, error)
	// Append records one exchange of owner's session: the user's message
	// and the answer.
	Append(ctx context.Context, owner, sessionID, user, assistant string) error
}

// Memory is an in-memory Store.
type Memory struct {
	maxExchanges int
	maxSessions  int
	ttl          time.Duration
	now          func() time.Time

	mu       sync.Mutex
	lru      *list.List // of *entry, front = most recent
	sessions map[memoryKey]*list.Element
}

// memoryKey is the owner and the session id: as a pair, no two sessions of
// different owners collide, and a turn's lookups build no joined string.
type memoryKey [2]string

type entry struct {
	id       memoryKey
	messages []provider.Message
	touched  time.Time
}

// NewMemory returns a store keeping maxExchanges exchanges (user message and
// answer) per session, at most maxSessions sessions, each forgotten after ttl
// without activity. now may be nil for time.Now.
func NewMemory(maxExchanges, maxSessions int, ttl time.Duration, now func() time.Time) *Memory {
	if now == nil {
		now = time.Now
	}
	return &Memory{
		maxExchanges: maxExchanges,
		maxSessions:  maxSessions,
		ttl:          ttl,
		now:          now,
		lru:          list.New(),
		sessions:     make(map[memoryKey]*list.Element),
	}
}

// History implements Store.
func (m *Memory) History(_ context.Context, owner, sessionID string) ([]provider.Message, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	el, ok := m.sessions[memoryKey{owner, sessionID}]
	if !ok {
		return nil, nil
	}
	e := el.Value.(*entry)
	if m.now().Sub(e.touched) > m.ttl {
		m.remove(el)
		return nil, nil
	}
	out := make([]provider.Message, len(e.messages))
	copy(out, e.messages)
	return out, nil
}

// Append implements Store.
func (m *Memory) Append(_ context.Context, owner, sessionID, user, assistant string) error {
	if m.maxExchanges == 0 {
		return nil
	}
	key := memoryKey{owner, sessionID}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	el, ok := m.sessions[key]
	if !ok {
		el = m.lru.PushFront(&entry{id: key})
		m.sessions[key] = el
		for m.lru.Len() > m.maxSessions {
			m.remove(m.lru.Back())
		}
	}
	m.lru.MoveToFront(el)
	e := el.Value.(*entry)
	if now.Sub(e.touched) > m.ttl {
		e.messages = e.messages[:0]
	}
	e.touched = now
	e.messages = append(e.messages,
		provider.Message{Role: provider.RoleUser, Content: user},
		provider.Message{Role: provider.RoleAssistant, Content: assistant})
	if extra := len(e.messages) - 2*m.maxExchanges; extra > 0 {
		e.messages = append(e.messages[:0], e.messages[extra:]...)
	}
	return nil
}

// Len reports how many sessions are held.
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lru.Len()
}

func (m *Memory) remove(el *list.Element) {
	delete(m.sessions, el.Value.(*entry).id)
	m.lru.Remove(el)
}
