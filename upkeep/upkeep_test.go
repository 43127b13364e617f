package upkeep

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/cmroot"
	"github.com/cmfs-project/cmfs/journal"
	"github.com/cmfs-project/cmfs/slot"
	"github.com/cmfs-project/cmfs/upkeep/upkeeptest"
)

func TestWalk(t *testing.T) {
	e := upkeeptest.New(t)
	for range walkBatch + 3 {
		e.Append(t, &journal.Event{Type: journal.Mkdir, Path: "x"})
	}
	last := e.J.Last()
	for _, tc := range []struct {
		name     string
		from, to uint64
		want     []uint64 // first and last id delivered
		n        int
	}{
		{"all", 0, 0, []uint64{1, last}, int(last)},
		{"across a batch", walkBatch - 1, walkBatch + 2, []uint64{walkBatch - 1, walkBatch + 2}, 4},
		{"one", 7, 7, []uint64{7, 7}, 1},
		{"past the end", last + 1, 0, nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ids []uint64
			if err := Walk(context.Background(), e.J, tc.from, tc.to, false, func(ev *journal.Event) error {
				ids = append(ids, ev.ID)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if len(ids) != tc.n || (tc.n > 0 && (ids[0] != tc.want[0] || ids[len(ids)-1] != tc.want[1])) {
				t.Errorf("Walk(%d, %d) delivered %d events %v…, want %d from %v", tc.from, tc.to, len(ids), ids[:min(len(ids), 3)], tc.n, tc.want)
			}
		})
	}
	if err := Walk(context.Background(), e.J, 5, 2, false, func(*journal.Event) error { return nil }); !errors.Is(err, ErrInvalid) {
		t.Errorf("Walk(5, 2) = %v, want ErrInvalid", err)
	}
}

// TestWalkFollow: following delivers events appended after the walk began
// and ends at to.
func TestWalkFollow(t *testing.T) {
	e := upkeeptest.New(t)
	e.Append(t, &journal.Event{Type: journal.Mkdir, Path: "a"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	var ids []uint64
	go func() {
		done <- Walk(ctx, e.J, 1, 3, true, func(ev *journal.Event) error {
			ids = append(ids, ev.ID)
			return nil
		})
	}()
	e.Append(t, &journal.Event{Type: journal.Mkdir, Path: "b"}, &journal.Event{Type: journal.Mkdir, Path: "c"}, &journal.Event{Type: journal.Mkdir, Path: "d"})
	if err := <-done; err != nil {
		t.Fatalf("Walk follow to 3: %v", err)
	}
	if !slices.Equal(ids, []uint64{1, 2, 3}) {
		t.Errorf("Walk follow to 3 delivered %v, want [1 2 3]", ids)
	}
}

func TestFsckRetain(t *testing.T) {
	e := upkeeptest.New(t)
	kept := e.Preserve(t, "kept")
	e.Preserve(t, "orphan")
	gone := journal.File{Path: "sales.db/orders/part-1", Size: 4, XXH64: journal.Sum([]byte("gone")), CM: cmroot.Name(journal.Sum([]byte("gone")), 4)}
	e.Append(t,
		&journal.Event{Type: journal.Delete, Path: kept.Path, Files: []journal.File{kept}},
		&journal.Event{Type: journal.Delete, Path: gone.Path, Files: []journal.File{gone}},
	)
	r, err := Fsck(e.J, e.Store, false)
	if err != nil {
		t.Fatal(err)
	}
	if r.Entries != 2 || r.Referenced != 2 || len(r.Orphans) != 1 || !slices.Equal(r.Missing, []string{gone.CM}) || r.OK() || r.Clean() {
		t.Errorf("Fsck = %+v, want 2 entries, 2 referenced, 1 orphan, missing %s, not OK", r, gone.CM)
	}
	// Once the events are older than the retention, gc may have removed
	// the entry: expired, not missing.
	later := time.Now().Add(cmroot.DefaultRetain + time.Hour)
	r, err = FsckRetain(e.J, e.Store, true, cmroot.DefaultRetain, later)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Missing) != 0 || !slices.Equal(r.Expired, []string{gone.CM}) || !r.OK() {
		t.Errorf("FsckRetain a day later = %+v, want %s expired and OK", r, gone.CM)
	}
}

func TestGCInvalid(t *testing.T) {
	e := upkeeptest.New(t)
	for _, opts := range []GCOptions{{Retain: -time.Second}, {RetainMax: -time.Second}} {
		if _, err := GC(context.Background(), e.J, e.Store, opts, time.Now()); !errors.Is(err, ErrInvalid) {
			t.Errorf("GC(%+v) = %v, want ErrInvalid", opts, err)
		}
	}
}

// TestGCSlots: gc keeps what a slot's destination still needs past the
// retention, drops it past the retain-max, and raises the horizon past
// every event naming what it removed.
func TestGCSlots(t *testing.T) {
	ctx := context.Background()
	e := upkeeptest.New(t)
	slots := slot.Open(e.Dir)
	old := e.Preserve(t, "old content")
	mid := e.Preserve(t, "mid content")
	e.Append(t,
		&journal.Event{Type: journal.Delete, Path: old.Path, Files: []journal.File{old}}, // 1
		&journal.Event{Type: journal.Mkdir, Path: "x"},                                   // 2
		&journal.Event{Type: journal.Delete, Path: mid.Path, Files: []journal.File{mid}}, // 3
	)
	if _, _, err := slots.Advance("r1", 2, time.Now()); err != nil {
		t.Fatal(err)
	}
	day := time.Now().Add(24 * time.Hour)
	// r1 has loaded event 2: it still needs what event 3 names, not 1.
	res, err := GC(ctx, e.J, e.Store, GCOptions{Retain: time.Hour, RetainMax: 48 * time.Hour, Slots: slots}, day)
	if err != nil {
		t.Fatal(err)
	}
	if want := (GCResult{Removed: 1, Bytes: old.Size, Pinned: 1, PinnedBytes: mid.Size, Horizon: 2}); res != want {
		t.Errorf("GC with a slot at 2 = %+v, want %+v", res, want)
	}
	if _, err := e.Store.Lookup(mid.CM); err != nil {
		t.Errorf("the entry the slot needs is gone: %v", err)
	}
	st, _ := slots.Load()
	if r1, _ := st.Find("r1"); st.Lost(r1) {
		t.Errorf("slot at 2 lost with horizon %d", st.Horizon)
	}
	// Past the retain-max it goes anyway, and the slot is lost.
	res, err = GC(ctx, e.J, e.Store, GCOptions{Retain: time.Hour, RetainMax: 12 * time.Hour, Slots: slots}, day)
	if err != nil {
		t.Fatal(err)
	}
	if want := (GCResult{Removed: 1, Bytes: mid.Size, Horizon: 3}); res != want {
		t.Errorf("GC past the retain-max = %+v, want %+v", res, want)
	}
	st, _ = slots.Load()
	if r1, _ := st.Find("r1"); !st.Lost(r1) {
		t.Errorf("slot at 2 not lost with horizon %d", st.Horizon)
	}
	lost, err := slot.FirstLost(ctx, func(_ context.Context, from, to uint64, fn func(*journal.Event) error) error {
		return e.J.Range(from, to, fn)
	}, 0, st.Horizon, func(cm string) bool { _, err := e.Store.Lookup(cm); return err == nil })
	if err != nil || lost != nil {
		// Neither content was added by an event: nothing to reproduce.
		t.Errorf("FirstLost = %+v, %v, want nil", lost, err)
	}
}

// TestGCNoSlots: without slots gc goes by age alone, and every event up
// to the newest is behind the horizon once it removed something.
func TestGCNoSlots(t *testing.T) {
	e := upkeeptest.New(t)
	f := e.Preserve(t, "content")
	e.Append(t, &journal.Event{Type: journal.Delete, Path: f.Path, Files: []journal.File{f}})
	slots := slot.Open(e.Dir)
	res, err := GC(context.Background(), e.J, e.Store, GCOptions{Retain: time.Hour, Slots: slots}, time.Now().Add(2*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if want := (GCResult{Removed: 1, Bytes: f.Size, Horizon: 1}); res != want {
		t.Errorf("GC = %+v, want %+v", res, want)
	}
}
