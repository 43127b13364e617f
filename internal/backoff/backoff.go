// Package backoff is the wait between two attempts of cmfs's and
// replicad's retry loops: exponential from Min to Max, with jitter so
// that many retriers spread out, reset by a success.
//
// A Backoff is not safe for concurrent use; each loop owns one.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff hands out growing waits. The zero value waits 250ms doubling
// to 30s; set Min and Max for other bounds.
type Backoff struct {
	Min, Max time.Duration
	// NoJitter makes every wait exactly the doubling sequence (tests,
	// messages that must be predictable).
	NoJitter bool

	cur      time.Duration // the last wait before jitter; 0 after Reset
	failures int
}

// Defaults of the zero Backoff.
const (
	DefaultMin = 250 * time.Millisecond
	DefaultMax = 30 * time.Second
)

// Next returns the wait before the next attempt, after a failure: Min the
// first time, then twice the last, at most Max; with jitter, 0.5 to 1.5
// times that, still at most Max.
func (b *Backoff) Next() time.Duration {
	lo, hi := b.Min, b.Max
	if lo <= 0 {
		lo = DefaultMin
	}
	if hi <= 0 {
		hi = DefaultMax
	}
	hi = max(hi, lo)
	b.cur = min(max(2*b.cur, lo), hi)
	b.failures++
	if b.NoJitter {
		return b.cur
	}
	return min(b.cur/2+rand.N(b.cur+1), hi)
}

// Reset starts over after a success.
func (b *Backoff) Reset() { b.cur, b.failures = 0, 0 }

// Failures is how many times Next was called since the last Reset: the
// failures in a row.
func (b *Backoff) Failures() int { return b.failures }

// Sleep waits d, or until ctx ends, when it returns ctx's error.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
