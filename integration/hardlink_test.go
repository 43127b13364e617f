package integration

import (
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cmfs-project/cmfs/journal"
)

// Two names of one file, in one partition, and a third in another.
const (
	linkA = partDir + "/part-a"
	linkB = partDir + "/part-b"
	linkC = partDir2 + "/part-c"
)

// TestHardLink changes a file with several hard links through one name
// and checks that the journal's last word on every name is that name's
// content: a write through one link changes them all.
func TestHardLink(t *testing.T) {
	appendTo := func(rel string) func(*testing.T, *mounted) {
		return func(t *testing.T, m *mounted) {
			t.Helper()
			f, err := os.OpenFile(m.path(rel), os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteString("more\n"); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tc := range []struct {
		name string
		// before the mount, in the backing directory: files (original
		// content) and links (new name → existing name).
		preFiles []string
		preLinks [][2]string
		// through the mount, before the operation.
		files []string
		links [][2]string
		op    func(*testing.T, *mounted)
		// names is every tree name of the file after op; gone are names
		// whose last event must be their DELETE.
		names []string
		gone  []string
	}{
		{
			name: "append through A", files: []string{linkA}, links: [][2]string{{linkB, linkA}},
			op: appendTo(linkA), names: []string{linkA, linkB},
		},
		{
			name: "append through B", files: []string{linkA}, links: [][2]string{{linkB, linkA}},
			op: appendTo(linkB), names: []string{linkA, linkB},
		},
		{
			name: "O_TRUNC through A", files: []string{linkA}, links: [][2]string{{linkB, linkA}},
			op: func(t *testing.T, m *mounted) {
				if err := os.WriteFile(m.path(linkA), []byte("new content\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			},
			names: []string{linkA, linkB},
		},
		{
			name: "truncate B", files: []string{linkA}, links: [][2]string{{linkB, linkA}},
			op: func(t *testing.T, m *mounted) {
				if err := os.Truncate(m.path(linkB), 100); err != nil {
					t.Fatal(err)
				}
			},
			names: []string{linkA, linkB},
		},
		{
			name: "truncate A to 0", files: []string{linkA}, links: [][2]string{{linkB, linkA}},
			op: func(t *testing.T, m *mounted) {
				if err := os.Truncate(m.path(linkA), 0); err != nil {
					t.Fatal(err)
				}
			},
			names: []string{linkA, linkB},
		},
		{
			name: "in-place write", files: []string{linkA}, links: [][2]string{{linkB, linkA}},
			op: func(t *testing.T, m *mounted) {
				f, err := os.OpenFile(m.path(linkA), os.O_RDWR, 0)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := f.WriteAt([]byte("PWRITTEN"), 10); err != nil {
					t.Fatal(err)
				}
				if err := f.Close(); err != nil {
					t.Fatal(err)
				}
			},
			names: []string{linkA, linkB},
		},
		{
			// B was never looked up through the mount: only a walk of the
			// backing tree can know it.
			name: "link made before the mount", preFiles: []string{linkA}, preLinks: [][2]string{{linkB, linkA}},
			op: appendTo(linkA), names: []string{linkA, linkB},
		},
		{
			name: "links in two partitions", files: []string{linkA}, links: [][2]string{{linkB, linkA}, {linkC, linkA}},
			op: appendTo(linkC), names: []string{linkA, linkB, linkC},
		},
		{
			name: "after rm B", files: []string{linkA}, links: [][2]string{{linkB, linkA}},
			op: func(t *testing.T, m *mounted) {
				if err := os.Remove(m.path(linkB)); err != nil {
					t.Fatal(err)
				}
				appendTo(linkA)(t, m)
			},
			names: []string{linkA}, gone: []string{linkB},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			requireFUSE(t)
			backing := filepath.Join(t.TempDir(), "backing")
			for _, d := range []string{partDir, partDir2} {
				if err := os.MkdirAll(filepath.Join(backing, d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			for _, f := range tc.preFiles {
				writeFile(t, filepath.Join(backing, f), original(f))
			}
			for _, l := range tc.preLinks {
				if err := os.Link(filepath.Join(backing, l[1]), filepath.Join(backing, l[0])); err != nil {
					t.Fatal(err)
				}
			}
			m := mountAt(t, backing)
			for _, f := range tc.files {
				writeFile(t, m.path(f), original(f))
			}
			for _, l := range tc.links {
				if err := os.Link(m.path(l[1]), m.path(l[0])); err != nil {
					t.Fatal(err)
				}
			}
			before := lastID(t, m.State)
			tc.op(t, m)
			evs := events(t, m.State)
			if lastID := evs[len(evs)-1].ID; lastID == before {
				t.Fatalf("the operation journaled nothing")
			}
			for _, name := range tc.names {
				checkLastWord(t, m, evs, name)
			}
			// An event's warehouse fields describe all its files, so a
			// dump filtered by table takes exactly the changes of its
			// own names.
			for _, e := range evs[before:] {
				for _, f := range e.Files {
					if loc := journal.Locate(path.Dir(f.Path)); loc.DB != e.DB || loc.Table != e.Table || loc.Partition != e.Partition {
						t.Errorf("event %s (db %q table %q partition %q) lists %s, which lies in db %q table %q partition %q",
							describe(&e), e.DB, e.Table, e.Partition, f.Path, loc.DB, loc.Table, loc.Partition)
					}
				}
			}
			for _, name := range tc.gone {
				e := lastNaming(evs, name)
				if e == nil || e.Type != journal.Delete || e.Path != name {
					t.Errorf("%s: the last event naming it is %s, want its DELETE", name, describe(e))
				}
			}
		})
	}
}

// checkLastWord fails t unless the newest event naming rel lists rel's
// current size and xxh64 (by xxhsum) as new content.
func checkLastWord(t *testing.T, m *mounted, evs []journal.Event, rel string) {
	t.Helper()
	fi, err := os.Stat(m.backing(rel))
	if err != nil {
		t.Fatal(err)
	}
	sum := xxhsum(t, m.backing(rel))
	e := lastNaming(evs, rel)
	if e == nil {
		t.Errorf("%s: no event names it", rel)
		return
	}
	for _, f := range e.Files {
		if f.Path == rel && f.CM == "" {
			if f.Size != fi.Size() || f.XXH64 != sum {
				t.Errorf("%s: the last event naming it, %s, says %d bytes xxh64 %s; the tree holds %d bytes xxh64 %s",
					rel, describe(e), f.Size, f.XXH64, fi.Size(), sum)
			}
			return
		}
	}
	t.Errorf("%s: the last event naming it, %s, lists no content for it; the tree holds %d bytes xxh64 %s", rel, describe(e), fi.Size(), sum)
}

// lastNaming returns the newest event that names rel: as its path, new
// path (not as a LINK's source) or one of its files.
func lastNaming(evs []journal.Event, rel string) *journal.Event {
	for i := len(evs) - 1; i >= 0; i-- {
		e := &evs[i]
		// A LINK's path is its source, whose content it leaves alone.
		if e.NewPath == rel || e.Path == rel && e.Type != journal.Link {
			return e
		}
		for _, f := range e.Files {
			if f.Path == rel {
				return e
			}
		}
	}
	return nil
}

// describe prints an event on one line, as `cmfs events` would.
func describe(e *journal.Event) string {
	if e == nil {
		return "none"
	}
	var b strings.Builder
	b.WriteString(string(e.Type))
	b.WriteString(" " + e.Path)
	if e.NewPath != "" {
		b.WriteString(" -> " + e.NewPath)
	}
	for _, f := range e.Files {
		b.WriteString(" " + f.Path + ":" + f.XXH64)
		if f.CM != "" {
			b.WriteString(":" + f.CM)
		}
	}
	return "#" + strconv.FormatUint(e.ID, 10) + " " + b.String()
}

// TestHardLinkReplica loads replicas of a warehouse where a file with
// hard links in two partitions is appended to through one of them:
// incrementally on top of a BOOTSTRAP, from event 1, and by a BOOTSTRAP
// from the catalog (kept current from the journal), through the real CLI.
// Every replica must hold the new content under every name.
func TestHardLinkReplica(t *testing.T) {
	replicadPath(t)
	m := mount(t)
	const (
		a = "w.db/t/p=1/a"
		b = "w.db/t/p=1/b"
		c = "w.db/t/p=2/c"
	)
	for _, d := range []string{"w.db", "w.db/t", "w.db/t/p=1", "w.db/t/p=2"} {
		if err := os.Mkdir(m.path(d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, m.path(a), original(a))
	dumps := t.TempDir()
	src := fetchFrom{State: m.State}

	// A BOOTSTRAP builds the catalog and a first replica.
	boot := replDump(t, m.State, dumps)
	bootstrapped := t.TempDir()
	replLoad(t, boot.Dump, bootstrapped, src)
	checkTarget(t, "BOOTSTRAP before the links", bootstrapped, sourceTree(t, m))

	for _, l := range []string{b, c} {
		if err := os.Link(m.path(a), m.path(l)); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.OpenFile(m.path(a), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("more\n"); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	want := sourceTree(t, m)
	last := lastEventID(t, m.State)

	t.Run("incremental after BOOTSTRAP", func(t *testing.T) {
		d := incremental(t, m.State, dumps, boot.To+1, last)
		replLoad(t, d.Dump, bootstrapped, src)
		checkTarget(t, "incremental after the append", bootstrapped, want)
	})
	t.Run("incremental from event 1", func(t *testing.T) {
		d := incremental(t, m.State, dumps, 1, last)
		target := t.TempDir()
		replLoad(t, d.Dump, target, src)
		checkTarget(t, "incremental from event 1", target, want)
	})
	t.Run("BOOTSTRAP from the catalog", func(t *testing.T) {
		d := replDump(t, m.State, dumps)
		if d.To != last {
			t.Fatalf("BOOTSTRAP at %d, want %d", d.To, last)
		}
		target := t.TempDir()
		replLoad(t, d.Dump, target, src)
		checkTarget(t, "BOOTSTRAP from the catalog", target, want)
	})
}
