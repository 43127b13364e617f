package peer

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"
)

// guard holds one stream to the node's limits: each Recv or Send must
// complete within Config.StreamIdleTimeout, and the whole stream must be
// done by its deadline, Config.StreamDeadline or the bytes it carries at
// Config.StreamMinRate, whichever is later. A guard that trips cancels
// its context with the reason, so that what works for the stream (an
// import, an export) stops, and the Recv or Send waiting returns that
// reason at once: the handler then ends the way every other failure
// ends it, and the import discards its tarball and extract directory and
// releases its reservation.
//
// A peer that stalls is what it guards against, so a Recv or a Send runs
// in a goroutine of its own (guarded): gRPC gives no way to interrupt
// one on the server side but to end the call. A cut leaves that
// goroutine blocked until the handler has returned and gRPC has closed
// the stream (on a client, until the stream's context, the guard's, is
// cancelled), which is at once.
type guard struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	what   string // the stream, for messages: "push container 5"
	idle   time.Duration
	floor  time.Duration
	rate   int64
	start  time.Time
	timer  *time.Timer // the deadline's

	mu       sync.Mutex
	deadline time.Duration // from start
	tripped  error
}

// guard returns a guard of a stream that runs under parent, with the
// floor of the deadline until expect says how much it carries.
func (s *Server) guard(parent context.Context, what string) *guard {
	ctx, cancel := context.WithCancelCause(parent)
	g := &guard{ctx: ctx, cancel: cancel, what: what, idle: s.cfg.StreamIdleTimeout,
		floor: s.cfg.StreamDeadline, rate: s.cfg.StreamMinRate, start: time.Now(), deadline: s.cfg.StreamDeadline}
	g.timer = time.AfterFunc(g.deadline, g.expire)
	return g
}

// expect tells the guard the stream carries at least n bytes: its
// deadline moves to what n takes at the minimum rate, if that is later.
// A stream of unknown length (Put) calls it with what it has received.
func (g *guard) expect(n int64) {
	d := time.Duration(math.Min(float64(n)/float64(g.rate)*float64(time.Second), math.MaxInt64))
	g.mu.Lock()
	defer g.mu.Unlock()
	if d <= g.deadline || g.tripped != nil {
		return
	}
	g.deadline = d
	g.timer.Reset(time.Until(g.start.Add(d)))
}

func (g *guard) expire() {
	g.mu.Lock()
	d := g.deadline
	g.mu.Unlock()
	g.trip(fmt.Errorf("%s: not done within %v, the stream's deadline (at least %v, or its size at %d bytes/s): %w",
		g.what, d, g.floor, g.rate, context.DeadlineExceeded))
}

// trip cuts the stream for err, unless it was cut already.
func (g *guard) trip(err error) {
	g.mu.Lock()
	if g.tripped == nil && g.ctx.Err() == nil {
		g.tripped = err
		g.cancel(err)
	}
	g.mu.Unlock()
}

// fail returns why the guard cut the stream, if it did, rather than err:
// what failed after the cut (an import seeing its context cancelled)
// failed because of it.
func (g *guard) fail(err error) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if err != nil && g.tripped != nil {
		return g.tripped
	}
	return err
}

// stop releases the guard; its context ends.
func (g *guard) stop() {
	g.timer.Stop()
	g.cancel(nil)
}

// recv runs f, one Recv of the stream, under g.
func recv[T any](g *guard, f func() (T, error)) (T, error) {
	return guarded(g, "nothing received", f)
}

// send runs f, one Send of the stream, under g.
func (g *guard) send(f func() error) error {
	_, err := guarded(g, "could not send", func() (struct{}, error) { return struct{}{}, f() })
	return err
}

// guarded runs f and returns what it returns, or, if f takes longer than
// the idle timeout or the guard trips meanwhile, the guard's reason.
func guarded[T any](g *guard, idle string, f func() (T, error)) (T, error) {
	var zero T
	if g.ctx.Err() != nil {
		return zero, context.Cause(g.ctx)
	}
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := f()
		done <- result{v, err}
	}()
	timer := time.NewTimer(g.idle)
	defer timer.Stop()
	select {
	case r := <-done:
		return r.v, r.err
	case <-timer.C:
		g.trip(fmt.Errorf("%s: %s for %v, the stream idle timeout: the stream is cut: %w", g.what, idle, g.idle, ErrUnavailable))
	case <-g.ctx.Done():
	}
	return zero, context.Cause(g.ctx)
}
