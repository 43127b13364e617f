package bench

import (
	"math/bits"
	"time"
)

// Latencies is a log-linear histogram of durations, in the manner of HDR
// histograms: exact below 64 ns, then 64 buckets per power of two, so any
// recorded duration is known to within 1/64 (1.6%) and a quantile costs a
// walk over a few thousand counters. Recording is an index computation and
// an increment with no allocation, cheap enough to time every single
// operation of a workload; each worker records into its own and Merge
// adds them up afterwards. The zero value is empty and ready to use.
type Latencies struct {
	counts []uint64
	n      uint64
	max    time.Duration
}

const (
	subBits    = 6
	subBuckets = 1 << subBits
	// latencyBuckets covers durations up to 2^47 ns (39 hours).
	latencyBuckets = (47 - subBits + 1) * subBuckets
)

// bucket returns the index of the bucket holding v nanoseconds.
func bucket(v uint64) int {
	if v < subBuckets {
		return int(v)
	}
	shift := bits.Len64(v) - subBits - 1 // v>>shift is in [64, 128)
	return (shift+1)*subBuckets + int(v>>shift) - subBuckets
}

// bucketMid returns a duration inside bucket i, halfway across it.
func bucketMid(i int) time.Duration {
	if i < subBuckets {
		return time.Duration(i)
	}
	shift := i/subBuckets - 1
	lo := uint64(i%subBuckets+subBuckets) << shift
	return time.Duration(lo + (uint64(1)<<shift)/2)
}

// Alloc makes the counters now, so that no Record allocates; Record does
// it itself otherwise.
func (l *Latencies) Alloc() {
	if l.counts == nil {
		l.counts = make([]uint64, latencyBuckets)
	}
}

// Record adds one duration (negative ones count as zero).
func (l *Latencies) Record(d time.Duration) {
	l.Alloc()
	v := uint64(max(d, 0))
	i := min(bucket(v), latencyBuckets-1)
	l.counts[i]++
	l.n++
	l.max = max(l.max, d)
}

// Merge adds every duration o recorded.
func (l *Latencies) Merge(o *Latencies) {
	if o == nil || o.n == 0 {
		return
	}
	l.Alloc()
	for i, c := range o.counts {
		l.counts[i] += c
	}
	l.n += o.n
	l.max = max(l.max, o.max)
}

// Count returns how many durations were recorded.
func (l *Latencies) Count() uint64 {
	if l == nil {
		return 0
	}
	return l.n
}

// Quantile returns the duration below which a fraction q (0 to 1) of the
// recorded ones lie, to within the bucket width; 0 when nothing was
// recorded. Quantile(1) is the largest exactly.
func (l *Latencies) Quantile(q float64) time.Duration {
	if l == nil || l.n == 0 {
		return 0
	}
	if q >= 1 {
		return l.max
	}
	rank := uint64(q * float64(l.n))
	if rank >= l.n {
		rank = l.n - 1
	}
	var seen uint64
	for i, c := range l.counts {
		seen += c
		if seen > rank {
			return min(bucketMid(i), l.max)
		}
	}
	return l.max
}
