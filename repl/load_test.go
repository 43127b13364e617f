package repl

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cmfs-project/cmfs/journal"
)

// opsSource exercises every kind of event a warehouse sees.
func opsSource(t *testing.T) *source {
	s := newSource(t)
	s.mkdir("db1.db")                                                    // 1
	s.mkdir("db1.db/t")                                                  // 2
	s.mkdir("db1.db/t/p=1")                                              // 3 ADD_PARTITION
	s.write("db1.db/t/p=1/a", "A1")                                      // 4 INSERT
	s.write("db1.db/t/p=1/b", "B1")                                      // 5
	s.mkdir("db1.db/t/p=2")                                              // 6
	s.write("db1.db/t/p=2/c", "C1")                                      // 7
	s.rename("db1.db/t/p=1/a", "db1.db/t/p=1/a2")                        // 8 RENAME
	s.rename("db1.db/t/p=1/b", "db1.db/t/p=1/a2")                        // 9 RENAME over a file
	s.truncate("db1.db/t/p=2/c")                                         // 10 TRUNCATE
	s.write("db1.db/t/p=2/c", "C2")                                      // 11
	s.rmrf("db1.db/t/p=1")                                               // 12 DELETE, 13 DROP_PARTITION
	s.mkdir("db1.db/u")                                                  // 14
	s.write("db1.db/u/x y#%z", "U")                                      // 15
	s.renameDir("db1.db/t/p=2", "db1.db/t/p=3", journal.RenamePartition) // 16
	s.renameDir("db1.db/u", "db1.db/v", journal.RenameTable)             // 17
	s.del("db1.db/v/x y#%z")                                             // 18
	s.mkdir("db1.db/v/empty")                                            // 19 MKDIR inside a table
	s.write("readme", "outside")                                         // 20 WRITE
	return s
}

func TestLoadAppliesEveryEvent(t *testing.T) {
	s := opsSource(t)
	target := t.TempDir()
	f := s.fetcher()
	last := uint64(len(s.ev.events))
	for _, cut := range [][2]uint64{{1, 4}, {5, 9}, {10, 13}, {14, last}} {
		res := mustLoad(t, mustDump(t, s, cut[0], cut[1]), target, f)
		if res.Applied != int(cut[1]-cut[0]+1) {
			t.Fatalf("dump %v: applied %d events", cut, res.Applied)
		}
		checkTarget(t, s, target, cut[1])
	}
	// Every byte loaded was read once at the source.
	if st := f.Stats(); st.Stale != 0 {
		t.Fatalf("fetcher stats: %+v", st)
	}
}

func TestLoadTwiceIsNoop(t *testing.T) {
	s := opsSource(t)
	dump := mustDump(t, s, 1, 11)
	target := t.TempDir()
	mustLoad(t, dump, target, s.fetcher())
	before, _, _ := ReadState(target)
	f := s.fetcher()
	res := mustLoad(t, dump, target, f)
	if res.Applied != 0 || f.Stats().Bytes != 0 {
		t.Fatalf("second load: %+v, fetched %+v", res, f.Stats())
	}
	after, _, _ := ReadState(target)
	if before != after {
		t.Fatalf("state changed: %+v -> %+v", before, after)
	}
	checkTarget(t, s, target, 11)
	// An overlapping dump applies only what is new.
	res = mustLoad(t, mustDump(t, s, 5, 14), target, s.fetcher())
	if res.Applied != 3 {
		t.Fatalf("overlapping dump applied %d events, want 3", res.Applied)
	}
	checkTarget(t, s, target, 14)
}

func TestLoadRefusesGap(t *testing.T) {
	s := opsSource(t)
	target := t.TempDir()
	mustLoad(t, mustDump(t, s, 1, 11), target, s.fetcher())
	_, err := Load(context.Background(), mustDump(t, s, 15, 18), target, s.fetcher(), LoadOptions{})
	if !errors.Is(err, ErrGap) || !strings.Contains(err.Error(), "target is at event 11; dump starts at 15: events 12–14 are missing") {
		t.Fatalf("got %v, want the gap named", err)
	}
	_, err = Load(context.Background(), mustDump(t, s, 13, 18), target, s.fetcher(), LoadOptions{})
	if !errors.Is(err, ErrGap) || !strings.Contains(err.Error(), "event 12 is missing") {
		t.Fatalf("got %v, want the gap named", err)
	}
	checkTarget(t, s, target, 11)
}

func TestLoadRefusesMangledDump(t *testing.T) {
	s := opsSource(t)
	dump := mustDump(t, s, 1, 5)
	p := filepath.Join(dump, EventDirName(4), "_files")
	if err := os.WriteFile(p, []byte("db1.db/t/p=1/a#2#nothex#\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	target := t.TempDir()
	_, err := Load(context.Background(), dump, target, s.fetcher(), LoadOptions{})
	if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "event 4") || !strings.Contains(err.Error(), "line 1") {
		t.Fatalf("got %v, want ErrFormat naming event 4, line 1", err)
	}
	checkTarget(t, s, target, 3)
	// A _files that disagrees with _metadata is refused too.
	os.WriteFile(p, AppendFile(nil, journal.File{Path: "db1.db/t/p=1/a", Size: 2, XXH64: journal.Sum([]byte("ZZ"))}), 0o644)
	if _, err := Load(context.Background(), dump, target, s.fetcher(), LoadOptions{}); !errors.Is(err, ErrFormat) {
		t.Fatalf("got %v, want ErrFormat", err)
	}
}

// Content that matches nowhere fails the load at that event, leaves the
// target at the event before, and a rerun continues once the source has it.
func TestLoadChecksumNowhere(t *testing.T) {
	s := newSource(t)
	s.mkdir("d.db")
	s.mkdir("d.db/t")
	s.write("d.db/t/c", "C1")
	dump := mustDump(t, s, 1, 3)
	// Overwrite C1 at the source behind cmfs's back: no preserved original.
	if err := os.WriteFile(s.abs("d.db/t/c"), []byte("XX"), 0o644); err != nil {
		t.Fatal(err)
	}
	target := t.TempDir()
	_, err := Load(context.Background(), dump, target, s.fetcher(), LoadOptions{})
	sum := journal.Sum([]byte("C1"))
	if !errors.Is(err, ErrNoCopy) || !strings.Contains(err.Error(), "event 3") ||
		!strings.Contains(err.Error(), "d.db/t/c") || !strings.Contains(err.Error(), sum) {
		t.Fatalf("got %v, want ErrNoCopy naming event 3, the path and %s", err, sum)
	}
	if got := lastID(t, target); got != 2 {
		t.Fatalf("target at %d, want 2", got)
	}
	if _, err := os.Stat(filepath.Join(target, "d.db/t/c")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("unverified content became visible: %v", err)
	}
	putCM(t, s.cm, []byte("C1"))
	res := mustLoad(t, dump, target, s.fetcher())
	if res.Applied != 1 {
		t.Fatalf("rerun applied %d events, want 1", res.Applied)
	}
	checkTarget(t, s, target, 3)
}

// A live file that changed but kept its size is caught by its checksum
// and read from cmroot instead.
func TestLoadStaleLiveFile(t *testing.T) {
	s := newSource(t)
	s.mkdir("d.db")
	s.write("d.db/f", "aaaa")
	s.write("d.db/f", "bbbb") // same size; the original is preserved
	target := t.TempDir()
	f := s.fetcher()
	mustLoad(t, mustDump(t, s, 1, 2), target, f)
	checkTarget(t, s, target, 2)
	if st := f.Stats(); st.Stale != 1 || st.CM != 1 {
		t.Fatalf("stats: %+v, want one stale live read and one cmroot read", st)
	}
}

// THE RUBBERBANDING SCENARIO: A adds p=1/f with X; B drops p=1; C re-adds
// it with Y. A replica loading [..A] must see X (from cmroot), never Y.
func TestRubberbanding(t *testing.T) {
	for _, bootstrap := range []bool{false, true} {
		t.Run(map[bool]string{false: "incremental", true: "bootstrap"}[bootstrap], func(t *testing.T) {
			s := newSource(t)
			s.mkdir("default.db")
			s.mkdir("default.db/person")
			var boot string
			if bootstrap {
				boot = mustDump(t, s, 0, 0)
			}
			s.mkdir("default.db/person/p=1")
			a := s.write("default.db/person/p=1/f", "X-bytes of event A").ID
			dumpA := mustDump(t, s, 1, a)
			if bootstrap {
				dumpA = mustDump(t, s, 3, a)
			}
			s.rmrf("default.db/person/p=1") // B: DELETE (X to cmroot), DROP_PARTITION
			s.mkdir("default.db/person/p=1")
			c := s.write("default.db/person/p=1/f", "Y-bytes of event C").ID
			dumpBC := mustDump(t, s, a+1, c)

			target := t.TempDir()
			f := s.fetcher()
			if bootstrap {
				mustLoad(t, boot, target, f)
				checkTarget(t, s, target, 2)
			}
			mustLoad(t, dumpA, target, f)
			checkTarget(t, s, target, a)
			if b, _ := os.ReadFile(filepath.Join(target, "default.db/person/p=1/f")); string(b) != "X-bytes of event A" {
				t.Fatalf("after A: %q", b)
			}
			if st := f.Stats(); st.CM != 1 {
				t.Fatalf("X must come from cmroot: %+v", st)
			}
			mustLoad(t, dumpBC, target, f)
			checkTarget(t, s, target, c)
		})
	}
}

// A BOOTSTRAP whose walk raced with events: the incrementals that follow
// replay them and the target converges.
func TestBootstrapRacingEvents(t *testing.T) {
	s := opsSource(t)
	pin := uint64(9)
	// The walk saw the tree after event 13 while pinned at 9.
	ev := &sliceEvents{events: s.ev.events[:pin]}
	out := filepath.Join(t.TempDir(), "boot")
	racing := raceTree{LocalTree{Root: s.root}, func() { ev.events = s.ev.events[:13] }}
	// Build the tree as of event 13 at the source: replay opsSource up to 13.
	s13 := opsSourceUpTo(t, 13)
	racing.Tree = LocalTree{Root: s13.root}
	if _, err := Dump(context.Background(), ev, out, DumpOptions{Tree: racing, Source: "src"}); err != nil {
		t.Fatal(err)
	}
	fin, _ := ReadFinished(out)
	if fin.To != 9 || fin.WalkEnd != 13 {
		t.Fatalf("finished: %+v", fin)
	}
	target := t.TempDir()
	mustLoad(t, out, target, s.fetcher())
	if got := lastID(t, target); got != 9 {
		t.Fatalf("bootstrap pinned at %d, want 9", got)
	}
	mustLoad(t, mustDump(t, s, 10, 20), target, s.fetcher())
	checkTarget(t, s, target, 20)
}

type raceTree struct {
	Tree   Tree
	during func()
}

func (r raceTree) Walk(ctx context.Context, fn func(Entry) error) error {
	r.during()
	return r.Tree.Walk(ctx, fn)
}

func opsSourceUpTo(t *testing.T, n int) *source {
	s := opsSource(t)
	if len(s.ev.events) < n {
		t.Fatalf("only %d events", len(s.ev.events))
	}
	// Recreate the state after event n in a fresh directory.
	c := newSource(t)
	for rel, v := range s.states[n] {
		p := c.abs(rel)
		if v == "dir" {
			os.MkdirAll(p, 0o755)
			continue
		}
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte(strings.TrimPrefix(v, "file:")), 0o644)
	}
	return c
}

func TestBootstrapLoadRefusesNonEmptyTarget(t *testing.T) {
	s := opsSource(t)
	boot := mustDump(t, s, 0, 0)
	target := t.TempDir()
	os.WriteFile(filepath.Join(target, "stray"), nil, 0o644)
	if _, err := Load(context.Background(), boot, target, s.fetcher(), LoadOptions{}); !errors.Is(err, ErrMismatch) {
		t.Fatalf("got %v, want ErrMismatch", err)
	}
	target = t.TempDir()
	mustLoad(t, boot, target, s.fetcher())
	checkTarget(t, s, target, 20)
	if res := mustLoad(t, boot, target, s.fetcher()); res.Files != 0 {
		t.Fatalf("second bootstrap load fetched %d files", res.Files)
	}
}

// countProgress records a load's progress. Bytes comes from the fetching
// goroutines, concurrently (the race detector checks that it may).
type countProgress struct {
	events []uint64 // Event is called from the loader's goroutine only
	bytes  atomic.Int64
}

func (c *countProgress) Event(id uint64) { c.events = append(c.events, id) }
func (c *countProgress) Bytes(n int64)   { c.bytes.Add(n) }

func TestLoadProgress(t *testing.T) {
	s := opsSource(t)
	var p countProgress
	res, err := Load(context.Background(), mustDump(t, s, 1, 7), t.TempDir(), s.fetcher(), LoadOptions{Progress: &p})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(p.events) != "[1 2 3 4 5 6 7]" || p.bytes.Load() != res.Bytes || res.Bytes != 6 {
		t.Fatalf("progress: events %v, %d bytes; result %+v", p.events, p.bytes.Load(), res)
	}
}

// A dump naming paths outside the target is refused before anything is
// written outside it.
func TestLoadRefusesEscapes(t *testing.T) {
	s := newSource(t)
	s.mkdir("d.db")
	s.ev.events = append(s.ev.events, &journal.Event{ID: 2, Type: journal.Symlink, Path: "d.db/out", Target: "/"})
	s.ev.events = append(s.ev.events, &journal.Event{ID: 3, Type: journal.Mkdir, Path: "d.db/out/tmp/evil"})
	target := t.TempDir()
	_, err := Load(context.Background(), mustDump(t, s, 1, 3), target, s.fetcher(), LoadOptions{})
	if !errors.Is(err, ErrUnsafePath) {
		t.Fatalf("got %v, want ErrUnsafePath", err)
	}
	if got := lastID(t, target); got != 2 {
		t.Fatalf("target at %d, want 2", got)
	}
	if _, err := os.Stat("/tmp/evil"); err == nil {
		t.Fatalf("wrote outside the target")
	}
}
