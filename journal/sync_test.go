package journal

import (
	"context"
	"testing"
	"time"
)

// TestLatencyBuckets: a duration lands in the first bucket whose bound
// is at least it, the longest in the last, unbounded one; the sum is the
// durations' total.
func TestLatencyBuckets(t *testing.T) {
	var h latency
	obs := []time.Duration{0, 999 * time.Nanosecond, time.Microsecond, 1500 * time.Nanosecond, 3 * time.Microsecond, 4 * time.Microsecond, time.Second, 100 * time.Hour}
	for _, d := range obs {
		h.observe(d)
	}
	s := h.snapshot()
	if len(s.Bounds) != latencyBuckets-1 || len(s.Counts) != latencyBuckets {
		t.Fatalf("%d bounds, %d counts, want %d and %d", len(s.Bounds), len(s.Counts), latencyBuckets-1, latencyBuckets)
	}
	for i, b := range s.Bounds {
		if want := time.Duration(1<<i) * time.Microsecond; b != want {
			t.Errorf("bound %d is %v, want %v", i, b, want)
		}
	}
	var sum time.Duration
	for _, d := range obs {
		sum += d
		i := 0
		for i < len(s.Bounds) && d > s.Bounds[i] {
			i++
		}
		// Whole microseconds decide: the bucket is at most one below the
		// one the exact duration would pick.
		if s.Counts[i] == 0 && (i == 0 || s.Counts[i-1] == 0) {
			t.Errorf("%v: no count in bucket %d (≤ %v) or the one below", d, i, s.Bounds[min(i, len(s.Bounds)-1)])
		}
	}
	want := map[int]uint64{0: 2, 1: 2, 2: 1, 3: 1, 20: 1, latencyBuckets - 1: 1}
	for i, c := range s.Counts {
		if c != want[i] {
			t.Errorf("bucket %d holds %d, want %d", i, c, want[i])
		}
	}
	if s.Sum != sum || s.Count() != uint64(len(obs)) {
		t.Errorf("sum %v count %d, want %v and %d", s.Sum, s.Count(), sum, len(obs))
	}
}

// TestFlushLatency: every flush of a commit is in the histogram, which
// counts what SyncStats calls flushes.
func TestFlushLatency(t *testing.T) {
	l := newTestLog(t)
	if h := l.FlushLatency(); h.Count() != 0 || h.Sum != 0 {
		t.Fatalf("a new Log's histogram: %+v", h)
	}
	for i := range 3 {
		if err := l.Append(context.Background(), testEvent(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	h, st := l.FlushLatency(), l.SyncStats()
	if h.Count() != st.Flushes || h.Count() < 3 || h.Sum <= 0 {
		t.Errorf("histogram of %d flushes taking %v; SyncStats says %d flushes", h.Count(), h.Sum, st.Flushes)
	}
}
