package repl

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/journal"
)

// TestBenchDumpIncremental measures an incremental dump of 100k synthetic
// events. It runs under CMFS_BENCH=1 only (make bench).
func TestBenchDumpIncremental(t *testing.T) {
	if os.Getenv("CMFS_BENCH") != "1" {
		t.Skip("benchmark: set CMFS_BENCH=1")
	}
	const n = 100_000
	ev := &sliceEvents{events: make([]*journal.Event, n)}
	base := time.Unix(1700000000, 0).UTC()
	for i := range ev.events {
		id := uint64(i + 1)
		p := fmt.Sprintf("sales.db/orders/dt=2024-01-%02d/part-%05d.parquet", i%28+1, i)
		content := []byte(p)
		ev.events[i] = &journal.Event{ID: id, Time: base.Add(time.Duration(i) * time.Millisecond), Type: journal.Insert, Path: p,
			DB: "sales", Table: "orders", Partition: fmt.Sprintf("dt=2024-01-%02d", i%28+1),
			Files: []journal.File{{Path: p, Size: int64(len(content)), XXH64: journal.Sum(content)}}}
	}
	out := filepath.Join(t.TempDir(), "dump")
	start := time.Now()
	res, err := Dump(context.Background(), ev, out, DumpOptions{From: 1, Source: "bench"})
	if err != nil {
		t.Fatal(err)
	}
	d := time.Since(start)
	if res.Events != n {
		t.Fatalf("dumped %d events", res.Events)
	}
	fmt.Printf("repl dump incremental 100k events | %.0f ev/s\n", float64(n)/d.Seconds())
}
