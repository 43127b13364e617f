package slot

import (
	"context"
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/cmroot"
	"github.com/cmfs-project/cmfs/internal/statedir"
	"github.com/cmfs-project/cmfs/journal"
)

func TestAdvanceDropDurable(t *testing.T) {
	dir := t.TempDir()
	s := Open(dir)
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	if st, err := s.Load(); err != nil || len(st.Slots) != 0 {
		t.Fatalf("Load of no file = %+v, %v, want empty", st, err)
	}
	if _, _, err := s.Advance("r1", 5, now); err != nil {
		t.Fatal(err)
	}
	got, _, err := s.Advance("r1", 9, now.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if got.Position != 9 || !got.Created.Equal(now) || !got.Updated.Equal(now.Add(time.Minute)) {
		t.Errorf("Advance = %+v, want position 9, created at the first", got)
	}
	if _, _, err := s.Advance("r0", 3, now); err != nil {
		t.Fatal(err)
	}
	// Another Store on the same directory (another process) sees it all.
	st, err := Open(dir).Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Slots) != 2 || st.Slots[0].Name != "r0" || st.Slots[1].Position != 9 {
		t.Errorf("Load = %+v, want r0 at 3 and r1 at 9", st.Slots)
	}
	if pos, ok := st.Oldest(); !ok || pos != 3 {
		t.Errorf("Oldest = %d, %v, want 3", pos, ok)
	}
	if err := s.Drop("r0"); err != nil {
		t.Fatal(err)
	}
	if err := s.Drop("r0"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Drop twice = %v, want ErrNotFound", err)
	}
	if fi, err := os.Stat(s.Path()); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("slots file: %v, %v: want mode 0600", fi, err)
	}
	// No temp file left behind.
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.Name() != statedir.SlotsFile && e.Name() != statedir.SlotsLockFile {
			t.Errorf("left in the state directory: %s", e.Name())
		}
	}
}

func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	s := Open(dir)
	for _, name := range []string{"", "a\nb", string([]byte{0xff}), string(make([]byte, 201))} {
		if _, _, err := s.Advance(name, 1, time.Now()); !errors.Is(err, ErrInvalid) {
			t.Errorf("Advance(%q) = %v, want ErrInvalid", name, err)
		}
	}
	if err := os.WriteFile(s.Path(), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Load(); !errors.Is(err, ErrFormat) {
		t.Errorf("Load of a damaged file = %v, want ErrFormat", err)
	}
	if _, _, err := s.Advance("r", 1, time.Now()); !errors.Is(err, ErrFormat) {
		t.Errorf("Advance on a damaged file = %v, want ErrFormat (never overwrite it)", err)
	}
}

// Concurrent updates from many stores (as from several processes, each
// with its own lock file descriptor) lose none.
func TestConcurrentUpdates(t *testing.T) {
	dir := t.TempDir()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range 10 {
				if _, _, err := Open(dir).Advance(string(rune('a'+i)), uint64(k), time.Now()); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	st, err := Open(dir).Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Slots) != 8 {
		t.Fatalf("%d slots, want 8: %+v", len(st.Slots), st.Slots)
	}
	for _, s := range st.Slots {
		if s.Position != 9 {
			t.Errorf("slot %s at %d, want 9", s.Name, s.Position)
		}
	}
}

func TestLostAndChecked(t *testing.T) {
	dir := t.TempDir()
	s := Open(dir)
	s.Advance("behind", 4, time.Now())
	s.Advance("ahead", 20, time.Now())
	if err := s.RaiseHorizon(10); err != nil {
		t.Fatal(err)
	}
	s.RaiseHorizon(7) // never lowers it
	st, _ := s.Load()
	b, _ := st.Find("behind")
	a, _ := st.Find("ahead")
	if st.Horizon != 10 || !st.Lost(b) || st.Lost(a) {
		t.Fatalf("horizon %d, behind lost %v, ahead lost %v: want 10, true, false", st.Horizon, st.Lost(b), st.Lost(a))
	}
	if pos, _ := st.Oldest(); pos != 20 {
		t.Errorf("Oldest = %d, want 20 (a lost slot pins nothing)", pos)
	}
	if err := s.Checked("behind", 4, 10); err != nil {
		t.Fatal(err)
	}
	st, _ = s.Load()
	if b, _ = st.Find("behind"); st.Lost(b) {
		t.Errorf("a slot checked against the horizon is still lost: %+v", b)
	}
}

// ev is an event with files given as "path:content" (new content) or
// "-path:content" (a preserved original).
func ev(id uint64, files ...string) *journal.Event {
	e := &journal.Event{ID: id, Type: journal.Insert}
	for _, f := range files {
		cm := f[0] == '-'
		if cm {
			f = f[1:]
		}
		i := 0
		for f[i] != ':' {
			i++
		}
		content := f[i+1:]
		jf := journal.File{Path: f[:i], Size: int64(len(content)), XXH64: journal.Sum([]byte(content))}
		if cm {
			jf.CM = cmroot.Name(jf.XXH64, jf.Size)
			e.Type = journal.Delete
		}
		e.Files = append(e.Files, jf)
	}
	return e
}

func rangeOf(evs ...*journal.Event) RangeFunc {
	return func(ctx context.Context, from, to uint64, fn func(*journal.Event) error) error {
		for _, e := range evs {
			if e.ID >= from && (to == 0 || e.ID <= to) {
				if err := fn(e); err != nil {
					return err
				}
			}
		}
		return nil
	}
}

func name(content string) string {
	return cmroot.Name(journal.Sum([]byte(content)), int64(len(content)))
}

func TestFirstLost(t *testing.T) {
	evs := rangeOf(
		ev(1, "a:one"),
		ev(2, "b:two"),
		ev(3, "-a:one"),   // a deleted: "one" preserved
		ev(4, "c:three"),  // still live
		ev(5, "-b:two"),   // b deleted: "two" preserved
		ev(6, "d:four"),   //
		ev(7, "-d:four"),  //
		ev(8, "e:five"),   //
		ev(9, "-e:five"),  // kept
		ev(10, "f:six"),   //
		ev(11, "-f:six"),  // after the horizon
		ev(12, "g:seven"), //
	)
	gone := map[string]bool{name("one"): true, name("two"): true, name("four"): true}
	present := func(cm string) bool { return !gone[cm] }
	for _, tc := range []struct {
		pos, horizon uint64
		want         uint64 // 0: nothing lost
	}{
		{0, 9, 1},  // "one", added at 1, is gone
		{1, 9, 2},  // "two", added at 2
		{2, 9, 6},  // "one" and "two" came before: "four", added at 6
		{6, 9, 0},  // everything it needs is kept
		{2, 5, 0},  // the horizon says nothing later was removed
		{9, 9, 0},  // at the horizon
		{12, 9, 0}, // past it
	} {
		lost, err := FirstLost(context.Background(), evs, tc.pos, tc.horizon, present)
		if err != nil {
			t.Fatal(err)
		}
		var got uint64
		if lost != nil {
			got = lost.Event
		}
		if got != tc.want {
			t.Errorf("FirstLost(pos %d, horizon %d) = %+v, want event %d", tc.pos, tc.horizon, lost, tc.want)
		}
	}
	lost, _ := FirstLost(context.Background(), evs, 0, 9, present)
	if lost.Path != "a" || lost.CM != name("one") || lost.RemovedBy != 3 {
		t.Errorf("FirstLost = %+v, want path a, %s, removed by event 3", lost, name("one"))
	}
}

func TestPins(t *testing.T) {
	evs := rangeOf(ev(1, "a:one"), ev(2, "-a:one"), ev(3, "b:two"), ev(4, "-b:two"), ev(5, "-c:three"))
	present := func(cm string) bool { return cm != name("three") }
	st := State{Slots: []Slot{{Name: "old", Position: 1}, {Name: "mid", Position: 3}, {Name: "new", Position: 5}, {Name: "lost", Position: 0}}, Horizon: 1}
	pins, err := Pins(context.Background(), st, 5, evs, present)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Pin{
		"old":  {Lag: 4, Entries: 2, Bytes: 6},
		"mid":  {Lag: 2, Entries: 1, Bytes: 3},
		"new":  {Lag: 0},
		"lost": {Lag: 5, Lost: true},
	}
	for _, p := range pins {
		w := want[p.Name]
		if p.Lag != w.Lag || p.Lost != w.Lost || p.Entries != w.Entries || p.Bytes != w.Bytes {
			t.Errorf("pin %s = lag %d lost %v %d entries %d bytes, want %+v", p.Name, p.Lag, p.Lost, p.Entries, p.Bytes, w)
		}
	}
}
