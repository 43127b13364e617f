package bench

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestLatenciesQuantile(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var all []time.Duration
	var whole, a, b Latencies
	for i := range 100000 {
		// Log-uniform from 1 ns to about 1 s: every bucket range is hit.
		d := time.Duration(math.Exp2(r.Float64() * 30))
		all = append(all, d)
		whole.Record(d)
		if i%2 == 0 {
			a.Record(d)
		} else {
			b.Record(d)
		}
	}
	var merged Latencies
	merged.Merge(&a)
	merged.Merge(&b)
	slices.Sort(all)
	for _, q := range []float64{0, 0.5, 0.9, 0.99, 0.999} {
		want := all[int(q*float64(len(all)))]
		for name, l := range map[string]*Latencies{"recorded": &whole, "merged": &merged} {
			got := l.Quantile(q)
			if diff := float64(got-want) / float64(want); diff < -1.0/64 || diff > 1.0/64 {
				t.Errorf("%s: Quantile(%v) = %v, want %v within 1/64", name, q, got, want)
			}
		}
	}
	if got := merged.Quantile(1); got != all[len(all)-1] {
		t.Errorf("Quantile(1) = %v, want the largest, %v", got, all[len(all)-1])
	}
	if merged.Count() != uint64(len(all)) {
		t.Errorf("Count = %d, want %d", merged.Count(), len(all))
	}
}

func TestLatenciesEdges(t *testing.T) {
	var empty Latencies
	if got := empty.Quantile(0.5); got != 0 {
		t.Errorf("empty: Quantile = %v, want 0", got)
	}
	var l Latencies
	l.Record(-time.Second)
	l.Record(200 * time.Hour) // beyond the last bucket: counted there
	if l.Count() != 2 || l.Quantile(0) != 0 || l.Quantile(1) != 200*time.Hour {
		t.Errorf("count %d, min %v, max %v", l.Count(), l.Quantile(0), l.Quantile(1))
	}
	for v := uint64(1); v < 1<<46; v = v*3 + 1 {
		if lo, mid := time.Duration(v), bucketMid(bucket(v)); float64(mid-lo) > float64(lo)/64+1 || float64(lo-mid) > float64(lo)/64+1 {
			t.Errorf("bucket(%d) = %d, whose middle %v is more than 1/64 away", v, bucket(v), mid)
		}
	}
}
