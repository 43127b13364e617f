// Command journalbench measures journal appends: N writers append events
// concurrently, one event per Append, durably (fsync, group commit), to a
// fresh journal, then the journal is verified. It prints one line:
//
//	events=N seconds=S
//
// It is built and run by cmfsbench, in its own process so that a journal
// that does not build yet only costs that row.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/cmfs-project/cmfs/journal"
)

func main() {
	dir := flag.String("dir", "", "directory for the journal (created; must not hold one)")
	writers := flag.Int("writers", 64, "concurrent writers")
	events := flag.Int("events", 64000, "events in total")
	timeout := flag.Duration("timeout", 2*time.Minute, "give up after")
	flag.Parse()
	if *dir == "" || *writers < 1 || *events < *writers {
		fmt.Fprintln(os.Stderr, "usage: journalbench -dir DIR [-writers N] [-events N]")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	n, elapsed, err := run(ctx, *dir, *writers, *events)
	if err != nil {
		fmt.Fprintln(os.Stderr, "journalbench:", err)
		os.Exit(1)
	}
	fmt.Printf("events=%d seconds=%.6f\n", n, elapsed.Seconds())
}

func run(ctx context.Context, dir string, writers, events int) (int, time.Duration, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, 0, err
	}
	l, err := journal.Open(filepath.Join(dir, "journal.db"), journal.Options{})
	if err != nil {
		return 0, 0, fmt.Errorf("open: %w", err)
	}
	n, elapsed, err := appendAll(ctx, l, writers, events)
	if cerr := l.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("close: %w", cerr)
	}
	return n, elapsed, err
}

// appendAll runs the writers and checks the result: dense ids and Verify.
func appendAll(ctx context.Context, l *journal.Log, writers, events int) (int, time.Duration, error) {

	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	per := events / writers
	start := time.Now()
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				e := &journal.Event{
					Type: journal.Insert,
					Path: fmt.Sprintf("sales.db/orders/dt=2024-01-%02d/part-%05d-%03d.parquet", w%28+1, i, w),
					Files: []journal.File{{
						Path:  fmt.Sprintf("sales.db/orders/dt=2024-01-%02d/part-%05d-%03d.parquet", w%28+1, i, w),
						Size:  int64(4096 + i),
						XXH64: journal.FormatSum(uint64(w)<<32 | uint64(i)),
					}},
				}
				e.Stamp()
				if err := l.Append(ctx, e); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("append: %w", err)
					}
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		return 0, 0, firstErr
	}
	if last := l.Last(); last != uint64(per*writers) {
		return 0, 0, fmt.Errorf("last id %d after %d appends", last, per*writers)
	}
	if err := l.Verify(); err != nil {
		return 0, 0, fmt.Errorf("verify: %w", err)
	}
	return per * writers, elapsed, nil
}
