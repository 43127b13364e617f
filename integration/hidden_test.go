package integration

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestStateUnreachable checks that nothing done through the mount reaches
// the state directory or a cmroot kept directly in the backing directory:
// no lookup, create, rename into or over them (RENAME_EXCHANGE included),
// link or removal. The originals they hold must survive (I5).
func TestStateUnreachable(t *testing.T) {
	backing := filepath.Join(t.TempDir(), "backing")
	populate(t, backing)
	cm := filepath.Join(backing, ".cm")
	m := mountAt(t, backing, "--cmroot", cm)
	writeFile(t, m.path("victim"), []byte("preserve me\n"))
	if err := os.Remove(m.path("victim")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, m.path("f"), []byte("a file\n"))
	if err := os.Mkdir(m.path("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, cm)
	for _, name := range []string{".cmfs", ".cm"} {
		hidden := m.path(name)
		if _, err := os.Lstat(hidden); err == nil {
			t.Errorf("lstat %s: visible", hidden)
		}
		if _, err := os.Lstat(filepath.Join(hidden, "journal.db")); err == nil {
			t.Errorf("lstat %s/journal.db: visible", hidden)
		}
		for what, err := range map[string]error{
			"rename file over":     os.Rename(m.path("f"), hidden),
			"rename dir over":      os.Rename(m.path("d"), hidden),
			"rename from":          os.Rename(hidden, m.path("stolen")),
			"rename exchange file": unix.Renameat2(unix.AT_FDCWD, m.path("f"), unix.AT_FDCWD, hidden, unix.RENAME_EXCHANGE),
			"rename exchange dir":  unix.Renameat2(unix.AT_FDCWD, m.path("d"), unix.AT_FDCWD, hidden, unix.RENAME_EXCHANGE),
			"link":                 os.Link(m.path("f"), hidden),
			"symlink":              os.Symlink("f", hidden),
			"mkdir":                os.Mkdir(hidden, 0o755),
			"rmdir":                os.Remove(hidden),
			"create":               func() error { f, err := os.OpenFile(hidden, os.O_CREATE|os.O_WRONLY, 0o644); f.Close(); return err }(),
		} {
			if err == nil {
				t.Errorf("%s %s: succeeded", what, name)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(m.State, "journal.db")); err != nil {
		t.Fatalf("state directory: %v", err)
	}
	if d := diffTrees(snapshot(t, cm), before); d != "" {
		t.Errorf("cmroot changed:\n%s", d)
	}
	for _, p := range []string{"f", "d"} {
		if _, err := os.Lstat(m.path(p)); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
}
