package journal

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

const benchWriters = 64

func BenchmarkAppend64(b *testing.B) {
	l, err := Open(filepath.Join(b.TempDir(), "journal.db"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	var next atomic.Int64
	b.SetParallelism((benchWriters + 1) / 2) // GOMAXPROCS is 2 here; runs 64
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := l.Append(context.Background(), testEvent(int(next.Add(1)))); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ev/s")
}

// TestBenchAppend prints journal append throughput with 64 concurrent
// writers, fsync on, next to bbolt's own group commit (DB.Batch) storing
// the same records with the same options in the same directory.
func TestBenchAppend(t *testing.T) {
	if os.Getenv("CMFS_BENCH") == "" {
		t.Skip("set CMFS_BENCH=1")
	}
	const d = 1500 * time.Millisecond
	dir := t.TempDir()

	l, err := Open(filepath.Join(dir, "journal.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	cmfs := runWriters(t, d, func(n int) error {
		return l.Append(context.Background(), testEvent(n))
	})
	st := l.Stats()
	t.Logf("cmfs: %d events in %d commits, %.1f per commit", st.Events, st.Commits, float64(st.Events)/float64(st.Commits))
	if err := l.Verify(); err != nil {
		t.Error(err)
	}
	l.Close()

	db, err := bolt.Open(filepath.Join(dir, "batch.db"), 0o600, &bolt.Options{
		NoFreelistSync: true,
		FreelistType:   bolt.FreelistMapType,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucket(eventsBucket)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	batch := runWriters(t, d, func(n int) error {
		e := testEvent(n)
		return db.Batch(func(tx *bolt.Tx) error {
			b := tx.Bucket(eventsBucket)
			id, err := b.NextSequence()
			if err != nil {
				return err
			}
			e.ID, e.Time = id, time.Now().UTC()
			v, err := appendRecord(nil, e)
			if err != nil {
				return err
			}
			return b.Put(key(id), v)
		})
	})

	fmt.Printf("journal append, %d writers | cmfs %.0f ev/s | bbolt Batch %.0f ev/s | ratio %.2fx | target >= 50000 ev/s\n",
		benchWriters, cmfs, batch, cmfs/batch)
}

// runWriters runs fn from 64 goroutines, one event per call, for about d,
// and returns the calls per second.
func runWriters(t *testing.T, d time.Duration, fn func(n int) error) float64 {
	t.Helper()
	var (
		stop      atomic.Bool
		next      atomic.Int64
		completed atomic.Int64
		wg        sync.WaitGroup
	)
	start := time.Now()
	for range benchWriters {
		wg.Go(func() {
			for !stop.Load() {
				if err := fn(int(next.Add(1))); err != nil {
					t.Error(err)
					return
				}
				completed.Add(1)
			}
		})
	}
	time.Sleep(d) // the measured run: time passing is the point
	stop.Store(true)
	wg.Wait()
	return float64(completed.Load()) / time.Since(start).Seconds()
}

// BenchmarkAppendInterval1 is one writer under SyncInterval: what an
// operation through the mount waits for when its event is written, not
// flushed — the WAL's store and the group commit around it.
func BenchmarkAppendInterval1(b *testing.B) {
	l, err := Open(filepath.Join(b.TempDir(), "journal.db"), Options{Sync: SyncInterval})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	events := make([]*Event, b.N)
	for i := range events {
		events[i] = testEvent(i + 1)
	}
	b.ResetTimer()
	for _, e := range events {
		if err := l.Append(context.Background(), e); err != nil {
			b.Fatal(err)
		}
	}
}
