package integration

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// mkdirAll makes the slash-separated directories rels through the mount,
// one by one (each an event), failing t on error.
func mkdirAll(t testing.TB, m *mounted, rels ...string) {
	t.Helper()
	for _, d := range rels {
		if err := os.Mkdir(m.path(d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReplRenameOntoEmptyDir renames a directory onto an existing empty
// directory at the source, which rename(2) allows (`mv -T a b` with b
// empty): a partition onto an empty partition of another database's
// table, a table onto an empty table, a database onto an empty
// database, a data directory onto an empty one, and a partition onto an
// empty partition of the same table. Loaded as an INCREMENTAL, the
// target must replace the empty directory as rename(2) did, and take the
// next dump (no gap); a BOOTSTRAP at the end, from the catalog and from a
// walk, must hold the same tree.
func TestReplRenameOntoEmptyDir(t *testing.T) {
	replicadPath(t)
	for _, tc := range []struct {
		name     string
		setup    []string // directories made first
		from, to string   // the rename; from holds a file, to is empty
	}{
		{"partition across databases", []string{"d1.db", "d1.db/t2", "d1.db/t2/k=9", "d2.db", "d2.db/t4", "d2.db/t4/k=8"}, "d1.db/t2/k=9", "d2.db/t4/k=8"},
		{"partition within a table", []string{"d1.db", "d1.db/t", "d1.db/t/k=1", "d1.db/t/k=2"}, "d1.db/t/k=1", "d1.db/t/k=2"},
		{"table", []string{"d1.db", "d1.db/a", "d1.db/a/k=1", "d1.db/b"}, "d1.db/a", "d1.db/b"},
		{"database", []string{"d1.db", "d1.db/t", "d2.db"}, "d1.db", "d2.db"},
		{"data directory", []string{"d1.db", "d1.db/t", "d1.db/t/x", "d1.db/t/y"}, "d1.db/t/x", "d1.db/t/y"},
		{"outside the layout", []string{"top", "top/a", "top/b"}, "top/a", "top/b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := mount(t)
			mkdirAll(t, m, tc.setup...)
			writeFile(t, m.path(tc.from+"/part-0"), []byte("moved with its directory"))
			a := lastEventID(t, m.State)
			dumps := t.TempDir()
			target := t.TempDir()
			src := fetchFrom{State: m.State}
			replLoad(t, incremental(t, m.State, dumps, 1, a).Dump, target, src)
			checkTarget(t, "before the rename", target, sourceTree(t, m))

			// rename(2) itself: os.Rename refuses any existing directory as the
			// new name, which rename(2) replaces when it is empty.
			if err := syscall.Rename(m.path(tc.from), m.path(tc.to)); err != nil {
				t.Fatalf("rename %s onto the empty %s at the source: %v", tc.from, tc.to, err)
			}
			b := lastEventID(t, m.State)
			want := sourceTree(t, m)
			replLoad(t, incremental(t, m.State, dumps, a+1, b).Dump, target, src)
			checkTarget(t, "after "+tc.from+" was renamed onto the empty "+tc.to, target, want)

			writeFile(t, m.path(tc.to+"/part-1"), []byte("after"))
			c := lastEventID(t, m.State)
			replLoad(t, incremental(t, m.State, dumps, b+1, c).Dump, target, src)
			final := sourceTree(t, m)
			checkTarget(t, "the dump after the rename", target, final)

			for _, walk := range []bool{false, true} {
				var flags []string
				if walk {
					flags = append(flags, "--walk")
				}
				boot := replDump(t, m.State, t.TempDir(), flags...)
				bt := t.TempDir()
				replLoad(t, boot.Dump, bt, src)
				checkTarget(t, "BOOTSTRAP "+filepath.Base(boot.Dump)+" "+boolFlag("--walk", walk), bt, final)
			}
		})
	}
}

// boolFlag is flag if on, "" else: for messages.
func boolFlag(flag string, on bool) string {
	if on {
		return flag
	}
	return "(catalog)"
}

// TestReplBootstrapSymlinks bootstraps a tree holding symlinks — to a
// file next to it, to a directory (which a walk must not follow),
// dangling, absolute, in a partition, a table, a database and outside
// the layout — from the catalog and with --walk, and checks that each
// target holds them as symlinks with their targets, exactly as the
// source and as a target chained through INCREMENTALs to the same event.
func TestReplBootstrapSymlinks(t *testing.T) {
	replicadPath(t)
	m := mount(t)
	mkdirAll(t, m, "w.db", "w.db/t", "w.db/t/dt=1", "top")
	writeFile(t, m.path("w.db/t/dt=1/part-0"), []byte("data"))
	for _, l := range []struct{ name, target string }{
		{"w.db/t/dt=1/latest", "part-0"},
		{"w.db/t/current", "dt=1"},
		{"w.db/t/dt=1/gone", "no-such-file"},
		{"w.db/abs", "/etc/hostname"},
		{"top/link", "../w.db/t/dt=1/part-0"},
		{"rootlink", "w.db"},
	} {
		if err := os.Symlink(l.target, m.path(l.name)); err != nil {
			t.Fatal(err)
		}
	}
	want := sourceTree(t, m)
	last := lastEventID(t, m.State)
	src := fetchFrom{State: m.State}

	chained := t.TempDir()
	replLoad(t, incremental(t, m.State, t.TempDir(), 1, last).Dump, chained, src)
	checkTarget(t, "chained to the end", chained, want)

	for _, walk := range []bool{false, true} {
		var flags []string
		if walk {
			flags = append(flags, "--walk")
		}
		boot := replDump(t, m.State, t.TempDir(), flags...)
		if boot.To != last {
			t.Fatalf("BOOTSTRAP pinned to %d, want %d", boot.To, last)
		}
		target := t.TempDir()
		replLoad(t, boot.Dump, target, src)
		checkTarget(t, "BOOTSTRAP "+boolFlag("--walk", walk), target, want)
		if d := diffTree(targetTree(t, target), targetTree(t, chained)); d != "" {
			t.Errorf("BOOTSTRAP %s differs from the chained target at event %d (bootstrap vs chained):\n%s", boolFlag("--walk", walk), last, d)
		}
	}
}
