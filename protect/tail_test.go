package protect

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cmfs-project/cmfs/cmroot"
	"github.com/cmfs-project/cmfs/internal/statedir"
	"github.com/cmfs-project/cmfs/journal"
)

// tailWorld is a backing tree and a real cmroot store for tail checks.
type tailWorld struct {
	t       *testing.T
	backing string
	store   *cmroot.Store
}

func newTailWorld(t *testing.T) *tailWorld {
	t.Helper()
	w := &tailWorld{t: t, backing: filepath.Join(t.TempDir(), "backing")}
	if err := os.MkdirAll(filepath.Join(w.backing, ".cmfs"), 0o700); err != nil {
		t.Fatal(err)
	}
	var err error
	if w.store, err = cmroot.Open(filepath.Join(w.backing, ".cmfs", "cmroot"), cmroot.Options{NoSync: true}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.store.Close() })
	return w
}

// file writes data at rel in the tree.
func (w *tailWorld) file(rel, data string) {
	w.t.Helper()
	p := filepath.Join(w.backing, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		w.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		w.t.Fatal(err)
	}
}

func (w *tailWorld) mkdir(rel string) {
	w.t.Helper()
	if err := os.MkdirAll(filepath.Join(w.backing, rel), 0o755); err != nil {
		w.t.Fatal(err)
	}
}

// preserve keeps data in the store, as an unlink would, and returns the
// File an event names it by.
func (w *tailWorld) preserve(rel, data string) journal.File {
	w.t.Helper()
	tmp := filepath.Join(w.backing, ".cmfs", "victim")
	if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
		w.t.Fatal(err)
	}
	name, _, err := w.store.Preserve(tmp, journal.Sum([]byte(data)), int64(len(data)), true)
	if err != nil {
		w.t.Fatal(err)
	}
	return journal.File{Path: rel, Size: int64(len(data)), XXH64: journal.Sum([]byte(data)), CM: name}
}

// content is the File an event gives rel holding data.
func content(rel, data string) journal.File {
	return journal.File{Path: rel, Size: int64(len(data)), XXH64: journal.Sum([]byte(data))}
}

func ev(t journal.Type, rel string, files ...journal.File) *journal.Event {
	e := fileEvent(t, rel, files...)
	if t == journal.Write || t == journal.Insert {
		e.Type = t
	}
	return e
}

func renameEv(from, to string, files ...journal.File) *journal.Event {
	return &journal.Event{Type: journal.Rename, Path: from, NewPath: to, Files: files}
}

// check runs the tail check over groups of events (numbered from 101).
func (w *tailWorld) check(groups ...[]*journal.Event) (int, []int, TailReport) {
	w.t.Helper()
	var tail []*journal.Event
	var bounds []int
	id := uint64(100)
	for _, g := range groups {
		for _, e := range g {
			id++
			e.ID = id
			tail = append(tail, e)
		}
		bounds = append(bounds, len(tail))
	}
	var rep TailReport
	opts := Options{Backing: w.backing, State: filepath.Join(w.backing, ".cmfs"), Exclude: statedir.DefaultExcludes,
		Hidden: []string{filepath.Join(w.backing, ".cmfs")}}
	kept := TailCheck(opts, w.store.Dir(), &rep)(tail, bounds)
	return kept, bounds, rep
}

func group(events ...*journal.Event) []*journal.Event { return events }

func TestTailCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		// run builds the tree and the groups, and says which boundary
		// (-1: none, keep 0) must be kept and how many paths moved on.
		run       func(w *tailWorld) (groups [][]*journal.Event, keep, moved int)
		whyPrefix string // of the report when something is dropped
	}{
		{"all consistent: all kept", func(w *tailWorld) ([][]*journal.Event, int, int) {
			w.file("d.db/t/p=1/a", "new a\n")
			w.mkdir("d.db/t/p=2")
			w.file("d.db/t/p=1/c2", "c\n")
			if err := os.Symlink("a", filepath.Join(w.backing, "d.db/t/p=1/l")); err != nil {
				t.Fatal(err)
			}
			gone := w.preserve("d.db/t/p=1/b", "old b\n")
			return [][]*journal.Event{
				group(ev(journal.Insert, "d.db/t/p=1/a", content("d.db/t/p=1/a", "new a\n"))),
				group(ev(journal.Delete, "d.db/t/p=1/b", gone), dirEvent(true, "d.db/t/p=2")),
				group(renameEv("d.db/t/p=1/c", "d.db/t/p=1/c2", content("d.db/t/p=1/c2", "c\n"))),
				group(func() *journal.Event { e := ev(journal.Symlink, "d.db/t/p=1/l"); e.Target = "a"; return e }()),
			}, 3, 0
		}, ""},
		{"last group's new content missing: dropped", func(w *tailWorld) ([][]*journal.Event, int, int) {
			w.file("a", "durable\n")
			w.file("b", "") // created, its data never reached the disk
			return [][]*journal.Event{
				group(ev(journal.Write, "a", content("a", "durable\n"))),
				group(ev(journal.Write, "b", content("b", "lost in the power cut\n"))),
			}, 0, 0
		}, "b: event 102 gave it 22 bytes"},
		{"cmroot entry missing: dropped", func(w *tailWorld) ([][]*journal.Event, int, int) {
			w.file("a", "durable\n")
			orig := content("b", "never kept\n")
			orig.CM = cmroot.Name(orig.XXH64, orig.Size)
			return [][]*journal.Event{
				group(ev(journal.Write, "a", content("a", "durable\n"))),
				group(ev(journal.Delete, "b", orig)),
			}, 0, 0
		}, "event 102 DELETE b: original"},
		{"cmroot entry with other bytes: dropped", func(w *tailWorld) ([][]*journal.Event, int, int) {
			w.file("a", "durable\n")
			orig := w.preserve("b", "the original\n")
			// Linked into cmroot by its name, its data lost: same size,
			// other bytes.
			p := w.store.Path(orig.CM)
			os.Chmod(p, 0o644)
			if err := os.WriteFile(p, []byte("THE ORIGINAL\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			return [][]*journal.Event{
				group(ev(journal.Write, "a", content("a", "durable\n"))),
				group(ev(journal.Delete, "b", orig)),
			}, 0, 0
		}, "event 102 DELETE b: original"},
		{"an inconsistent middle group made good by a later one: all kept", func(w *tailWorld) ([][]*journal.Event, int, int) {
			w.file("a", "second\n")
			w.file("x", "")
			return [][]*journal.Event{
				group(ev(journal.Write, "x", content("x", ""))),
				group(ev(journal.Write, "a", content("a", "first, lost\n"))),
				group(ev(journal.Write, "a", content("a", "second\n"))),
			}, 2, 0
		}, ""},
		{"an inconsistent middle group, later ones consistent but not curing it: the prefix before it", func(w *tailWorld) ([][]*journal.Event, int, int) {
			w.file("x", "x\n")
			w.file("c", "c\n")
			return [][]*journal.Event{
				group(ev(journal.Write, "x", content("x", "x\n"))),
				group(ev(journal.Write, "a", content("a", "lost\n"))),
				group(ev(journal.Write, "c", content("c", "c\n"))),
			}, 0, 0
		}, "a: event 102"},
		{"no consistent prefix: none kept", func(w *tailWorld) ([][]*journal.Event, int, int) {
			return [][]*journal.Event{
				group(ev(journal.Write, "a", content("a", "lost\n"))),
				group(ev(journal.Write, "b", content("b", "lost too\n"))),
			}, -1, 0
		}, "a: event 101"},
		{"the tree moved on, the content is in cmroot: kept", func(w *tailWorld) ([][]*journal.Event, int, int) {
			// An unlink in flight moved the file into cmroot; its event
			// was lost.
			w.preserve("a", "written, then removed\n")
			return [][]*journal.Event{
				group(ev(journal.Write, "a", content("a", "written, then removed\n"))),
			}, 0, 1
		}, ""},
		{"a delete the tree does not bear out: dropped", func(w *tailWorld) ([][]*journal.Event, int, int) {
			w.file("a", "a\n")
			w.file("b", "still here\n")
			orig := w.preserve("b", "still here\n")
			return [][]*journal.Event{
				group(ev(journal.Write, "a", content("a", "a\n"))),
				group(ev(journal.Delete, "b", orig)),
			}, 0, 0
		}, "b: event 102 removed it, the tree holds a file"},
		{"rm -r and mkdir again: kept", func(w *tailWorld) ([][]*journal.Event, int, int) {
			w.mkdir("d.db/t/p=2")
			orig := w.preserve("d.db/t/p=2/f", "f\n")
			return [][]*journal.Event{
				group(ev(journal.Delete, "d.db/t/p=2/f", orig)),
				group(dirEvent(false, "d.db/t/p=2")),
				group(dirEvent(true, "d.db/t/p=2")),
			}, 2, 0
		}, ""},
		{"a removed directory still there: dropped", func(w *tailWorld) ([][]*journal.Event, int, int) {
			w.mkdir("d.db/t/p=2")
			w.file("a", "a\n")
			return [][]*journal.Event{
				group(ev(journal.Write, "a", content("a", "a\n"))),
				group(dirEvent(false, "d.db/t/p=2")),
			}, 0, 0
		}, "d.db/t/p=2: event 102 removed it, the tree holds a directory"},
		{"a directory rename carries what the tail named below it", func(w *tailWorld) ([][]*journal.Event, int, int) {
			w.file("d.db/t/p=2/f", "f\n")
			return [][]*journal.Event{
				group(ev(journal.Insert, "d.db/t/p=1/f", content("d.db/t/p=1/f", "f\n"))),
				group(&journal.Event{Type: journal.RenamePartition, Path: "d.db/t/p=1", NewPath: "d.db/t/p=2"}),
			}, 1, 0
		}, ""},
		{"a rename whose new name is empty: dropped", func(w *tailWorld) ([][]*journal.Event, int, int) {
			w.file("a", "a\n")
			w.mkdir("d.db/t/p=1")
			return [][]*journal.Event{
				group(ev(journal.Write, "a", content("a", "a\n"))),
				group(&journal.Event{Type: journal.RenamePartition, Path: "d.db/t/p=1", NewPath: "d.db/t/p=9"}),
			}, 0, 0
		}, "d.db/t/p=1: event 102 removed it"},
		{"a symlink with another target: dropped", func(w *tailWorld) ([][]*journal.Event, int, int) {
			if err := os.Symlink("elsewhere", filepath.Join(w.backing, "l")); err != nil {
				t.Fatal(err)
			}
			e := ev(journal.Symlink, "l")
			e.Target = "here"
			return [][]*journal.Event{group(e)}, -1, 0
		}, `l: event 101 made a symlink to "here", the tree holds a symlink`},
		{"empty content needs no bytes", func(w *tailWorld) ([][]*journal.Event, int, int) {
			return [][]*journal.Event{group(ev(journal.Write, "gone-empty", content("gone-empty", "")))}, 0, 1
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newTailWorld(t)
			groups, keep, moved := tc.run(w)
			kept, bounds, rep := w.check(groups...)
			want := 0
			if keep >= 0 {
				want = bounds[keep]
			}
			if kept != want || rep.Kept != want || rep.Events != bounds[len(bounds)-1] {
				t.Fatalf("kept %d (report %+v), want %d of %d (bounds %v)", kept, rep, want, bounds[len(bounds)-1], bounds)
			}
			if rep.Moved != moved {
				t.Errorf("report %+v: moved %d, want %d", rep, rep.Moved, moved)
			}
			if rep.Dropped() > 0 && !strings.HasPrefix(rep.Why, tc.whyPrefix) {
				t.Errorf("why %q, want it to start %q", rep.Why, tc.whyPrefix)
			}
			if rep.Dropped() == 0 && rep.Why != "" {
				t.Errorf("nothing dropped, yet why %q", rep.Why)
			}
		})
	}
}

// TestTailCheckEmpty: a tail of nothing keeps nothing and reports
// nothing.
func TestTailCheckEmpty(t *testing.T) {
	w := newTailWorld(t)
	var rep TailReport
	if kept := TailCheck(Options{Backing: w.backing}, w.store.Dir(), &rep)(nil, nil); kept != 0 || rep != (TailReport{}) {
		t.Errorf("empty tail: kept %d, report %+v", kept, rep)
	}
}
