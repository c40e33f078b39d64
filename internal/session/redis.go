package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fmgate/fmgate/internal/provider"
)

// DefaultRedisTimeout bounds each Redis call of a Redis store.
const DefaultRedisTimeout = 250 * time.Millisecond

// ErrUnavailable is matched (errors.Is) by every error of a store whose
// backing service could not be reached or answered too late: the turn goes
// on without history.
var ErrUnavailable = errors.New("session store unavailable")

// Redis is a Store shared by a fleet of gateways: a conversation continues
// whichever instance answers its next turn. Each session is one Redis list
// of exchanges under prefix, holding at most maxExchanges of them and
// expiring ttl after its last exchange (the memory store's idle TTL). An
// exchange is appended, the list trimmed and its expiry renewed by one Lua
// script: one round trip, atomic, so concurrent turns of one session never
// leave it longer than its bound or half written.
//
// Every call is bounded by Timeout; a call that fails or times out returns
// an error matching ErrUnavailable. Redis does not evict idle sessions
// before their TTL (there is no MaxSessions bound): size the server's
// memory, or set its maxmemory-policy to volatile-lru.
type Redis struct {
	client       redis.UniversalClient
	prefix       string
	maxExchanges int
	ttl          time.Duration
	// Timeout bounds each call; zero means DefaultRedisTimeout.
	Timeout time.Duration
}

// NewRedis returns a Redis store keeping maxExchanges exchanges per session
// under keys starting with prefix, each session forgotten ttl after its
// last exchange.
func NewRedis(client redis.UniversalClient, prefix string, maxExchanges int, ttl time.Duration) *Redis {
	return &Redis{client: client, prefix: prefix, maxExchanges: maxExchanges, ttl: ttl}
}

// key names owner's session. The owner's length comes first, so that no
// pair of ids collides with another whatever bytes they hold.
func (r *Redis) key(owner, sessionID string) string {
	return r.prefix + strconv.Itoa(len(owner)) + ":" + owner + ":" + sessionID
}

// exchange is one stored list element.
type exchange struct {
	User      string `json:"u"`
	Assistant string `json:"a"`
}

// appendScript pushes one exchange, keeps the last ARGV[2] and renews the
// expiry to ARGV[3] milliseconds.
var appendScript = redis.NewScript(`
redis.call('RPUSH', KEYS[1], ARGV[1])
redis.call('LTRIM', KEYS[1], -tonumber(ARGV[2]), -1)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
`)

func (r *Redis) timeout() time.Duration {
	if r.Timeout > 0 {
		return r.Timeout
	}
	return DefaultRedisTimeout
}

// History implements Store.
func (r *Redis) History(ctx context.Context, owner, sessionID string) ([]provider.Message, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout())
	defer cancel()
	items, err := r.client.LRange(ctx, r.key(owner, sessionID), 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("%w: reading history: %w", ErrUnavailable, err)
	}
	if len(items) == 0 {
		return nil, nil
	}
	out := make([]provider.Message, 0, 2*len(items))
	for _, it := range items {
		var x exchange
		if err := json.Unmarshal([]byte(it), &x); err != nil {
			// Not written by this store: skip it rather than fail the turn.
			continue
		}
		out = append(out,
			provider.Message{Role: provider.RoleUser, Content: x.User},
			provider.Message{Role: provider.RoleAssistant, Content: x.Assistant})
	}
	return out, nil
}

// Append implements Store.
func (r *Redis) Append(ctx context.Context, owner, sessionID, user, assistant string) error {
	if r.maxExchanges == 0 {
		return nil
	}
	b, err := json.Marshal(exchange{User: user, Assistant: assistant})
	if err != nil {
		return fmt.Errorf("session: encoding exchange: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, r.timeout())
	defer cancel()
	ttl := max(r.ttl.Milliseconds(), 1)
	if err := appendScript.Run(ctx, r.client, []string{r.key(owner, sessionID)}, b, r.maxExchanges, ttl).Err(); err != nil {
		return fmt.Errorf("%w: appending exchange: %w", ErrUnavailable, err)
	}
	return nil
}
