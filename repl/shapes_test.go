package repl

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/cmfs-project/cmfs/journal"
)

// TestLoadRenameOntoEmptyDir applies a partition renamed onto an existing
// empty partition, as rename(2) allows at the source: the empty directory
// is replaced (os.Rename refuses any existing directory).
func TestLoadRenameOntoEmptyDir(t *testing.T) {
	s := newSource(t)
	for _, d := range []string{"d.db", "d.db/t", "d.db/t/k=1", "d.db/t/k=2"} {
		s.mkdir(d)
	}
	s.write("d.db/t/k=1/f", "moved")
	if err := syscall.Rename(s.abs("d.db/t/k=1"), s.abs("d.db/t/k=2")); err != nil {
		t.Fatal(err)
	}
	s.emit(&journal.Event{Type: journal.RenamePartition, Path: "d.db/t/k=1", NewPath: "d.db/t/k=2"})
	last := uint64(len(s.ev.events))
	target := t.TempDir()
	mustLoad(t, mustDump(t, s, 1, last-1), target, s.fetcher())
	mustLoad(t, mustDump(t, s, last, last), target, s.fetcher())
	checkTarget(t, s, target, last)

	// The catalog applies it the same way: built on the empty tree, then
	// brought up to date by the events.
	c := openCatalog(t)
	if _, err := c.Update(t.Context(), &sliceEvents{}, LocalTree{Root: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Update(t.Context(), &s.ev, nil); err != nil {
		t.Fatal(err)
	}
	if d := diffTrees(catalogTree(t, c), summed(s.states[last])); d != "" {
		t.Fatalf("catalog differs from the source:\n%s", d)
	}
}

// TestLoadLiveNameNowSymlinkOut loads a file whose name a symlink leading
// out of the warehouse took since: the fetcher refuses the live path, and
// the load takes the content from cmroot instead.
func TestLoadLiveNameNowSymlinkOut(t *testing.T) {
	s := newSource(t)
	for _, d := range []string{"d.db", "d.db/t"} {
		s.mkdir(d)
	}
	s.write("d.db/t/f", "first")
	upTo := uint64(len(s.ev.events))
	s.del("d.db/t/f") // preserved in cmroot
	if err := os.Symlink("/etc/hostname", s.abs("d.db/t/f")); err != nil {
		t.Fatal(err)
	}
	s.emit(&journal.Event{Type: journal.Symlink, Path: "d.db/t/f", Target: "/etc/hostname"})
	target := t.TempDir()
	mustLoad(t, mustDump(t, s, 1, upTo), target, s.fetcher())
	checkTarget(t, s, target, upTo)
	mustLoad(t, mustDump(t, s, upTo+1, uint64(len(s.ev.events))), target, s.fetcher())
	checkTarget(t, s, target, uint64(len(s.ev.events)))
}

// TestBootstrapSymlinks bootstraps a tree with symlinks (in a partition,
// to a directory, dangling, outside the layout), from a walk and from a
// catalog kept current by SYMLINK events: the target holds them.
func TestBootstrapSymlinks(t *testing.T) {
	s := newSource(t)
	for _, d := range []string{"d.db", "d.db/t", "d.db/t/k=1", "top"} {
		s.mkdir(d)
	}
	s.write("d.db/t/k=1/f", "data")
	c := openCatalog(t)
	if _, err := c.Update(t.Context(), &s.ev, LocalTree{Root: s.root, Exclude: []string{".cmfs"}}); err != nil {
		t.Fatal(err)
	}
	for _, l := range [][2]string{{"d.db/t/k=1/latest", "f"}, {"d.db/t/cur", "k=1"}, {"d.db/t/k=1/gone", "nowhere"}, {"top/l#%", "../d.db"}} {
		if err := os.Symlink(l[1], s.abs(l[0])); err != nil {
			t.Fatal(err)
		}
		s.emit(&journal.Event{Type: journal.Symlink, Path: l[0], Target: l[1]})
	}
	last := uint64(len(s.ev.events))
	for _, tc := range []struct {
		name string
		opts DumpOptions
	}{
		{"walk", DumpOptions{Tree: LocalTree{Root: s.root, Exclude: []string{".cmfs"}}}},
		{"catalog", DumpOptions{Catalog: c, Tree: LocalTree{Root: s.root}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "boot")
			tc.opts.Source = "src"
			if _, err := Dump(t.Context(), &s.ev, out, tc.opts); err != nil {
				t.Fatal(err)
			}
			target := t.TempDir()
			mustLoad(t, out, target, s.fetcher())
			checkTarget(t, s, target, last)
		})
	}
}
