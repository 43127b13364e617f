package source

import (
	"context"
	"errors"
	"testing"

	"github.com/cmfs-project/cmfs/cmroot"
	"github.com/cmfs-project/cmfs/journal"
	"github.com/cmfs-project/cmfs/slot"
)

// TestConfirm: a slot is registered and moved by Confirm; a destination
// behind the horizon is told the first event it cannot reproduce, or, when
// everything it needs is still there, its slot is checked against the
// horizon and pins again.
func TestConfirm(t *testing.T) {
	ctx := context.Background()
	s := newSource(t, Config{})
	one, two := []byte("one\n"), []byte("two\n")
	f1, f2 := fileOf("db.db/t/a", one), fileOf("db.db/t/b", two)
	p1, p2 := f1, f2
	p1.CM, p2.CM = cmroot.Name(f1.XXH64, f1.Size), cmroot.Name(f2.XXH64, f2.Size)
	appendEvents(t, s.state,
		&journal.Event{Type: journal.Insert, Path: f1.Path, Files: []journal.File{f1}}, // 1
		&journal.Event{Type: journal.Insert, Path: f2.Path, Files: []journal.File{f2}}, // 2
		&journal.Event{Type: journal.Delete, Path: f1.Path, Files: []journal.File{p1}}, // 3: "one" gone
		&journal.Event{Type: journal.Delete, Path: f2.Path, Files: []journal.File{p2}}, // 4: "two" kept
	)
	s.preserve(t, two)
	store := slot.Open(s.state)
	if err := store.RaiseHorizon(4); err != nil {
		t.Fatal(err)
	}

	if _, err := s.c.Confirm(ctx, "r1", 4); err != nil {
		t.Fatalf("Confirm at the horizon: %v", err)
	}
	_, err := s.c.Confirm(ctx, "", 0)
	var lost *LostError
	if !errors.As(err, &lost) || !errors.Is(err, ErrLost) || lost.Event != 1 || lost.Path != f1.Path || lost.RemovedBy != 3 || lost.Slot != "" {
		t.Fatalf("Confirm(no slot, 0) = %v, want event 1 lost", err)
	}
	// Behind the horizon, but "one" was already loaded: nothing is lost,
	// and the slot is checked so it pins again.
	if _, err := s.c.Confirm(ctx, "r2", 1); err != nil {
		t.Fatalf("Confirm(r2, 1) = %v, want nil", err)
	}
	st, err := store.Load()
	if err != nil {
		t.Fatal(err)
	}
	if r2, ok := st.Find("r2"); !ok || r2.Position != 1 || st.Lost(r2) {
		t.Errorf("slot r2 = %+v (lost %v), want at 1, not lost", r2, st.Lost(r2))
	}
	pins, horizon, err := s.c.Slots(ctx)
	if err != nil || horizon != 4 || len(pins) != 2 {
		t.Fatalf("Slots = %+v, %d, %v", pins, horizon, err)
	}
	for _, p := range pins {
		want := slot.Pin{Slot: p.Slot}
		if p.Name == "r2" {
			want.Lag, want.Entries, want.Bytes = 3, 1, int64(len(two))
		}
		if p.Lag != want.Lag || p.Entries != want.Entries || p.Bytes != want.Bytes || p.Lost {
			t.Errorf("pin %s = %+v, want %+v", p.Name, p, want)
		}
	}
	if err := s.c.DropSlot(ctx, "r2"); err != nil {
		t.Fatal(err)
	}
	if err := s.c.DropSlot(ctx, "r2"); !errors.Is(err, slot.ErrNotFound) {
		t.Errorf("DropSlot twice = %v, want slot.ErrNotFound", err)
	}
	if _, err := s.c.Confirm(ctx, "bad\nname", 1); !errors.Is(err, ErrInvalid) {
		t.Errorf("Confirm with a bad name = %v, want ErrInvalid", err)
	}
}
