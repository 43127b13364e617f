package protect

import (
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/cmfs-project/cmfs/journal"
)

// linkTree makes a backing directory with the files and links given
// (new name → existing name) and a root over it whose state directory is
// .cmfs and whose scratch space is _temporary.
func linkTree(t *testing.T, files []string, links [][2]string) *Core {
	t.Helper()
	dir := t.TempDir()
	for _, f := range append([]string{".cmfs/cmroot/x"}, files...) {
		p := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c := &Core{backing: dir, fs: openTree(t, dir), exclude: []string{"_temporary"}, hidden: map[string]bool{".cmfs": true}}
	c.links = newLinkIndex(c.fs, func(rel string) bool { return c.isHidden(rel) || c.excluded(rel) }, c.treeLinks)
	for _, l := range links {
		c.link(t, l[1], l[0])
	}
	return c
}

// link makes new a hard link of old behind the index's back.
func (c *Core) link(t *testing.T, old, new string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(c.abs(new)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(c.abs(old), c.abs(new)); err != nil {
		t.Fatal(err)
	}
}

func (c *Core) stat(t *testing.T, rel string) *syscall.Stat_t {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(c.abs(rel), &st); err != nil {
		t.Fatal(err)
	}
	return &st
}

// names looks up rel's names and checks how many walks that took in all.
func (c *Core) names(t *testing.T, rel string, walks int) []string {
	t.Helper()
	got := c.linkNames(rel, c.stat(t, rel))
	if c.links.walks != walks {
		t.Errorf("linkNames(%s): %d walks in all, want %d", rel, c.links.walks, walks)
	}
	return got
}

func checkNames(t *testing.T, got []string, want ...string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("names: got %q, want %q", got, want)
	}
}

func TestLinkIndexWalk(t *testing.T) {
	c := linkTree(t,
		[]string{"d.db/t/p=1/a", "d.db/t/p=1/single", "other"},
		[][2]string{{"d.db/t/p=2/b", "d.db/t/p=1/a"}, {"c", "d.db/t/p=1/a"}})
	checkNames(t, c.names(t, "d.db/t/p=2/b", 1), "d.db/t/p=2/b", "c", "d.db/t/p=1/a")
	// Known now: no second walk.
	checkNames(t, c.names(t, "d.db/t/p=1/a", 1), "d.db/t/p=1/a", "c", "d.db/t/p=2/b")
	if got := c.names(t, "d.db/t/p=1/single", 1); got != nil {
		t.Errorf("a file with one link: got %q, want nil", got)
	}
}

// TestLinkIndexSingleLink: a file with one link never reaches the index.
func TestLinkIndexSingleLink(t *testing.T) {
	c := linkTree(t, []string{"d.db/t/a"}, nil)
	st := c.stat(t, "d.db/t/a")
	allocs := testing.AllocsPerRun(1000, func() {
		if c.linkNames("d.db/t/a", st) != nil {
			t.Fatal("names for a file with one link")
		}
	})
	if allocs != 0 || c.links.walks != 0 {
		t.Errorf("one link: %v allocations, %d walks; want none", allocs, c.links.walks)
	}
}

// TestLinkIndexStale: links made and removed behind the mount's back are
// found, by a new walk, at the next use.
func TestLinkIndexStale(t *testing.T) {
	c := linkTree(t, []string{"a"}, [][2]string{{"b", "a"}})
	checkNames(t, c.names(t, "a", 1), "a", "b")
	c.link(t, "a", "x/c")
	checkNames(t, c.names(t, "a", 2), "a", "b", "x/c")
	if err := os.Remove(c.abs("b")); err != nil {
		t.Fatal(err)
	}
	// Two links, two names that hold the inode: complete without a walk.
	checkNames(t, c.names(t, "x/c", 2), "x/c", "a")
	// One name gone and another made: the count is the same, but x/c
	// no longer holds the inode, so the names are walked again.
	if err := os.Remove(c.abs("x/c")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(c.abs("x/c"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	c.link(t, "a", "d")
	checkNames(t, c.names(t, "a", 3), "a", "d")
}

// TestLinkIndexOutside: links outside the protected tree (scratch space,
// the state directory) are not names, and cost one walk, not one per use.
func TestLinkIndexOutside(t *testing.T) {
	c := linkTree(t, []string{"t/a"}, [][2]string{{"t/b", "t/a"}, {"t/_temporary/s", "t/a"}, {".cmfs/tmp/h", "t/a"}})
	checkNames(t, c.names(t, "t/a", 1), "t/a", "t/b")
	checkNames(t, c.names(t, "t/b", 1), "t/b", "t/a")
	// One more outside link: the count changed, so walk again.
	c.link(t, "t/a", "t/_temporary/s2")
	checkNames(t, c.names(t, "t/a", 2), "t/a", "t/b")
	checkNames(t, c.names(t, "t/a", 2), "t/a", "t/b")
}

// TestLinkIndexHooks: link, unlink and rename through the mount keep the
// index current without a walk.
func TestLinkIndexHooks(t *testing.T) {
	c := linkTree(t, []string{"t/p=1/a", "t/p=1/z"}, [][2]string{{"t/p=1/b", "t/p=1/a"}, {"t/p=1/y", "t/p=1/z"}})
	checkNames(t, c.names(t, "t/p=1/a", 1), "t/p=1/a", "t/p=1/b")

	c.link(t, "t/p=1/a", "t/p=1/c")
	c.linkedName("t/p=1/a", "t/p=1/c", c.stat(t, "t/p=1/c"))
	checkNames(t, c.names(t, "t/p=1/a", 1), "t/p=1/a", "t/p=1/b", "t/p=1/c")

	st := c.stat(t, "t/p=1/b")
	if err := os.Remove(c.abs("t/p=1/b")); err != nil {
		t.Fatal(err)
	}
	c.unlinkedName("t/p=1/b", st)
	checkNames(t, c.names(t, "t/p=1/c", 1), "t/p=1/c", "t/p=1/a")

	// A file renamed, over one of another file's names.
	src, tgt := c.stat(t, "t/p=1/c"), c.stat(t, "t/p=1/y")
	if err := os.Rename(c.abs("t/p=1/c"), c.abs("t/p=1/y")); err != nil {
		t.Fatal(err)
	}
	c.renamedNames("t/p=1/c", "t/p=1/y", src, tgt, 0)
	checkNames(t, c.names(t, "t/p=1/a", 1), "t/p=1/a", "t/p=1/y")

	// A directory renamed.
	dir := c.stat(t, "t/p=1")
	if err := os.Rename(c.abs("t/p=1"), c.abs("t/p=2")); err != nil {
		t.Fatal(err)
	}
	c.renamedNames("t/p=1", "t/p=2", dir, nil, 0)
	checkNames(t, c.names(t, "t/p=2/y", 1), "t/p=2/y", "t/p=2/a")

	// Into scratch space: no longer a name.
	dir = c.stat(t, "t/p=2")
	if err := os.Mkdir(c.abs("_temporary"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(c.abs("t/p=2"), c.abs("_temporary/p=2")); err != nil {
		t.Fatal(err)
	}
	c.renamedNames("t/p=2", "_temporary/p=2", dir, nil, 0)
	if n := len(c.links.names); n != 0 {
		t.Errorf("after the move into scratch space the index holds %d inodes: %v", n, c.links.names)
	}
}

func TestContentEvents(t *testing.T) {
	cur := journal.File{Size: 5, XXH64: "0123456789abcdef"}
	orig := journal.File{Size: 3, XXH64: "fedcba9876543210", CM: "fedcba9876543210-3"}
	// One name: the event cmfs always journaled.
	got := contentEvents(journal.Write, "d.db/t/p=1/a", nil, cur, &orig)
	want := fileEvent(journal.Write, "d.db/t/p=1/a",
		journal.File{Path: "d.db/t/p=1/a", Size: 5, XXH64: cur.XXH64},
		journal.File{Path: "d.db/t/p=1/a", Size: 3, XXH64: orig.XXH64, CM: orig.CM})
	if len(got) != 1 || !sameEvent(got[0], want) {
		t.Errorf("one name: got %+v, want %+v", got, want)
	}

	got = contentEvents(journal.Truncate, "d.db/t/p=2/b", []string{"d.db/t/p=2/b", "d.db/t/p=1/a", "d.db/t/p=2/c"}, cur, nil)
	if len(got) != 2 {
		t.Fatalf("names in two partitions: %d events, want 2: %+v", len(got), got)
	}
	for i, w := range []struct {
		path, partition string
		files           []string
	}{
		{"d.db/t/p=2/b", "p=2", []string{"d.db/t/p=2/b", "d.db/t/p=2/c"}},
		{"d.db/t/p=1/a", "p=1", []string{"d.db/t/p=1/a"}},
	} {
		e := got[i]
		var files []string
		for _, f := range e.Files {
			files = append(files, f.Path)
			if f.Size != cur.Size || f.XXH64 != cur.XXH64 || f.CM != "" {
				t.Errorf("event %d: file %+v, want the new content", i, f)
			}
		}
		if e.Type != journal.Truncate || e.Path != w.path || e.Partition != w.partition || !slices.Equal(files, w.files) {
			t.Errorf("event %d: %s %s partition %q files %q; want TRUNCATE %s partition %q files %q",
				i, e.Type, e.Path, e.Partition, files, w.path, w.partition, w.files)
		}
	}
}

func sameEvent(a, b *journal.Event) bool {
	return a.Type == b.Type && a.Path == b.Path && a.DB == b.DB && a.Table == b.Table &&
		a.Partition == b.Partition && slices.Equal(a.Files, b.Files)
}

// BenchmarkLinkNamesSingleLink is what the index costs a write to a file
// with one link.
func BenchmarkLinkNamesSingleLink(b *testing.B) {
	st := &syscall.Stat_t{Nlink: 1, Mode: syscall.S_IFREG | 0o644}
	c := &Core{links: newLinkIndex(openTree(b, b.TempDir()), func(string) bool { return false }, nil)}
	for b.Loop() {
		if c.linkNames("d.db/t/a", st) != nil {
			b.Fatal("names")
		}
	}
}
