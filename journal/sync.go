package journal

import (
	"fmt"
	"math/bits"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// SyncMode says when an Append's events are durable.
type SyncMode int

const (
	// SyncAlways (the default): Append returns once its events, and
	// everything its flush makes durable, are on disk.
	SyncAlways SyncMode = iota
	// SyncInterval: Append returns once its events are written to the
	// WAL (a kill -9 loses nothing: the page cache keeps them); they and
	// what they name are flushed within Options.Interval. A power loss
	// may take back the events of the last interval. Readers see events
	// only once flushed.
	SyncInterval
)

// DefaultInterval is SyncInterval's flush interval when Options.Interval
// is 0.
const DefaultInterval = 50 * time.Millisecond

// ParseSync parses "always", "interval" or "interval:DUR" (a Go duration,
// 1ms to 10s).
func ParseSync(s string) (SyncMode, time.Duration, error) {
	mode, dur, hasDur := strings.Cut(s, ":")
	switch {
	case mode == "always" && !hasDur:
		return SyncAlways, 0, nil
	case mode == "interval" && !hasDur:
		return SyncInterval, DefaultInterval, nil
	case mode == "interval":
		d, err := time.ParseDuration(dur)
		if err != nil || d < time.Millisecond || d > 10*time.Second {
			return 0, 0, fmt.Errorf("--sync %q: the interval must be a duration from 1ms to 10s, such as 50ms", s)
		}
		return SyncInterval, d, nil
	}
	return 0, 0, fmt.Errorf("--sync %q: want always, interval or interval:DUR", s)
}

// FormatSync is ParseSync's inverse.
func FormatSync(m SyncMode, d time.Duration) string {
	if m == SyncInterval {
		if d == 0 {
			d = DefaultInterval
		}
		return "interval:" + d.String()
	}
	return "always"
}

// flush runs fns and the WAL's sync at once, and returns each fn's error
// and the sync's. It records how long the whole took.
func (l *Log) flush(fns []func() error) ([]error, error) {
	start := time.Now()
	errs := make([]error, len(fns))
	var wg sync.WaitGroup
	for i, fn := range fns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = fn()
		}()
	}
	var werr error
	if !l.opts.NoSync {
		werr = l.wal.sync()
		l.walSyncs.Add(1)
	}
	wg.Wait()
	l.flushTime.observe(time.Since(start))
	return errs, werr
}

// flushLoop is SyncInterval's flusher: after the first write of a
// quiet WAL it waits out the interval, then flushes everything written
// since, so a power loss takes back at most one interval.
func (l *Log) flushLoop() {
	defer close(l.flusherDone)
	for {
		select {
		case <-l.dirty:
		case <-l.stopFlush:
			l.syncPending()
			return
		}
		select {
		case <-time.After(l.opts.Interval):
		case <-l.stopFlush:
			l.syncPending()
			return
		}
		l.syncPending()
	}
}

// syncPending flushes what was written and not flushed (SyncInterval):
// the WAL and what its events name. A failure fails every later Append:
// an acknowledged change may not be durable, and the mount must say so
// rather than go on.
func (l *Log) syncPending() {
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	l.pendMu.Lock()
	fns := l.pendFns
	l.pendFns = nil
	to := l.written.Load()
	l.pendMu.Unlock()
	if to <= l.last.Load() && len(fns) == 0 {
		return
	}
	if l.opts.FlushAll != nil {
		fns = []func() error{l.opts.FlushAll}
	}
	errs, werr := l.flush(fns)
	for _, err := range append(errs, werr) {
		if err != nil {
			err = fmt.Errorf("journal: background flush (events %d–%d may not be durable): %w", l.last.Load()+1, to, err)
			l.failed.CompareAndSwap(nil, &err)
			return
		}
	}
	hit(fpSynced)
	l.publish(to)
}

// latency is a histogram of durations in power-of-two microsecond
// buckets: bucket i holds the durations of i significant bits of whole
// microseconds (bucket 0: under 1 µs; bucket i: under 2^i µs and at least
// 2^(i-1)), the last one everything longer. sum is their total in
// nanoseconds, so that the histogram can be exported whole
// (Log.FlushLatency) rather than recorded twice.
type latency struct {
	buckets [latencyBuckets]atomic.Uint64
	sum     atomic.Uint64
}

const latencyBuckets = 32

func (h *latency) observe(d time.Duration) {
	us := uint64(d / time.Microsecond)
	h.buckets[min(bits.Len64(us), len(h.buckets)-1)].Add(1)
	h.sum.Add(uint64(max(d, 0)))
}

// Histogram is a distribution of durations: Counts[i] observations at
// most Bounds[i] and above Bounds[i-1] (not cumulative), and a last count
// of those above every bound (len(Counts) == len(Bounds)+1); Sum is their
// total. Read without a lock, a count may be a moment ahead of Sum.
type Histogram struct {
	Bounds []time.Duration
	Counts []uint64
	Sum    time.Duration
}

// Count is the number of observations.
func (h Histogram) Count() uint64 {
	var n uint64
	for _, c := range h.Counts {
		n += c
	}
	return n
}

// snapshot returns the histogram: the bound of bucket i is 2^i µs, the
// last bucket has none.
func (h *latency) snapshot() Histogram {
	s := Histogram{Bounds: make([]time.Duration, latencyBuckets-1), Counts: make([]uint64, latencyBuckets)}
	for i := range h.buckets {
		s.Counts[i] = h.buckets[i].Load()
		if i < len(s.Bounds) {
			s.Bounds[i] = time.Duration(uint64(1)<<i) * time.Microsecond
		}
	}
	s.Sum = time.Duration(h.sum.Load())
	return s
}

// quantile returns the upper bound of the bucket holding quantile q, 0
// with no observations.
func (h *latency) quantile(q float64) time.Duration {
	var counts [latencyBuckets]uint64
	var n uint64
	for i := range h.buckets {
		counts[i] = h.buckets[i].Load()
		n += counts[i]
	}
	if n == 0 {
		return 0
	}
	rank := uint64(q*float64(n-1)) + 1
	var seen uint64
	for i, c := range counts {
		if seen += c; seen >= rank {
			return time.Duration(uint64(1)<<i) * time.Microsecond
		}
	}
	return 0
}

// FlushLatency returns how long the flushes since Open took, each the
// WAL's sync together with the flushes of what its group's events name
// (SyncStats.Flushes of them); empty for a read-only Log. The bounds
// double from 1 µs.
func (l *Log) FlushLatency() Histogram {
	if l.db == nil {
		return Histogram{}
	}
	return l.flushTime.snapshot()
}

// SyncStats describes the commit path since Open.
type SyncStats struct {
	Mode     string        // "always" or "interval:DUR"
	Groups   uint64        // group commits written to the WAL
	Flushes  uint64        // flushes (the WAL's sync with the group's own)
	WALSyncs uint64        // fdatasyncs of the WAL
	Applies  uint64        // bbolt transactions behind the WAL
	FlushP50 time.Duration // flush latency, upper bound of its bucket
	FlushP99 time.Duration
}

// SyncStats returns the commit path's counters; zero for a read-only Log.
func (l *Log) SyncStats() SyncStats {
	if l.db == nil {
		return SyncStats{}
	}
	var n uint64
	for i := range l.flushTime.buckets {
		n += l.flushTime.buckets[i].Load()
	}
	return SyncStats{
		Mode:     FormatSync(l.opts.Sync, l.opts.Interval),
		Groups:   l.groups.Load(),
		Flushes:  n,
		WALSyncs: l.walSyncs.Load(),
		Applies:  l.applies.Load(),
		FlushP50: l.flushTime.quantile(0.5),
		FlushP99: l.flushTime.quantile(0.99),
	}
}
