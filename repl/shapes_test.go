package repl

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	bolt "go.etcd.io/bbolt"

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

// TestCatalogFormat1Rebuilt opens a catalog written in format 1 (which
// left symlinks out): it is emptied, and the next Update walks the tree
// again, symlinks included.
func TestCatalogFormat1Rebuilt(t *testing.T) {
	s := newSource(t)
	s.mkdir("top")
	if err := os.Symlink("x", s.abs("top/l")); err != nil {
		t.Fatal(err)
	}
	s.emit(&journal.Event{Type: journal.Symlink, Path: "top/l", Target: "x"})
	p := filepath.Join(t.TempDir(), CatalogFile)
	c, err := OpenCatalog(p)
	if err != nil {
		t.Fatal(err)
	}
	tree := LocalTree{Root: s.root, Exclude: []string{".cmfs"}}
	if _, err := c.Update(t.Context(), &s.ev, tree); err != nil {
		t.Fatal(err)
	}
	// As a format-1 catalog held it: no symlink, version 1.
	err = c.db.Update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(catTree).Delete([]byte("top/l")); err != nil {
			return err
		}
		return tx.Bucket(catMeta).Put(metaVersion, []byte("1"))
	})
	c.Close()
	if err != nil {
		t.Fatal(err)
	}
	if c, err = OpenCatalog(p); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, built, err := c.At(); err != nil || built {
		t.Fatalf("format-1 catalog reopened: built %v, %v; want it emptied", built, err)
	}
	if _, err := c.Update(t.Context(), &s.ev, tree); err != nil {
		t.Fatal(err)
	}
	if d := diffTrees(catalogTree(t, c), s.states[len(s.states)-1]); d != "" {
		t.Fatalf("rebuilt catalog differs from the source:\n%s", d)
	}
}
