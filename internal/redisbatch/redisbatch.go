// Package redisbatch sends the Redis work of one turn in as few round trips
// as the turn's data dependencies allow, without changing what any policy
// sends or decides.
//
// Two mechanisms, both scoped to a Batch carried by the turn's context:
//
//   - Gather runs independent calls at once (the admission reads, the record
//     writes) and sends the commands they issue together, as one pipeline:
//     the policies run their own code, scripts, timeouts and outage rules
//     unchanged, and only the transport is shared.
//   - Later queues a script whose reply the caller does not wait for (a
//     quota settlement, a breaker outcome, a retry-budget deposit). It is sent
//     ahead of the turn's next command, in the same pipeline, or by Flush at
//     the end of the turn. Redis runs a pipeline in order, so every command
//     sees the queued writes, as if each had been sent on its own.
//
// Hook must be installed on the client before any other hook (redishealth's
// included), so that a pipeline the batch sends is counted, guarded and
// timed as one call. Without a Batch in the context every command goes
// straight through.
//
// The client must be a single Redis server (redis.Client): a pipeline of
// keys from several policies spans many hash slots, which Redis Cluster
// would split per node.
package redisbatch

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultTimeout bounds a flush of queued writes, and any pipeline whose
// callers set no deadline of their own.
const DefaultTimeout = 250 * time.Millisecond

// Batch is the Redis work of one turn. It is safe for concurrent use.
type Batch struct {
	c       redis.UniversalClient
	timeout time.Duration
	log     *slog.Logger

	mu     sync.Mutex
	later  []*laterCmd
	closed bool
	// flushing is closed when the queued writes on their way now have
	// been answered; nil when none are. The batch's other commands wait
	// for it, so that none overtakes a write queued before it.
	flushing chan struct{}
}

// New returns a batch sending on c; Flush and pipelines without a caller's
// deadline are bounded by timeout (DefaultTimeout when <= 0). log, when not
// nil, hears about queued writes that failed.
func New(c redis.UniversalClient, timeout time.Duration, log *slog.Logger) *Batch {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return &Batch{c: c, timeout: timeout, log: log}
}

type batchKey struct{}

// With returns ctx carrying b.
func With(ctx context.Context, b *Batch) context.Context {
	return context.WithValue(ctx, batchKey{}, b)
}

// From returns the batch ctx carries, or nil.
func From(ctx context.Context) *Batch {
	b, _ := ctx.Value(batchKey{}).(*Batch)
	return b
}

// sendingKey marks the context of a pipeline the batch itself sends, which
// the hook lets through.
type sendingKey struct{}

func sending(ctx context.Context) bool { return ctx.Value(sendingKey{}) != nil }

// laterCmd is one queued script call.
type laterCmd struct {
	script *redis.Script
	keys   []string
	args   func(age time.Duration) []any
	at     time.Time
	done   func(*redis.Cmd)
	cmd    *redis.Cmd
}

// Later queues a call of script for the batch ctx carries (see the package
// comment) and reports true. args builds the script's arguments when it is
// sent, given how long it waited (a script that reads Redis TIME can date
// its decision back); done, when not nil, is given the reply once it came,
// or its error. It reports false, queuing nothing, when ctx carries no
// open batch: the caller then sends the call itself. Use it only for calls
// whose outcome the caller would not act on before the turn ends.
func Later(ctx context.Context, s *redis.Script, keys []string, args func(age time.Duration) []any, done func(*redis.Cmd)) bool {
	b := From(ctx)
	return b != nil && b.queue(&laterCmd{script: s, keys: keys, args: args, at: time.Now(), done: done})
}

// queue adds l unless the batch is closed.
func (b *Batch) queue(l *laterCmd) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	b.later = append(b.later, l)
	return true
}

// takeLater waits until no queued write of the batch is on its way, then
// removes and returns the queued writes. When it returns some, the caller
// sends them ahead of its own commands and calls sent once they were
// answered. It fails only when ctx ends while it waits.
func (b *Batch) takeLater(ctx context.Context) (l []*laterCmd, sent func(), err error) {
	for {
		b.mu.Lock()
		if w := b.flushing; w != nil {
			b.mu.Unlock()
			select {
			case <-w:
				continue
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
		}
		l, b.later = b.later, nil
		if len(l) == 0 {
			b.mu.Unlock()
			return nil, func() {}, nil
		}
		w := make(chan struct{})
		b.flushing = w
		b.mu.Unlock()
		return l, func() {
			b.mu.Lock()
			b.flushing = nil
			b.mu.Unlock()
			close(w)
		}, nil
	}
}

// AfterQueued runs fn once the writes queued so far on the batch ctx
// carries have been sent and answered (or failed), and reports true. It
// reports false, doing nothing, when ctx carries no batch or nothing is
// queued or on its way: the caller then runs fn itself. A caller that
// wakes others after a queued write (a released quota hold wakes the
// queue) uses it so they do not look before the write landed.
func AfterQueued(ctx context.Context, fn func()) bool {
	b := From(ctx)
	if b == nil {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if n := len(b.later); n > 0 {
		l := b.later[n-1]
		prev := l.done
		l.done = func(c *redis.Cmd) {
			if prev != nil {
				prev(c)
			}
			fn()
		}
		return true
	}
	if w := b.flushing; w != nil {
		go func() { <-w; fn() }()
		return true
	}
	return false
}

// Pending is how many writes are queued.
func (b *Batch) Pending() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.later)
}

// Flush sends the queued writes now, in one round trip, and waits for
// them (at most the batch's timeout). Nothing is sent when none is queued.
func (b *Batch) Flush(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.timeout)
	defer cancel()
	l, sent, err := b.takeLater(ctx)
	if err != nil || len(l) == 0 {
		return
	}
	defer sent()
	b.send(ctx, l, nil)
}

// Close flushes the queued writes and closes the batch: Later on its
// context then queues nothing, and callers send at once. Work that outlives
// the turn (a background grader) then never queues a write nobody sends.
func (b *Batch) Close(ctx context.Context) {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.Flush(ctx)
}

// send runs the queued writes, then cmds, as one pipeline under ctx. A
// queued script Redis no longer knows (NOSCRIPT, after a restart) is sent
// again with its source.
//
// Queued writes are owed whatever became of the turn: the pipeline that
// carries them does not end when ctx is cancelled (the client hung up), only
// at ctx's deadline or the batch's timeout, whichever is later.
func (b *Batch) send(ctx context.Context, later []*laterCmd, cmds []redis.Cmder) {
	if len(later) > 0 {
		bound := time.Now().Add(b.timeout)
		if dl, ok := ctx.Deadline(); ok && dl.After(bound) {
			bound = dl
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(context.WithoutCancel(ctx), bound)
		defer cancel()
	}
	ctx = context.WithValue(ctx, sendingKey{}, true)
	pipe := b.c.Pipeline()
	now := time.Now()
	args := make([][]any, len(later))
	for i, l := range later {
		args[i] = l.args(now.Sub(l.at))
		l.cmd = l.script.EvalSha(ctx, pipe, l.keys, args[i]...)
	}
	for _, c := range cmds {
		_ = pipe.Process(ctx, c)
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error
	for i, l := range later {
		if err := l.cmd.Err(); err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
			l.cmd = l.script.Eval(ctx, b.c, l.keys, args[i]...)
		}
		if err := l.cmd.Err(); err != nil && !errors.Is(err, redis.Nil) && b.log != nil {
			b.log.LogAttrs(ctx, slog.LevelDebug, "redis: queued write failed", slog.String("keys", strings.Join(l.keys, " ")), slog.Any("err", err))
		}
		if l.done != nil {
			l.done(l.cmd)
		}
	}
}

// Hook is the go-redis hook that routes a turn's commands through its
// batch. Install it first on the client (see the package comment).
func Hook() redis.Hook { return hook{} }

type hook struct{}

func (hook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (hook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if sending(ctx) || handshake(cmd) {
			return next(ctx, cmd)
		}
		if g := groupFrom(ctx); g != nil {
			return g.do(ctx, []redis.Cmder{cmd})
		}
		if b := From(ctx); b != nil {
			l, sent, err := b.takeLater(ctx)
			if err != nil {
				cmd.SetErr(err)
				return err
			}
			if len(l) > 0 {
				defer sent()
				b.send(ctx, l, []redis.Cmder{cmd})
				return cmd.Err()
			}
		}
		return next(ctx, cmd)
	}
}

func (hook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if sending(ctx) || isTx(cmds) || (len(cmds) > 0 && handshake(cmds[0])) {
			return next(ctx, cmds) // go-redis reads a transaction's replies its own way
		}
		if g := groupFrom(ctx); g != nil {
			return g.do(ctx, cmds)
		}
		if b := From(ctx); b != nil {
			l, sent, err := b.takeLater(ctx)
			if err != nil {
				for _, c := range cmds {
					c.SetErr(err)
				}
				return err
			}
			if len(l) > 0 {
				defer sent()
				b.send(ctx, l, cmds)
				return firstErr(cmds)
			}
		}
		return next(ctx, cmds)
	}
}

func firstErr(cmds []redis.Cmder) error {
	for _, c := range cmds {
		if err := c.Err(); err != nil {
			return err
		}
	}
	return nil
}

func isTx(cmds []redis.Cmder) bool { return len(cmds) > 0 && cmds[0].Name() == "multi" }

// handshake reports a command go-redis sends while opening a connection,
// under the context of the command that needed it: it belongs to that
// connection and is never held or combined.
func handshake(cmd redis.Cmder) bool {
	switch cmd.Name() {
	case "hello", "auth", "client", "select", "readonly":
		return true
	}
	return false
}
