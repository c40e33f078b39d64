package redisbatch

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Gather runs fns at once and waits for all of them. The Redis commands
// they issue through a hooked client are held until every fn still running
// is waiting on one, then sent together, with the batch's queued writes in
// front, as one pipeline: n independent calls cost one round trip. A fn
// that issues a second command after the first reply (a script Redis had
// forgotten, sent again with its source) makes a second pipeline. Each fn's
// context keeps its deadline: a fn whose deadline passes while its command
// waits gets the context's error, and the commands already waiting are
// sent at once.
//
// Without a batch in ctx the fns still run at once, each command on its own.
// A transaction (MULTI/EXEC) is never held: it is sent on its own.
func Gather(ctx context.Context, fns ...func(context.Context)) {
	switch len(fns) {
	case 0:
		return
	case 1:
		fns[0](ctx)
		return
	}
	b := From(ctx)
	var g *group
	if b != nil {
		g = &group{b: b, live: len(fns)}
		ctx = context.WithValue(ctx, groupKey{}, g)
	}
	var wg sync.WaitGroup
	wg.Add(len(fns))
	for _, fn := range fns {
		go func() {
			defer wg.Done()
			if g != nil {
				defer g.exit()
			}
			fn(ctx)
		}()
	}
	wg.Wait()
}

type groupKey struct{}

func groupFrom(ctx context.Context) *group {
	g, _ := ctx.Value(groupKey{}).(*group)
	return g
}

// group holds the commands of one Gather until every running fn waits.
type group struct {
	b *Batch

	mu      sync.Mutex
	live    int // fns still running
	waiting []*unit
}

// unit is the command (or pipeline) one fn waits on.
type unit struct {
	ctx  context.Context
	cmds []redis.Cmder
	sent chan struct{} // closed once replies (or errors) are in cmds
}

// do holds cmds until the group sends them, and returns the first error.
func (g *group) do(ctx context.Context, cmds []redis.Cmder) error {
	u := &unit{ctx: ctx, cmds: cmds, sent: make(chan struct{})}
	g.mu.Lock()
	g.waiting = append(g.waiting, u)
	ready := g.takeIfReady()
	g.mu.Unlock()
	if ready != nil {
		g.send(ready)
	}
	select {
	case <-u.sent:
	case <-ctx.Done():
		g.mu.Lock()
		held := g.remove(u)
		ready := g.takeIfReady()
		g.mu.Unlock()
		if ready != nil {
			go g.send(ready)
		}
		if !held {
			<-u.sent // already on its way: its replies are bounded by the pipeline's deadline
			break
		}
		for _, c := range cmds {
			c.SetErr(ctx.Err())
		}
		return ctx.Err()
	}
	return firstErr(cmds)
}

// exit is called when a fn returns.
func (g *group) exit() {
	g.mu.Lock()
	g.live--
	ready := g.takeIfReady()
	g.mu.Unlock()
	if ready != nil {
		g.send(ready)
	}
}

// takeIfReady returns the waiting units when every running fn waits, and
// empties the list. g.mu must be held.
func (g *group) takeIfReady() []*unit {
	if len(g.waiting) == 0 || len(g.waiting) < g.live {
		return nil
	}
	w := g.waiting
	g.waiting = nil
	return w
}

// remove drops u from the waiting list and reports whether it was there.
// g.mu must be held.
func (g *group) remove(u *unit) bool {
	for i, w := range g.waiting {
		if w == u {
			g.waiting = append(g.waiting[:i], g.waiting[i+1:]...)
			return true
		}
	}
	return false
}

// send sends the units' commands as one pipeline, behind the batch's
// queued writes. The pipeline's deadline is the latest of the units' own
// (the batch's timeout when none has one), so no caller's call is cut
// shorter than it asked; a caller with a shorter deadline stops waiting
// at its own.
func (g *group) send(units []*unit) {
	var cmds []redis.Cmder
	deadline := time.Time{}
	for _, u := range units {
		cmds = append(cmds, u.cmds...)
		dl, ok := u.ctx.Deadline()
		if !ok {
			dl = time.Now().Add(g.b.timeout)
		}
		if dl.After(deadline) {
			deadline = dl
		}
	}
	ctx, cancel := context.WithDeadline(context.WithoutCancel(units[0].ctx), deadline)
	defer cancel()
	l, sent, err := g.b.takeLater(ctx)
	if err != nil {
		for _, c := range cmds {
			c.SetErr(err)
		}
	} else {
		g.b.send(ctx, l, cmds)
		sent()
	}
	for _, u := range units {
		close(u.sent)
	}
}
