package main

import (
	"math"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/internal/cli/clitest"
	"github.com/cmfs-project/cmfs/journal"
)

// TestConstHistogram: the journal's per-bucket counts become cumulative
// counts at each bound, in seconds, up to the largest bound shown; what
// lies above it, and above every bound, is in the count alone.
func TestConstHistogram(t *testing.T) {
	us := time.Microsecond
	tests := []struct {
		name    string
		h       journal.Histogram
		max     time.Duration
		count   uint64
		sum     float64
		buckets map[float64]uint64
	}{
		{"empty", journal.Histogram{}, time.Second, 0, 0, map[float64]uint64{}},
		{
			"none", journal.Histogram{Bounds: []time.Duration{us, 2 * us, 4 * us}, Counts: []uint64{0, 0, 0, 0}},
			time.Second, 0, 0, map[float64]uint64{1e-6: 0, 2e-6: 0, 4e-6: 0},
		},
		{
			"cumulative", journal.Histogram{Bounds: []time.Duration{us, 2 * us, 4 * us}, Counts: []uint64{1, 0, 3, 2}, Sum: 20 * us},
			time.Second, 6, 20e-6, map[float64]uint64{1e-6: 1, 2e-6: 1, 4e-6: 4},
		},
		{
			"cut above max", journal.Histogram{Bounds: []time.Duration{us, 2 * us, 4 * us}, Counts: []uint64{1, 2, 3, 4}, Sum: time.Second},
			2 * us, 10, 1, map[float64]uint64{1e-6: 1, 2e-6: 3},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			count, sum, buckets := constHistogram(tt.h, tt.max)
			if count != tt.count || math.Abs(sum-tt.sum) > 1e-12 {
				t.Errorf("count %d sum %g, want %d and %g", count, sum, tt.count, tt.sum)
			}
			if len(buckets) != len(tt.buckets) {
				t.Errorf("buckets %v, want %v", buckets, tt.buckets)
			}
			for le, want := range tt.buckets {
				if got, ok := buckets[le]; !ok || got != want {
					t.Errorf("le=%g: %d (present %v), want %d", le, got, ok, want)
				}
			}
		})
	}
}

// TestConstHistogramOfJournal: the journal's own histogram, converted as
// /metrics shows it: bounds doubling from 1 µs to flushBoundMax, each
// count at most the total.
func TestConstHistogramOfJournal(t *testing.T) {
	dir := t.TempDir()
	j, err := journal.Open(filepath.Join(dir, "journal.db"), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	e := &journal.Event{Type: journal.Mkdir, Path: "d"}
	e.Stamp()
	if err := j.Append(t.Context(), e); err != nil {
		t.Fatal(err)
	}
	count, _, buckets := constHistogram(j.FlushLatency(), flushBoundMax)
	if count == 0 || count != j.SyncStats().Flushes {
		t.Errorf("count %d, SyncStats says %d flushes", count, j.SyncStats().Flushes)
	}
	if len(buckets) != 25 {
		t.Errorf("%d buckets, want 25 (1 µs to 2^24 µs)", len(buckets))
	}
	for le := 1e-6; le <= flushBoundMax.Seconds(); le *= 2 {
		if c, ok := buckets[le]; !ok || c > count {
			t.Errorf("le=%g: %d (present %v), total %d", le, c, ok, count)
		}
	}
}

// TestMountMetricsInUse: a --metrics address in use refuses the mount in
// one line, before the journal is opened.
func TestMountMetricsInUse(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	dir := t.TempDir()
	backing, mnt := filepath.Join(dir, "backing"), filepath.Join(dir, "mnt")
	for _, d := range []string{backing, mnt} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	clitest.Refused(t, program, []string{"mount", "--metrics", lis.Addr().String(), backing, mnt}, "metrics: listen "+lis.Addr().String()+": ")
	if _, err := os.Stat(filepath.Join(backing, ".cmfs", "journal.db")); !os.IsNotExist(err) {
		t.Errorf("the refused mount opened a journal (stat: %v)", err)
	}
}

func TestCheckMetricsAddr(t *testing.T) {
	for _, ok := range []string{"", "127.0.0.1:9890", ":9890", "[::1]:0", "localhost:1"} {
		if err := checkMetricsAddr(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"9890", "127.0.0.1", "127.0.0.1:", "127.0.0.1:http", "127.0.0.1:65536", "127.0.0.1:-1"} {
		if err := checkMetricsAddr(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
