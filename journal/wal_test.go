package journal

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/internal/failpoint"
)

// snapshot copies the journal's files at path into dir, as they are now:
// what a process killed at this moment leaves on disk (the page cache
// survives a kill -9), and returns the copy's journal path.
func snapshot(t *testing.T, path, dir string) string {
	t.Helper()
	for _, p := range []string{path, walPath(path)} {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatalf("snapshot: %v", err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(p)), b, 0o600); err != nil {
			t.Fatalf("snapshot: %v", err)
		}
	}
	return filepath.Join(dir, filepath.Base(path))
}

// snapshotHeld is snapshot with l's applier held still, as a kill stops
// every thread at once. Not from the applier itself.
func snapshotHeld(t *testing.T, l *Log, path, dir string) string {
	l.applyMu.Lock()
	defer l.applyMu.Unlock()
	return snapshot(t, path, dir)
}

// readAll returns every event of the journal at path, opened read-only.
func readAll(t *testing.T, path string) []*Event {
	t.Helper()
	l, err := Open(path, Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("open %s read-only: %v", path, err)
	}
	defer l.Close()
	var out []*Event
	if err := l.Range(1, 0, func(e *Event) error { out = append(out, e); return nil }); err != nil {
		t.Fatalf("range %s: %v", path, err)
	}
	return out
}

// checkRecovered opens the journal at path (recovery), and checks that it
// holds every event of acked, densely from 1, each the event written with
// its id (written[id]), and that bbolt and the WAL agree: the events read
// back through the recovering Log, and again read-only after it closed,
// are the same.
func checkRecovered(t *testing.T, path string, acked []uint64, written map[uint64]string, opts Options) []*Event {
	t.Helper()
	l, err := Open(path, opts)
	if err != nil {
		t.Fatalf("recovery: Open: %v", err)
	}
	var got []*Event
	if err := l.Range(1, 0, func(e *Event) error { got = append(got, e); return nil }); err != nil {
		t.Fatalf("recovery: Range: %v", err)
	}
	if err := l.Verify(); err != nil {
		t.Fatalf("recovery: Verify: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("recovery: Close: %v", err)
	}
	for i, e := range got {
		if e.ID != uint64(i+1) {
			t.Fatalf("recovered event %d has id %d", i+1, e.ID)
		}
		if want, ok := written[e.ID]; !ok || want != e.Path {
			t.Fatalf("recovered event %d is %q, the writer gave that id to %q", e.ID, e.Path, want)
		}
	}
	for _, id := range acked {
		if id > uint64(len(got)) {
			t.Fatalf("I1: acknowledged event %d lost: recovery ends at %d", id, len(got))
		}
	}
	again := readAll(t, path)
	if !slices.EqualFunc(got, again, func(a, b *Event) bool { return a.ID == b.ID && a.Path == b.Path }) {
		t.Fatalf("after recovery bbolt holds %d events, the recovering Log showed %d", len(again), len(got))
	}
	return got
}

// writeLoad appends n events from 8 goroutines, one per Append, and
// returns the ids acknowledged before stop was closed (or all), and what
// each id was given to.
type load struct {
	mu      sync.Mutex
	acked   []uint64
	written map[uint64]string
}

func (ld *load) ackedCopy() []uint64 {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	return slices.Clone(ld.acked)
}

func runLoad(t *testing.T, l *Log, n int) *load {
	ld := &load{written: map[uint64]string{}}
	ld.run(t, l, n)
	return ld
}

func (ld *load) run(t *testing.T, l *Log, n int) {
	var wg sync.WaitGroup
	var next atomic.Int64
	for range 8 {
		wg.Go(func() {
			for {
				i := int(next.Add(1))
				if i > n {
					return
				}
				e := testEvent(i)
				if err := l.Append(context.Background(), e); err != nil {
					t.Errorf("append %d: %v", i, err)
					return
				}
				ld.mu.Lock()
				ld.acked = append(ld.acked, e.ID)
				ld.written[e.ID] = e.Path
				ld.mu.Unlock()
			}
		})
	}
	wg.Wait()
}

// runUntil runs the load in rounds of n appends until done says so (at
// most 100 rounds): a commit path fast enough finishes a round before a
// background step (an interval's flush, an apply) has run as often as a
// test needs.
func (ld *load) runUntil(t *testing.T, l *Log, n int, done func() bool) {
	for range 100 {
		ld.run(t, l, n)
		if done() || t.Failed() {
			return
		}
	}
}

// TestWALKillAtEveryStep kills the writer (a snapshot of its files, as a
// kill -9 leaves them) at every failpoint of the commit path, early and
// late, with segments small enough that the writer switches between them,
// and checks that recovery keeps every acknowledged event, assigns no id
// twice and leaves bbolt and the WAL agreeing.
func TestWALKillAtEveryStep(t *testing.T) {
	points := []string{fpWritten, fpSynced, fpApplied, fpSegment, fpClosing}
	for _, mode := range []SyncMode{SyncAlways, SyncInterval} {
		for _, point := range points {
			for _, nth := range []int64{1, 3} {
				if point == fpClosing && nth > 1 {
					continue
				}
				t.Run(fmt.Sprintf("%s/%s/%d", FormatSync(mode, 0), point, nth), func(t *testing.T) {
					walKillCase(t, mode, point, nth)
				})
			}
		}
	}
}

func walKillCase(t *testing.T, mode SyncMode, point string, nth int64) {
	dir := t.TempDir()
	path := filepath.Join(dir, "journal.db")
	opts := Options{WALSegment: minWALSegment, Sync: mode, Interval: 2 * time.Millisecond}
	l, err := Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	ld := &load{written: map[uint64]string{}}
	var hits atomic.Int64
	var snap string
	var ackedAtKill []uint64
	var once sync.Once
	reset := failpoint.Set(func(name string) {
		if name == point && hits.Add(1) == nth {
			once.Do(func() {
				// Acknowledged before the kill: the writer is stopped
				// here, so nothing is acknowledged while copying.
				ackedAtKill = ld.ackedCopy()
				// A kill stops every thread at once: hold the applier
				// too while copying (unless it is the one stopped here).
				if point != fpApplied {
					l.applyMu.Lock()
					defer l.applyMu.Unlock()
				}
				snap = snapshot(t, path, t.TempDir())
			})
		}
	})
	defer reset()
	// The closing point is reached by Close alone.
	ld.runUntil(t, l, 3000, func() bool { return point == fpClosing || hits.Load() >= nth })
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	reset()
	if snap == "" {
		t.Fatalf("the load never reached %s %d times (%d)", point, nth, hits.Load())
	}
	got := checkRecovered(t, snap, ackedAtKill, ld.written, Options{})
	t.Logf("killed at %s #%d: %d acknowledged, %d recovered", point, nth, len(ackedAtKill), len(got))
}

// TestWALTornTail cuts the WAL's last group short or damages it, as a
// power loss during its write leaves it: recovery cuts it back cleanly and
// keeps everything before it.
func TestWALTornTail(t *testing.T) {
	for _, how := range []string{"zeroed", "flipped", "short"} {
		t.Run(how, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "journal.db")
			l, err := Open(path, Options{})
			if err != nil {
				t.Fatal(err)
			}
			written := map[uint64]string{}
			var snap string
			var lastOff int64
			for i := 1; i <= 50; i++ {
				e := testEvent(i)
				if i == 50 {
					lastOff = l.wal.off
					reset := failpoint.Set(func(name string) {
						if name == fpWritten && snap == "" {
							snap = snapshotHeld(t, l, path, t.TempDir())
						}
					})
					err = l.Append(context.Background(), e)
					reset()
				} else {
					err = l.Append(context.Background(), e)
				}
				if err != nil {
					t.Fatal(err)
				}
				written[e.ID] = e.Path
			}
			l.Close()
			f, err := os.OpenFile(walPath(snap), os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			at := walHeaderSize + lastOff
			switch how {
			case "zeroed":
				f.WriteAt(make([]byte, 64), at+walRecHead+8)
			case "flipped":
				b := make([]byte, 1)
				f.ReadAt(b, at+40)
				b[0] ^= 0x40
				f.WriteAt(b, at+40)
			case "short": // the length says more than was written
				f.WriteAt([]byte{0, 0x10, 0, 0}, at)
			}
			f.Close()
			got := checkRecovered(t, snap, seq(49), written, Options{})
			if len(got) != 49 {
				t.Errorf("recovered %d events, want the 49 before the torn one", len(got))
			}
		})
	}
}

func seq(n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = uint64(i + 1)
	}
	return out
}

// TestWALDamagedMiddle: a damaged record with good records of later events
// behind it is not a torn tail: Open refuses rather than drop acknowledged
// events.
func TestWALDamagedMiddle(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "journal.db")
	l, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var snap string
	var offs []int64
	for i := 1; i <= 10; i++ {
		offs = append(offs, l.wal.off)
		var reset func()
		if i == 10 {
			reset = failpoint.Set(func(name string) {
				if name == fpSynced && snap == "" {
					snap = snapshotHeld(t, l, path, t.TempDir())
				}
			})
		}
		if err := l.Append(context.Background(), testEvent(i)); err != nil {
			t.Fatal(err)
		}
		if reset != nil {
			reset()
		}
	}
	l.Close()
	// Ten records, none applied in the snapshot's bbolt necessarily: damage
	// the fifth; bbolt may hold it already, so take it out of bbolt's
	// reach by damaging one the applier cannot have reached.
	f, _ := os.OpenFile(walPath(snap), os.O_RDWR, 0)
	b := make([]byte, 1)
	f.ReadAt(b, walHeaderSize+offs[4]+40)
	b[0] ^= 0x40
	f.WriteAt(b, walHeaderSize+offs[4]+40)
	f.Close()
	before := readBolt(t, snap)
	_, err = Open(snap, Options{})
	if before < 5 && !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open with a damaged record in the middle of the WAL (bbolt holds %d): %v, want ErrCorrupt", before, err)
	}
	if before >= 5 && err != nil {
		t.Fatalf("Open with a damaged record bbolt already holds: %v", err)
	}
}

// readBolt returns bbolt's newest id in the journal at path, WAL aside.
func readBolt(t *testing.T, path string) uint64 {
	t.Helper()
	tmp := filepath.Join(t.TempDir(), "journal.db")
	b, _ := os.ReadFile(path)
	os.WriteFile(tmp, b, 0o600)
	l, err := Open(tmp, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Last()
}

// TestCheckTail: events whose group's flush was never confirmed go to
// CheckTail, in groups; what it drops is gone, as if never written.
func TestCheckTail(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "journal.db")
	l, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 5; i++ {
		if err := l.Append(context.Background(), testEvent(i)); err != nil {
			t.Fatal(err)
		}
	}
	// The last group (three events) is written; the process dies before
	// its flush is confirmed.
	var snap string
	reset := failpoint.Set(func(name string) {
		if name == fpWritten && snap == "" {
			snap = snapshotHeld(t, l, path, t.TempDir())
		}
	})
	if err := l.Append(context.Background(), testEvent(6), testEvent(7), testEvent(8)); err != nil {
		t.Fatal(err)
	}
	reset()
	l.Close()
	for _, keep := range []bool{true, false} {
		t.Run(fmt.Sprint("keep=", keep), func(t *testing.T) {
			cp := snapshot(t, snap, t.TempDir())
			var seen []uint64
			var bounds []int
			l, err := Open(cp, Options{CheckTail: func(tail []*Event, b []int) int {
				for _, e := range tail {
					seen = append(seen, e.ID)
				}
				bounds = b
				if keep {
					return len(tail)
				}
				return 0
			}})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(seen, []uint64{6, 7, 8}) || !slices.Equal(bounds, []int{3}) {
				t.Errorf("CheckTail saw %v in groups ending %v, want [6 7 8] in one", seen, bounds)
			}
			want := uint64(8)
			if !keep {
				want = 5
			}
			if got := l.Last(); got != want {
				t.Errorf("after CheckTail kept=%v the log ends at %d, want %d", keep, got, want)
			}
			if r := l.Recovered(); r.Dropped != int(8-want) {
				t.Errorf("Recovered %+v", r)
			}
			// The log goes on densely from there.
			e := testEvent(100)
			if err := l.Append(context.Background(), e); err != nil || e.ID != want+1 {
				t.Errorf("append after recovery: id %d, %v", e.ID, err)
			}
			l.Close()
		})
	}
}

// TestSyncInterval: Append returns before its events are flushed; readers
// see them only once flushed, within the interval; Close flushes.
func TestSyncInterval(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "journal.db")
	var flushed atomic.Int64
	l, err := Open(path, Options{Sync: SyncInterval, Interval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	e := testEvent(1)
	if err := l.AppendFlush(context.Background(), func() error { flushed.Add(1); return nil }, e); err != nil {
		t.Fatal(err)
	}
	if e.ID != 1 {
		t.Fatalf("id %d", e.ID)
	}
	if d := time.Since(start); d < 150*time.Millisecond && l.Last() != 0 {
		t.Errorf("the event is visible %v after Append, before its flush", d)
	}
	if flushed.Load() != 0 && time.Since(start) < 150*time.Millisecond {
		t.Errorf("flush ran at once in interval mode")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := l.Wait(ctx, 0); err != nil {
		t.Fatalf("Wait for the flush: %v", err)
	}
	if flushed.Load() != 1 {
		t.Errorf("flush ran %d times, want 1", flushed.Load())
	}
	if s := l.SyncStats(); s.Mode != "interval:200ms" || s.Flushes != 1 {
		t.Errorf("SyncStats %+v", s)
	}
	e2 := testEvent(2)
	if err := l.AppendFlush(context.Background(), func() error { flushed.Add(1); return nil }, e2); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if flushed.Load() != 2 || len(readAll(t, path)) != 2 {
		t.Errorf("Close: %d flushes, %d events", flushed.Load(), len(readAll(t, path)))
	}
}

// TestIntervalPowerLoss: the WAL as it was at the last flush, bbolt as
// the kill left it — what a power loss leaves: every event flushed before
// survives.
func TestIntervalPowerLoss(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "journal.db")
	l, err := Open(path, Options{Sync: SyncInterval, Interval: time.Millisecond, WALSegment: minWALSegment})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var walAtSync []byte
	var durableAtSync uint64
	var syncs atomic.Int64
	reset := failpoint.Set(func(name string) {
		if name == fpSynced {
			b, _ := os.ReadFile(walPath(path))
			mu.Lock()
			// The flush before this one is a lower bound of what is
			// durable in this copy.
			walAtSync, durableAtSync = b, l.last.Load()
			mu.Unlock()
			syncs.Add(1)
		}
	})
	// Flushes during the load, and events written after the last.
	ld := &load{written: map[uint64]string{}}
	ld.runUntil(t, l, 1500, func() bool { return syncs.Load() >= 2 })
	ld.run(t, l, 100)
	reset()
	snap := snapshot(t, path, t.TempDir())
	l.Close()
	mu.Lock()
	os.WriteFile(walPath(snap), walAtSync, 0o600)
	durable := durableAtSync
	mu.Unlock()
	got := checkRecovered(t, snap, seq(int(min(durable, uint64(len(ld.acked))))), ld.written, Options{})
	t.Logf("%d acknowledged, %d flushed at the last sync, %d recovered", len(ld.acked), durable, len(got))
}

// TestFlushFailure: a group whose flush fails is taken back and written
// again without the request that failed; the others are journaled, the
// failed one gets no id.
func TestFlushFailure(t *testing.T) {
	l := newTestLog(t)
	boom := errors.New("boom")
	var wg sync.WaitGroup
	errs := make([]error, 16)
	evs := make([]*Event, 16)
	for i := range 16 {
		evs[i] = testEvent(i)
		wg.Go(func() {
			var fn func() error
			if i == 5 {
				fn = func() error { return boom }
			}
			errs[i] = l.AppendFlush(context.Background(), fn, evs[i])
		})
	}
	wg.Wait()
	for i, err := range errs {
		if i == 5 {
			if !errors.Is(err, boom) || evs[i].ID != 0 {
				t.Errorf("failed flush: %v, id %d", err, evs[i].ID)
			}
		} else if err != nil {
			t.Errorf("append %d: %v", i, err)
		}
	}
	if l.Last() != 15 {
		t.Errorf("last %d, want 15", l.Last())
	}
	var ids []uint64
	l.Range(1, 0, func(e *Event) error { ids = append(ids, e.ID); return nil })
	if !slices.Equal(ids, seq(15)) {
		t.Errorf("ids %v", ids)
	}
}
