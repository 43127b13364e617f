package protect

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/cmroot"
	"github.com/cmfs-project/cmfs/internal/failpoint"
	"github.com/cmfs-project/cmfs/internal/statedir"
	"github.com/cmfs-project/cmfs/journal"
)

// harness is a Core over a backing directory, with its journal and store,
// as a mount holds them.
type harness struct {
	backing, state string
	log            *journal.Log
	store          *cmroot.Store
	core           *Core
	recovered      Recovery
}

// openHarness opens the protection of backing (made if missing); opening
// runs recovery of what a previous harness left in flight.
func openHarness(t *testing.T, backing string) *harness {
	t.Helper()
	return openHarnessWith(t, backing, nil)
}

// openHarnessWith is openHarness with the Options changed by opt first.
func openHarnessWith(t *testing.T, backing string, opt func(*Options)) *harness {
	t.Helper()
	return openHarnessJournal(t, backing, journal.Options{NoSync: true}, opt)
}

// openHarnessJournal is openHarnessWith with the journal opened with
// jopts.
func openHarnessJournal(t *testing.T, backing string, jopts journal.Options, opt func(*Options)) *harness {
	t.Helper()
	h := &harness{backing: backing, state: filepath.Join(backing, ".cmfs")}
	if err := os.MkdirAll(h.state, 0o700); err != nil {
		t.Fatal(err)
	}
	var err error
	if h.log, err = journal.Open(filepath.Join(h.state, "journal.db"), jopts); err != nil {
		t.Fatal(err)
	}
	if h.store, err = cmroot.Open(filepath.Join(h.state, "cmroot"), cmroot.Options{NoSync: true}); err != nil {
		t.Fatal(err)
	}
	opts := Options{
		Backing: backing, State: h.state, Exclude: statedir.DefaultExcludes,
		Hidden: []string{h.state, filepath.Join(h.state, "cmroot")},
	}
	if opt != nil {
		opt(&opts)
	}
	h.core, h.recovered, err = Open(context.Background(), opts, h.log, h.store)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// close ends the harness as a clean unmount does.
func (h *harness) close(t *testing.T) {
	t.Helper()
	if err := h.core.Close(); err != nil {
		t.Error(err)
	}
	h.store.Close()
	if err := h.log.Verify(); err != nil {
		t.Errorf("journal: %v", err)
	}
	h.log.Close()
}

// die stops the harness's process where it is: the in-flight table is
// closed first, so that nothing clears a slot as the stack unwinds (a
// killed process runs no deferred code), then the panic unwinds it.
func (h *harness) die(at string) {
	// Nothing the dying process does after this reaches the table: its
	// descriptor and its mapping are gone.
	h.core.inflight.f.Close()
	h.core.inflight.m.Close()
	panic(crashed{at})
}

// buried releases what a dead harness held, as the kernel does after a
// kill: files closed, nothing written.
func (h *harness) buried() {
	h.store.Close()
	h.log.Close()
}

// crashAt runs op with the harness dying at the failpoint point, and
// buries it: the process is gone, as after kill -9. op must reach point.
func (h *harness) crashAt(t *testing.T, point string, op func()) {
	t.Helper()
	hit := false
	reset := failpoint.Set(func(name string) {
		if name == point && !hit {
			hit = true
			h.die(name)
		}
	})
	func() {
		defer func() {
			if r := recover(); r != nil {
				if _, ok := r.(crashed); !ok {
					panic(r)
				}
			}
		}()
		op()
	}()
	reset()
	if !hit {
		t.Fatalf("never reached %s", point)
	}
	h.buried()
}

func (h *harness) events(t *testing.T) []journal.Event {
	t.Helper()
	var evs []journal.Event
	if err := h.log.Range(1, 0, func(e *journal.Event) error {
		evs = append(evs, *e)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return evs
}

var ctx = context.Background()

// write creates or rewrites rel through the core, as open, write and
// close through the mount do; flags are open(2)'s.
func (h *harness) write(rel string, flags int, data string) error {
	c := h.core
	var hd *Handle
	var err error
	if flags&os.O_CREATE != 0 {
		hd, err = c.Create(ctx, rel, uint32(flags&^os.O_CREATE), 0o644, Caller{})
	} else {
		p := c.Prepare(rel, flags&os.O_TRUNC != 0)
		hd, err = c.Open(ctx, rel, uint32(flags&^os.O_APPEND), Use{}, p, nil)
	}
	if err != nil {
		return err
	}
	defer hd.File().Close()
	defer hd.Release()
	off := int64(0)
	if flags&os.O_APPEND != 0 {
		fi, err := hd.File().Stat()
		if err != nil {
			return err
		}
		off = fi.Size()
	}
	if _, err := hd.File().WriteAt([]byte(data), off); err != nil {
		return err
	}
	return hd.Flush(ctx, rel, true)
}

// crashSetup is the tree every row starts from, made through the core.
var crashSetup = []struct{ rel, data string }{
	{"f.db/t/p=1/part-0", "part zero, the original\n"},
	{"f.db/t/p=1/part-1", "part one, the original\n"},
	{"f.db/t/p=2/part-0", "other partition\n"},
	{"f.db/t/p=1/.tmp-9", "staged replacement\n"},
	{"notes/readme", "outside the layout\n"},
}

// crashRow is one row of the protection table, run through the core, and
// the changes whose failpoints its steps pass.
type crashRow struct {
	name    string
	op      func(h *harness) error
	changes map[journal.Type][]string
}

func crashRows() []crashRow {
	all := []string{stepIntended, stepPreserved, stepApplied, stepFlushed, stepJournaled}
	noOrig := []string{stepIntended, stepApplied, stepFlushed, stepJournaled}
	written := []string{stepApplied, stepFlushed, stepJournaled}
	return []crashRow{
		{"unlink", func(h *harness) error { return h.core.Unlink(ctx, "f.db/t/p=1/part-0", Use{}) },
			map[journal.Type][]string{journal.Delete: all}},
		{"rename over", func(h *harness) error { return h.core.Rename(ctx, "f.db/t/p=1/.tmp-9", "f.db/t/p=1/part-1", 0, Use{}) },
			map[journal.Type][]string{journal.Rename: all}},
		{"O_TRUNC overwrite", func(h *harness) error { return h.write("f.db/t/p=1/part-0", os.O_WRONLY|os.O_TRUNC, "new\n") },
			map[journal.Type][]string{journal.Truncate: all, journal.Write: written}},
		{"truncate smaller", func(h *harness) error {
			p := h.core.Prepare("f.db/t/p=1/part-1", false)
			return h.core.Truncate(ctx, "f.db/t/p=1/part-1", 4, nil, Use{}, p, nil)
		}, map[journal.Type][]string{journal.Truncate: all}},
		{"truncate to 0", func(h *harness) error {
			p := h.core.Prepare("f.db/t/p=1/part-1", true)
			return h.core.Truncate(ctx, "f.db/t/p=1/part-1", 0, nil, Use{}, p, nil)
		}, map[journal.Type][]string{journal.Truncate: all}},
		{"in-place write", func(h *harness) error { return h.write("f.db/t/p=2/part-0", os.O_RDWR, "X") },
			map[journal.Type][]string{journal.Write: append([]string{stepIntended}, written...)}},
		{"append", func(h *harness) error { return h.write("notes/readme", os.O_WRONLY|os.O_APPEND, "more\n") },
			map[journal.Type][]string{journal.Write: append([]string{stepIntended}, written...)}},
		{"create+write+close", func(h *harness) error {
			return h.write("f.db/t/p=1/part-7", os.O_WRONLY|os.O_CREATE, "created\n")
		}, map[journal.Type][]string{journal.Write: noOrig}},
		{"rm -r partition", func(h *harness) error {
			if err := h.core.Unlink(ctx, "f.db/t/p=2/part-0", Use{}); err != nil {
				return err
			}
			return h.core.Rmdir(ctx, "f.db/t/p=2")
		}, map[journal.Type][]string{journal.Delete: all, journal.Rmdir: noOrig}},
		{"rename partition", func(h *harness) error { return h.core.Rename(ctx, "f.db/t/p=2", "f.db/t/p=3", 0, Use{}) },
			map[journal.Type][]string{journal.Rename: noOrig}},
		{"mkdir", func(h *harness) error { return h.core.Mkdir(ctx, "f.db/t/p=4", 0o755, Caller{}) },
			map[journal.Type][]string{journal.Mkdir: noOrig}},
		{"link", func(h *harness) error {
			_, err := h.core.Link(ctx, "f.db/t/p=1/part-1", "f.db/t/p=1/part-1b")
			return err
		}, map[journal.Type][]string{journal.Link: noOrig}},
		{"symlink", func(h *harness) error { return h.core.Symlink(ctx, "part-1", "f.db/t/p=1/latest", Caller{}) },
			map[journal.Type][]string{journal.Symlink: noOrig}},
	}
}

// crashed is what the crash failpoint panics with.
type crashed struct{ at string }

// TestCrashMatrix runs every row of the protection table against the core
// without a crash and with a crash at each failpoint its steps pass, then
// recovers and checks the guarantees: no acknowledged event lost (I1), no
// original an event names lost (I2), the journal's last word on every
// path what the tree holds (I3) — so a change cut short is journaled
// whole or not at all (I4).
func TestCrashMatrix(t *testing.T) {
	for _, row := range crashRows() {
		points := []string{""} // no crash
		for change, steps := range row.changes {
			for _, step := range steps {
				points = append(points, failpointName(change, step))
			}
		}
		slices.Sort(points)
		for _, point := range points {
			name := row.name + "/" + point
			if point == "" {
				name = row.name + "/no crash"
			}
			t.Run(name, func(t *testing.T) { crashCase(t, row, point) })
		}
	}
}

func crashCase(t *testing.T, row crashRow, point string) {
	backing := filepath.Join(t.TempDir(), "backing")
	h := openHarness(t, backing)
	for _, f := range crashSetup {
		mkdirs(t, h, filepath.Dir(f.rel))
		if err := h.write(f.rel, os.O_WRONLY|os.O_CREATE, f.data); err != nil {
			t.Fatalf("setup %s: %v", f.rel, err)
		}
	}
	before := h.events(t)

	hit := false
	reset := failpoint.Set(func(name string) {
		if name == point && !hit {
			hit = true
			h.die(name)
		}
	})
	err := func() (err error) {
		defer func() {
			if r := recover(); r != nil {
				if _, ok := r.(crashed); !ok {
					panic(r)
				}
				err = fmt.Errorf("crashed at %s", point)
			}
		}()
		return row.op(h)
	}()
	reset()
	if point == "" {
		if err != nil {
			t.Fatalf("%s: %v", row.name, err)
		}
		h.close(t)
	} else {
		if !hit {
			t.Fatalf("%s never reached %s (returned %v)", row.name, point, err)
		}
		h.buried()
	}

	h = openHarness(t, backing)
	defer h.close(t)
	after := h.events(t)
	var bad []string
	if len(after) < len(before) || !slices.EqualFunc(before, after[:len(before)], func(a, b journal.Event) bool { return a.ID == b.ID && sameEvent(&a, &b) }) {
		bad = append(bad, fmt.Sprintf("I1: %d events before, the first of them changed or lost after recovery", len(before)))
	}
	bad = append(bad, lostOriginals(h, after)...)
	bad = append(bad, treeViolations(t, h, after)...)
	if point == "" && len(after) == len(before) {
		bad = append(bad, "the change journaled nothing")
	}
	if point == "" && h.recovered != (Recovery{}) {
		bad = append(bad, fmt.Sprintf("a clean run left changes to recover: %+v", h.recovered))
	}
	if len(bad) > 0 {
		var lines []string
		for _, e := range after[len(before):] {
			lines = append(lines, fmt.Sprintf("%d %s %s %v", e.ID, e.Type, e.Path, e.Files))
		}
		t.Fatalf("%s, crash at %q:\n  %s\nevents since the setup:\n  %s", row.name, point,
			strings.Join(bad, "\n  "), strings.Join(lines, "\n  "))
	}
}

func mkdirs(t *testing.T, h *harness, rel string) {
	t.Helper()
	if rel == "." || rel == "" {
		return
	}
	if _, err := os.Lstat(filepath.Join(h.backing, rel)); err == nil {
		return
	}
	mkdirs(t, h, filepath.Dir(rel))
	if err := h.core.Mkdir(ctx, rel, 0o755, Caller{}); err != nil {
		t.Fatalf("mkdir %s: %v", rel, err)
	}
}

// lostOriginals lists the originals events name that cmroot lacks or holds
// with other content (I2).
func lostOriginals(h *harness, evs []journal.Event) []string {
	var out []string
	for _, e := range evs {
		for _, f := range e.Files {
			if f.CM == "" {
				continue
			}
			b, err := os.ReadFile(h.store.Path(f.CM))
			switch {
			case err != nil:
				out = append(out, fmt.Sprintf("I2: event %d %s: original %s: %v", e.ID, e.Type, f.CM, err))
			case journal.Sum(b) != f.XXH64 || int64(len(b)) != f.Size:
				out = append(out, fmt.Sprintf("I2: event %d %s: original %s holds other bytes", e.ID, e.Type, f.CM))
			}
		}
	}
	return out
}

// treeViolations compares the journal's last word on every path with the
// backing tree (the state directory and scratch space left out) (I3).
func treeViolations(t *testing.T, h *harness, evs []journal.Event) []string {
	t.Helper()
	want := journal.Replay(evs)
	got := map[string]journal.LastWord{}
	err := filepath.WalkDir(h.backing, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(h.backing, p)
		switch {
		case rel == ".cmfs" || (rel != "." && h.core.excluded(rel) && d.IsDir()):
			return filepath.SkipDir
		case h.core.excluded(rel):
			return nil
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			got[rel] = journal.LastWord{Symlink: true, Target: target}
		case d.Type().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			got[rel] = journal.LastWord{Size: int64(len(b)), XXH64: journal.Sum(b)}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for p, w := range want {
		if g, ok := got[p]; !ok {
			out = append(out, fmt.Sprintf("I3: %s: the journal says %+v, the tree has nothing", p, w))
		} else if g != w {
			out = append(out, fmt.Sprintf("I3: %s: the journal says %+v, the tree holds %+v", p, w, g))
		}
	}
	for p, g := range got {
		if _, ok := want[p]; !ok {
			out = append(out, fmt.Sprintf("I3: %s: the tree holds %+v, no event names it", p, g))
		}
	}
	slices.Sort(out)
	return out
}

// TestCrashIntervalRecoversRepeatedChange: under --sync=interval the
// journal's newest durable id lags what it has written, so an intent
// must date itself by the newest id written: dated by the durable one,
// recovery of an unlink cut short finds the previous unlink of the same
// path (written since, not yet flushed) and takes it for this one's
// event, and the path's last word stays the content made in between.
// (CI: TestKillShellWriters/interval, the rm-and-recreate loop.)
func TestCrashIntervalRecoversRepeatedChange(t *testing.T) {
	backing := filepath.Join(t.TempDir(), "backing")
	jopts := journal.Options{NoSync: true, Sync: journal.SyncInterval, Interval: time.Hour}
	h := openHarnessJournal(t, backing, jopts, nil)
	const rel = "k.db/t/p=1/part-4"
	mkdirs(t, h, path.Dir(rel))
	if err := h.write(rel, os.O_WRONLY|os.O_CREATE, "c-1\n"); err != nil {
		t.Fatal(err)
	}
	if err := h.core.Unlink(ctx, rel, Use{}); err != nil {
		t.Fatal(err)
	}
	if err := h.write(rel, os.O_WRONLY|os.O_CREATE, "d-1\n"); err != nil {
		t.Fatal(err)
	}
	h.crashAt(t, failpointName(journal.Delete, stepPreserved), func() { h.core.Unlink(ctx, rel, Use{}) })

	h = openHarnessJournal(t, backing, jopts, nil)
	if h.recovered.Journaled != 1 {
		t.Errorf("recovery %+v: want the cut-short unlink journaled", h.recovered)
	}
	h.close(t) // flushes the interval: the events become readable
	h = openHarness(t, backing)
	defer h.close(t)
	if bad := treeViolations(t, h, h.events(t)); len(bad) > 0 {
		t.Errorf("after recovery:\n%s", strings.Join(bad, "\n"))
	}
}

// TestIntervalFlushFollowsTheInode: under --sync=interval what an event
// names is flushed after its operation returned, when later changes may
// have moved it. The flush that makes a close's event durable must reach
// the file's data even though a rename took its name away first (here at
// the very moment: the rename's change is made, its own event not yet
// written, when the interval's flush runs). Flushed by name, the data
// was never synced while the event was already durable: a power loss then
// left the event naming content that was nowhere.
func TestIntervalFlushFollowsTheInode(t *testing.T) {
	backing := filepath.Join(t.TempDir(), "backing")
	jopts := journal.Options{NoSync: true, Sync: journal.SyncInterval, Interval: 200 * time.Millisecond}
	h := openHarnessJournal(t, backing, jopts, nil)
	defer h.close(t)
	const dir = "m.db/t/p=1"
	mkdirs(t, h, dir)
	var mu sync.Mutex
	synced := map[uint64]bool{}
	syncedHook = func(ino uint64) {
		mu.Lock()
		synced[ino] = true
		mu.Unlock()
	}
	defer func() { syncedHook = nil }()
	if err := h.write(dir+"/part.tmp", os.O_WRONLY|os.O_CREATE, "staged, then moved\n"); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(backing, dir, "part.tmp"), &st); err != nil {
		t.Fatal(err)
	}
	insert := h.log.Written()
	point := failpointName(journal.Rename, stepApplied)
	var flushed, hit bool
	reset := failpoint.Set(func(name string) {
		if name != point || hit {
			return
		}
		hit = true
		deadline := time.Now().Add(10 * time.Second)
		for h.log.Last() < insert && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		mu.Lock()
		flushed = synced[st.Ino]
		mu.Unlock()
	})
	err := h.core.Rename(ctx, dir+"/part.tmp", dir+"/part-0", 0, Use{})
	reset()
	if err != nil {
		t.Fatal(err)
	}
	if !hit {
		t.Fatalf("rename never reached %s", point)
	}
	if h.log.Last() < insert {
		t.Fatalf("the close's event %d was not flushed within 10 s", insert)
	}
	if !flushed {
		t.Errorf("the close's event %d is durable, but the file's data was not flushed: its name was renamed away before the flush", insert)
	}
}
