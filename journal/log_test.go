package journal

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	bolt "go.etcd.io/bbolt"
)

// newTestLog opens a writable Log in a fresh directory. Cleanup runs a
// full Verify, then closes it.
func newTestLog(t *testing.T) *Log {
	t.Helper()
	return openTestLog(t, filepath.Join(t.TempDir(), "journal.db"), Options{})
}

// openTestLog opens the Log at path. Cleanup verifies the journal (through
// a read-only Log if the test closed this one), then closes it.
func openTestLog(t *testing.T, path string, opts Options) *Log {
	t.Helper()
	l, err := Open(path, opts)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	t.Cleanup(func() {
		v := l
		if l.isClosed.Load() {
			var err error
			if v, err = Open(path, Options{ReadOnly: true}); err != nil {
				t.Errorf("cleanup: reopen: %v", err)
				return
			}
			defer v.Close()
		}
		if err := v.Verify(); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		if err := l.Close(); err != nil {
			t.Errorf("cleanup: Close: %v", err)
		}
	})
	return l
}

// testEvent is a typical INSERT event, unique by n.
func testEvent(n int) *Event {
	p := fmt.Sprintf("sales.db/orders/dt=2024-01-01/part-%05d.parquet", n)
	e := &Event{
		Type:  Insert,
		Path:  p,
		Files: []File{{Path: p, Size: int64(n), XXH64: Sum([]byte(p))}},
	}
	e.Stamp()
	return e
}

func appendN(t *testing.T, l *Log, n int) []*Event {
	t.Helper()
	var events []*Event
	for i := range n {
		e := testEvent(i)
		if err := l.Append(context.Background(), e); err != nil {
			t.Fatalf("Append %d: %v", i, err)
		}
		events = append(events, e)
	}
	return events
}

func collect(t *testing.T, l *Log, from, to uint64) []uint64 {
	t.Helper()
	var ids []uint64
	if err := l.Range(from, to, func(e *Event) error {
		ids = append(ids, e.ID)
		return nil
	}); err != nil {
		t.Fatalf("Range(%d, %d): %v", from, to, err)
	}
	return ids
}

func TestAppendDenseConcurrent(t *testing.T) {
	l := newTestLog(t)
	const writers, each = 64, 20
	var (
		mu   sync.Mutex
		seen = make(map[uint64]string)
		wg   sync.WaitGroup
	)
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				e := testEvent(w*each + i)
				if err := l.Append(context.Background(), e); err != nil {
					t.Errorf("Append: %v", err)
					return
				}
				mu.Lock()
				if p, dup := seen[e.ID]; dup {
					t.Errorf("id %d given to %s and %s", e.ID, p, e.Path)
				}
				seen[e.ID] = e.Path
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	const n = writers * each
	if got := l.Last(); got != n {
		t.Fatalf("Last() = %d, want %d", got, n)
	}
	var want uint64 = 1
	if err := l.Range(0, 0, func(e *Event) error {
		if e.ID != want {
			return fmt.Errorf("Range gave id %d, want %d", e.ID, want)
		}
		if seen[e.ID] != e.Path {
			return fmt.Errorf("event %d: path %q, Append saw %q", e.ID, e.Path, seen[e.ID])
		}
		want++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if want != n+1 {
		t.Errorf("Range saw %d events, want %d", want-1, n)
	}
}

func TestAppendSeveral(t *testing.T) {
	l := newTestLog(t)
	appendN(t, l, 2)
	a, b, c := testEvent(10), testEvent(11), testEvent(12)
	stamp := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	b.Time = stamp
	if err := l.Append(context.Background(), a, b, c); err != nil {
		t.Fatal(err)
	}
	if a.ID != 3 || b.ID != 4 || c.ID != 5 {
		t.Errorf("ids %d %d %d, want 3 4 5", a.ID, b.ID, c.ID)
	}
	if !b.Time.Equal(stamp) {
		t.Errorf("Append changed a set Time to %v", b.Time)
	}
	if a.Time.IsZero() || !a.Time.Equal(c.Time) {
		t.Errorf("one commit, times %v and %v", a.Time, c.Time)
	}
	if err := l.Append(context.Background()); err != nil {
		t.Errorf("Append of nothing: %v", err)
	}
}

func TestDurableAcrossReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	l := openTestLog(t, path, Options{})
	events := appendN(t, l, 5)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Append(context.Background(), testEvent(9)); !errors.Is(err, ErrClosed) {
		t.Errorf("Append after Close: %v, want ErrClosed", err)
	}
	if _, err := l.Get(1); !errors.Is(err, ErrClosed) {
		t.Errorf("Get after Close: %v, want ErrClosed", err)
	}

	l = openTestLog(t, path, Options{})
	if got := l.Last(); got != 5 {
		t.Fatalf("Last() after reopen = %d, want 5", got)
	}
	for _, want := range events {
		got, err := l.Get(want.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Path != want.Path || !got.Time.Equal(want.Time) || got.Files[0] != want.Files[0] || got.Table != "orders" {
			t.Errorf("Get(%d) = %+v, want %+v", want.ID, got, want)
		}
	}
	e := testEvent(6)
	if err := l.Append(context.Background(), e); err != nil || e.ID != 6 {
		t.Errorf("Append after reopen: id %d, %v; want 6", e.ID, err)
	}
}

func TestRange(t *testing.T) {
	l := newTestLog(t)
	appendN(t, l, 10)
	ids := func(from, to uint64) []uint64 {
		var r []uint64
		for id := from; id <= to; id++ {
			r = append(r, id)
		}
		return r
	}
	tests := []struct {
		from, to uint64
		want     []uint64
	}{
		{0, 0, ids(1, 10)},
		{1, 10, ids(1, 10)},
		{3, 5, ids(3, 5)},
		{4, 4, ids(4, 4)},
		{5, 0, ids(5, 10)},
		{0, 3, ids(1, 3)},
		{8, 20, ids(8, 10)},
		{11, 0, nil},
		{6, 3, nil},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d-%d", tt.from, tt.to), func(t *testing.T) {
			got := collect(t, l, tt.from, tt.to)
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("Range(%d, %d) = %v, want %v", tt.from, tt.to, got, tt.want)
			}
		})
	}
	t.Run("stop", func(t *testing.T) {
		stop := errors.New("stop")
		n := 0
		err := l.Range(0, 0, func(*Event) error {
			if n++; n == 3 {
				return stop
			}
			return nil
		})
		if err != stop || n != 3 {
			t.Errorf("Range returned %v after %d events, want stop after 3", err, n)
		}
	})
}

func TestRangeChunks(t *testing.T) {
	l := openTestLog(t, filepath.Join(t.TempDir(), "journal.db"), Options{NoSync: true})
	n := 2*rangeChunk + 10
	events := make([]*Event, n)
	for i := range events {
		events[i] = testEvent(i)
	}
	if err := l.Append(context.Background(), events...); err != nil {
		t.Fatal(err)
	}
	// fn may append: Range does not hold a transaction while calling it.
	count := 0
	err := l.Range(0, 0, func(e *Event) error {
		if count++; e.ID != uint64(count) {
			return fmt.Errorf("got id %d, want %d", e.ID, count)
		}
		if count%rangeChunk == 0 {
			return l.Append(context.Background(), testEvent(count))
		}
		return nil
	})
	if err != nil || count != n {
		t.Errorf("Range: %d events, %v; want %d", count, err, n)
	}
	if got := len(collect(t, l, rangeChunk, 0)); got != n+2-rangeChunk+1 {
		t.Errorf("Range(%d, 0) gave %d events, want %d", rangeChunk, got, n+2-rangeChunk+1)
	}
}

func TestGetMissing(t *testing.T) {
	l := newTestLog(t)
	appendN(t, l, 2)
	for _, id := range []uint64{0, 3, 1 << 40} {
		if e, err := l.Get(id); !errors.Is(err, ErrNotFound) {
			t.Errorf("Get(%d) = %v, %v; want ErrNotFound", id, e, err)
		}
	}
}

func TestWait(t *testing.T) {
	l := newTestLog(t)
	t.Run("wakes on append", func(t *testing.T) {
		got := make(chan uint64, 1)
		go func() {
			last, err := l.Wait(context.Background(), l.Last())
			if err != nil {
				t.Errorf("Wait: %v", err)
			}
			got <- last
		}()
		e := testEvent(1)
		if err := l.Append(context.Background(), e); err != nil {
			t.Fatal(err)
		}
		select {
		case last := <-got:
			if last < e.ID {
				t.Errorf("Wait returned %d, want >= %d", last, e.ID)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Wait did not wake up")
		}
	})
	t.Run("already there", func(t *testing.T) {
		if last, err := l.Wait(context.Background(), 0); err != nil || last != l.Last() {
			t.Errorf("Wait(0) = %d, %v; want %d", last, err, l.Last())
		}
	})
	t.Run("cancel", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			_, err := l.Wait(ctx, l.Last())
			errc <- err
		}()
		cancel()
		select {
		case err := <-errc:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("Wait after cancel: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Wait did not return on cancel")
		}
	})
}

func TestWaitClose(t *testing.T) {
	l, err := Open(filepath.Join(t.TempDir(), "journal.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := l.Wait(context.Background(), 0)
		errc <- err
	}()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, ErrClosed) {
		t.Errorf("Wait across Close: %v, want ErrClosed", err)
	}
}

func TestLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	w := openTestLog(t, path, Options{})
	appendN(t, w, 3)

	for _, opts := range []Options{
		{ReadOnly: true},
		{ReadOnly: true, LockTimeout: 100 * time.Millisecond},
		{LockTimeout: 100 * time.Millisecond},
	} {
		if l, err := Open(path, opts); !errors.Is(err, ErrLocked) {
			if l != nil {
				l.Close()
			}
			t.Errorf("Open(%+v) while a writer holds the journal: %v, want ErrLocked", opts, err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	r := openTestLog(t, path, Options{ReadOnly: true})
	if err := r.Append(context.Background(), testEvent(1)); !errors.Is(err, ErrReadOnly) {
		t.Errorf("Append on a read-only Log: %v, want ErrReadOnly", err)
	}
	if got := r.Last(); got != 3 {
		t.Errorf("read-only Last() = %d, want 3", got)
	}
	if got := collect(t, r, 2, 0); fmt.Sprint(got) != "[2 3]" {
		t.Errorf("read-only Range(2, 0) = %v", got)
	}
	if e, err := r.Get(3); err != nil || e.ID != 3 {
		t.Errorf("read-only Get(3) = %v, %v", e, err)
	}

	// A read-only Log holds the lock only during a call: a writer can
	// open, and the reader sees its commits.
	w2 := openTestLog(t, path, Options{})
	appendN(t, w2, 2)
	if _, err := r.Get(1); !errors.Is(err, ErrLocked) {
		t.Errorf("read-only Get while a writer is open: %v, want ErrLocked", err)
	}
	if got := r.Last(); got != 3 {
		t.Errorf("read-only Last() while locked = %d, want the last seen, 3", got)
	}
	if _, err := r.Wait(context.Background(), 3); !errors.Is(err, ErrLocked) {
		t.Errorf("read-only Wait while a writer is open: %v, want ErrLocked", err)
	}
	if err := w2.Close(); err != nil {
		t.Fatal(err)
	}
	if got := r.Last(); got != 5 {
		t.Errorf("read-only Last() after another writer appended = %d, want 5", got)
	}
	if last, err := r.Wait(context.Background(), 3); err != nil || last != 5 {
		t.Errorf("read-only Wait(3) = %d, %v; want 5", last, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Millisecond)
	defer cancel()
	if last, err := r.Wait(ctx, 5); !errors.Is(err, context.DeadlineExceeded) || last != 5 {
		t.Errorf("read-only Wait(5) with nothing new = %d, %v; want 5, deadline exceeded", last, err)
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(filepath.Join(dir, "missing.db"), Options{ReadOnly: true}); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("read-only Open of a missing file: %v, want fs.ErrNotExist", err)
	}
	if _, err := Open(filepath.Join(dir, "nodir", "journal.db"), Options{}); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Open in a missing directory: %v, want fs.ErrNotExist", err)
	}
}

func TestAppendInvalid(t *testing.T) {
	l := newTestLog(t)
	tests := []struct {
		name string
		edit func(*Event)
	}{
		{"empty type", func(e *Event) { e.Type = "" }},
		{"empty path", func(e *Event) { e.Path = "" }},
		{"uppercase xxh64", func(e *Event) { e.Files[0].XXH64 = strings.ToUpper(e.Files[0].XXH64) }},
		{"short xxh64", func(e *Event) { e.Files[0].XXH64 = "abc" }},
		{"empty xxh64", func(e *Event) { e.Files[0].XXH64 = "" }},
		{"negative size", func(e *Event) { e.Files[0].Size = -1 }},
		{"invalid utf-8", func(e *Event) { e.Path = "sales.db/\xff" }},
		{"invalid utf-8 file", func(e *Event) { e.Files[0].CM = "\xfe" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			good, bad := testEvent(1), testEvent(2)
			tt.edit(bad)
			if err := l.Append(context.Background(), good, bad); !errors.Is(err, ErrInvalid) {
				t.Errorf("Append: %v, want ErrInvalid", err)
			}
			if good.ID != 0 || l.Last() != 0 {
				t.Errorf("failed Append assigned id %d, Last() = %d", good.ID, l.Last())
			}
		})
	}
	// A time JSON cannot encode.
	bad := testEvent(3)
	bad.Time = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := l.Append(context.Background(), bad); !errors.Is(err, ErrInvalid) || bad.ID != 0 {
		t.Errorf("Append of year 10000: id %d, %v; want ErrInvalid", bad.ID, err)
	}
	appendN(t, l, 1)
	if got := l.Last(); got != 1 {
		t.Errorf("Last() = %d, want 1", got)
	}
}

func TestAppendCanceled(t *testing.T) {
	l := newTestLog(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	e := testEvent(1)
	if err := l.Append(ctx, e); !errors.Is(err, context.Canceled) || e.ID != 0 {
		t.Errorf("Append with a canceled ctx: id %d, %v", e.ID, err)
	}
}

// corrupt closes nothing: it edits the closed journal at path directly.
func corrupt(t *testing.T, path string, fn func(b *bolt.Bucket) error) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(func(tx *bolt.Tx) error { return fn(tx.Bucket(eventsBucket)) }); err != nil {
		t.Fatal(err)
	}
}

func key(id uint64) []byte {
	var k [keyLen]byte
	putKey(k[:], id)
	return k[:]
}

func TestVerifyDetects(t *testing.T) {
	tests := []struct {
		name   string
		edit   func(b *bolt.Bucket) error
		naming string
		// shallow: the record reads back, only Verify's checks of the
		// event's fields find the damage.
		shallow bool
	}{
		{"flipped payload byte", func(b *bolt.Bucket) error {
			v := append([]byte(nil), b.Get(key(2))...)
			v[len(v)/2] ^= 0x20
			return b.Put(key(2), v)
		}, "event 2", false},
		{"gap", func(b *bolt.Bucket) error { return b.Delete(key(2)) }, "event 2", false},
		{"short record", func(b *bolt.Bucket) error { return b.Put(key(2), []byte{1, 2}) }, "event 2", false},
		{"bad json", func(b *bolt.Bucket) error { return b.Put(key(2), record(t, []byte("{"))) }, "event 2", false},
		{"wrong id", func(b *bolt.Bucket) error {
			return b.Put(key(2), record(t, []byte(`{"id":7,"type":"INSERT","path":"p"}`)))
		}, "event 7", false},
		{"empty path", func(b *bolt.Bucket) error {
			return b.Put(key(2), record(t, []byte(`{"id":2,"type":"INSERT","path":""}`)))
		}, "event 2", true},
		{"bad xxh64", func(b *bolt.Bucket) error {
			return b.Put(key(2), record(t, []byte(`{"id":2,"type":"INSERT","path":"p","files":[{"path":"p","xxh64":"XYZ"}]}`)))
		}, "event 2", true},
		{"negative size", func(b *bolt.Bucket) error {
			return b.Put(key(2), record(t, []byte(`{"id":2,"type":"INSERT","path":"p","files":[{"path":"p","size":-5,"xxh64":"0123456789abcdef"}]}`)))
		}, "event 2", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "journal.db")
			l, err := Open(path, Options{NoSync: true})
			if err != nil {
				t.Fatal(err)
			}
			appendN(t, l, 3)
			if err := l.Verify(); err != nil {
				t.Fatalf("Verify before corruption: %v", err)
			}
			l.Close()
			corrupt(t, path, tt.edit)

			l, err = Open(path, Options{NoSync: true})
			if err != nil {
				t.Fatalf("Open does not read every event, yet: %v", err)
			}
			defer l.Close()
			err = l.Verify()
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tt.naming) {
				t.Errorf("Verify = %v, want ErrCorrupt naming %q", err, tt.naming)
			}
			if err := l.Range(0, 0, func(*Event) error { return nil }); !errors.Is(err, ErrCorrupt) && !tt.shallow {
				t.Errorf("Range over the damage = %v, want ErrCorrupt", err)
			}
		})
	}
}

// record builds a record with a valid checksum around payload.
func record(t *testing.T, payload []byte) []byte {
	t.Helper()
	v := make([]byte, sumLen, sumLen+len(payload))
	putKey(v, xxhash.Sum64(payload))
	return append(v, payload...)
}

func TestOpenChecksEnds(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	l, err := Open(path, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, l, 3)
	l.Close()
	good := filepath.Join(t.TempDir(), "good.db")
	copyFile(t, path, good)
	tests := []struct {
		name string
		edit func(b *bolt.Bucket) error
	}{
		{"corrupt last", func(b *bolt.Bucket) error {
			v := append([]byte(nil), b.Get(key(3))...)
			v[len(v)-2] ^= 1
			return b.Put(key(3), v)
		}},
		{"not from 1", func(b *bolt.Bucket) error { return b.Delete(key(1)) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			copyFile(t, good, path)
			corrupt(t, path, tt.edit)
			for _, opts := range []Options{{}, {ReadOnly: true}} {
				if l, err := Open(path, opts); !errors.Is(err, ErrCorrupt) {
					if l != nil {
						l.Close()
					}
					t.Errorf("Open(%+v): %v, want ErrCorrupt", opts, err)
				}
			}
		})
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestCloseWhileAppending(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	l := openTestLog(t, path, Options{NoSync: true})
	var (
		wg sync.WaitGroup
		ok atomic.Int64
	)
	for w := range 16 {
		wg.Go(func() {
			for i := 0; ; i++ {
				err := l.Append(context.Background(), testEvent(w*1000+i))
				if errors.Is(err, ErrClosed) {
					return
				}
				if err != nil {
					t.Errorf("Append: %v", err)
					return
				}
				ok.Add(1)
			}
		})
	}
	for l.Last() < 100 {
		runtime.Gosched()
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	// Every acknowledged append is in the log, and nothing else.
	r := openTestLog(t, path, Options{ReadOnly: true})
	if got := r.Last(); got != uint64(ok.Load()) {
		t.Errorf("Last() = %d, acknowledged %d", got, ok.Load())
	}
}

func TestStats(t *testing.T) {
	l := newTestLog(t)
	appendN(t, l, 3)
	if err := l.Append(context.Background(), testEvent(3), testEvent(4)); err != nil {
		t.Fatal(err)
	}
	if got, want := l.Stats(), (Stats{Events: 5, Commits: 4}); got != want {
		t.Errorf("Stats() = %+v, want %+v", got, want)
	}
}

// TestApplierGathersGroups: under SyncAlways, events appended one at a time
// (each its own group, durable when Append returns) reach bbolt in shared
// commits, not one each; until then Get finds them, and Verify, which
// waits for bbolt, finds them all there.
func TestApplierGathersGroups(t *testing.T) {
	l := openTestLog(t, filepath.Join(t.TempDir(), "journal.db"), Options{Sync: SyncAlways})
	const n = 20
	before := l.SyncStats()
	start := time.Now()
	for i := range n {
		if err := l.Append(context.Background(), testEvent(i)); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Get(l.Last()); err != nil {
			t.Fatalf("event %d, durable, not readable: %v", l.Last(), err)
		}
	}
	groups := l.SyncStats().Groups - before.Groups
	if err := l.Verify(); err != nil {
		t.Fatal(err)
	}
	applies := l.SyncStats().Applies - before.Applies
	if groups < n {
		t.Fatalf("%d groups for %d appends one at a time", groups, n)
	}
	// Each commit but Verify's waited applyGather after a group: however
	// slow the machine, no more than one per pause.
	if most := uint64(time.Since(start)/applyGather) + 2; applies > most {
		t.Errorf("%d bbolt commits for %d groups in %v: the applier did not gather them", applies, groups, time.Since(start))
	}
	t.Logf("%d groups, %d bbolt commits", groups, applies)
}
