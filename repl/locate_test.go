package repl

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/journal"
)

// world is a source for Locate on plain files: a live tree, a flat cmroot,
// a journal, a fake clock, and hooks that move content at chosen moments
// of a lookup, as concurrent writers do.
type world struct {
	t      *testing.T
	root   string
	cm     string
	ev     sliceEvents
	clock  time.Time
	looks  []string // every place looked at, in order: a path or "cmroot"
	sleeps int
	// beforeLook runs before a place is looked at.
	beforeLook func(place string)
	// onSleep runs at every pause between two passes.
	onSleep func(n int)
}

func newWorld(t *testing.T) *world {
	t.Helper()
	d := t.TempDir()
	w := &world{t: t, root: filepath.Join(d, "root"), cm: filepath.Join(d, "cm"), clock: time.Unix(1700000000, 0)}
	for _, p := range []string{w.root, w.cm} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

func (w *world) places() Places {
	return Places{
		Events: &w.ev,
		Live: func(rel string, size int64) (*os.File, error) {
			w.look(rel)
			f, err := os.Open(filepath.Join(w.root, rel))
			if err != nil {
				return nil, nil
			}
			if fi, err := f.Stat(); err != nil || fi.Size() != size {
				f.Close()
				return nil, nil
			}
			return f, nil
		},
		CMRoot: func(name string) (*os.File, error) {
			w.look("cmroot")
			return os.Open(filepath.Join(w.cm, name))
		},
		Sleep: func(ctx context.Context, d time.Duration) error {
			w.sleeps++
			w.clock = w.clock.Add(d)
			if w.onSleep != nil {
				w.onSleep(w.sleeps)
			}
			return ctx.Err()
		},
		Now: func() time.Time { return w.clock },
	}
}

func (w *world) look(place string) {
	if w.beforeLook != nil {
		w.beforeLook(place)
	}
	w.looks = append(w.looks, place)
}

// write puts b at rel in the live tree.
func (w *world) write(rel, b string) journal.File {
	w.t.Helper()
	p := filepath.Join(w.root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		w.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(b), 0o644); err != nil {
		w.t.Fatal(err)
	}
	return journal.File{Path: rel, Size: int64(len(b)), XXH64: journal.Sum([]byte(b))}
}

// rename moves a live file or directory, as cmfs does before it journals.
func (w *world) rename(old, new string) {
	w.t.Helper()
	if err := os.MkdirAll(filepath.Dir(filepath.Join(w.root, new)), 0o755); err != nil {
		w.t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(w.root, old), filepath.Join(w.root, new)); err != nil {
		w.t.Fatal(err)
	}
}

// preserve moves the live file at rel into cmroot, as an overwrite or a
// delete through cmfs does.
func (w *world) preserve(rel string) {
	w.t.Helper()
	b, err := os.ReadFile(filepath.Join(w.root, rel))
	if err != nil {
		w.t.Fatal(err)
	}
	name := CMName(journal.File{Size: int64(len(b)), XXH64: journal.Sum(b)})
	if err := os.Rename(filepath.Join(w.root, rel), filepath.Join(w.cm, name)); err != nil {
		w.t.Fatal(err)
	}
}

// journal appends an event.
func (w *world) journal(typ journal.Type, path, newPath, target string) uint64 {
	id := uint64(len(w.ev.events) + 1)
	w.ev.events = append(w.ev.events, &journal.Event{ID: id, Type: typ, Path: path, NewPath: newPath, Target: target})
	return id
}

func (w *world) locate(f journal.File, after uint64, skipPath bool) (string, Where, error) {
	w.t.Helper()
	file, where, err := Locate(context.Background(), w.places(), f, after, skipPath)
	if err != nil {
		return "", 0, err
	}
	defer file.Close()
	b, err := io.ReadAll(file)
	if err != nil {
		w.t.Fatal(err)
	}
	return string(b), where, nil
}

// insert writes b at rel in the live tree and journals the insert.
func (w *world) insert(rel, b string) (journal.File, uint64) {
	w.t.Helper()
	return w.write(rel, b), w.journal(journal.Insert, rel, "", "")
}

// move renames old to new in the live tree and journals it as typ.
func (w *world) move(typ journal.Type, old, new string) {
	w.t.Helper()
	w.rename(old, new)
	w.journal(typ, old, new, "")
}

// TestLocate finds content that moved while it was looked for. Content
// that is nowhere: TestLocateGivesUp.
func TestLocate(t *testing.T) {
	const x = "content x"
	tests := []struct {
		name string
		// path is the file asked for: x written there and its insert
		// journaled before setup.
		path string
		// setup moves things in the world; it returns whether the path
		// was read already.
		setup     func(w *world) (skip bool)
		wantWhere Where
		// onePass: found in the first pass over the places, without
		// waiting for the journal (the order of the looks alone finds it).
		onePass bool
	}{{
		// The defect: .t1 was renamed to part-0, and part-0 is overwritten
		// (its content preserved) just before the lookup looks at it.
		// cmroot must be looked at after part-0, not before.
		name: "renamed, then preserved while looking",
		path: ".t1",
		setup: func(w *world) bool {
			w.move(journal.Rename, ".t1", "part-0")
			w.beforeLook = func(place string) {
				if place == "part-0" {
					w.preserve("part-0")
					w.insert("part-0", "other x!!")
					w.beforeLook = nil
				}
			}
			return false
		},
		wantWhere: InCMRoot,
		onePass:   true,
	}, {
		// cmfs renames first and journals right after: a pass that comes
		// in between finds nothing; the next one reads the new event.
		name: "renamed, not journaled yet",
		path: ".t1",
		setup: func(w *world) bool {
			w.rename(".t1", "part-0")
			w.onSleep = func(n int) {
				if n == 1 {
					w.journal(journal.Rename, ".t1", "part-0", "")
				}
			}
			return false
		},
		wantWhere: AtPath,
	}, {
		name: "partition renamed twice, then exchanged",
		path: "d.db/t/p=1/f",
		setup: func(w *world) bool {
			w.move(journal.RenamePartition, "d.db/t/p=1", "d.db/t/p=2")
			w.move(journal.RenamePartition, "d.db/t/p=2", "d.db/t/p=3")
			w.write("d.db/t/p=4/f", "other x!!")
			w.rename("d.db/t/p=3", "d.db/t/tmp")
			w.rename("d.db/t/p=4", "d.db/t/p=3")
			w.rename("d.db/t/tmp", "d.db/t/p=4")
			w.journal(journal.RenamePartition, "d.db/t/p=3", "d.db/t/p=4", "exchange")
			return false
		},
		wantWhere: AtPath,
	}, {
		// The loader read the path and found other bytes: the path is
		// not looked at again, the content is chased.
		name: "path read already",
		path: "part-0",
		setup: func(w *world) bool {
			w.move(journal.Rename, "part-0", "part-1")
			w.write("part-0", x) // the same bytes again: skipped all the same
			return true
		},
		wantWhere: AtPath,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t)
			f, after := w.insert(tt.path, x)
			skip := tt.setup(w)
			start := w.clock
			got, where, err := w.locate(f, after, skip)
			t.Logf("looked at %q, %d pauses, %v", w.looks, w.sleeps, w.clock.Sub(start))
			if skip {
				for _, p := range w.looks {
					if p == f.Path {
						t.Errorf("looked at the path %s, which the caller read already", p)
					}
				}
			}
			if err != nil {
				t.Fatalf("got %v, want the content (%v)", err, tt.wantWhere)
			}
			if got != x || where != tt.wantWhere {
				t.Fatalf("got %q from %v, want %q from %v", got, where, x, tt.wantWhere)
			}
			if tt.onePass && w.sleeps > 0 {
				t.Errorf("found after %d pauses, want it in the first pass", w.sleeps)
			}
		})
	}
}

// How long Locate keeps looking for content that is nowhere: until the
// journal is quiet for locateQuiet, at most locateFor while it is busy.
func TestLocateGivesUp(t *testing.T) {
	f := journal.File{Path: "part-0", Size: 1, XXH64: journal.Sum([]byte("x"))}
	for _, busy := range []bool{false, true} {
		w := newWorld(t)
		after := w.journal(journal.Insert, "part-0", "", "")
		if busy {
			w.onSleep = func(int) { w.journal(journal.Insert, "other", "", "") }
		}
		start := w.clock
		if _, _, err := w.locate(f, after, false); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("busy %v: got %v", busy, err)
		}
		got, want := w.clock.Sub(start), locateQuiet
		if busy {
			want = locateFor
		}
		if got < want || got > want+locateQuiet {
			t.Errorf("busy %v: gave up after %v, want %v", busy, got, want)
		}
	}
	// Without an event to start from, one look at the path and cmroot.
	w := newWorld(t)
	if _, _, err := w.locate(f, 0, false); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("no event: got %v", err)
	}
	if len(w.looks) != 2 || w.sleeps != 0 {
		t.Errorf("no event: looked at %q with %d pauses, want the path and cmroot once", w.looks, w.sleeps)
	}
}
