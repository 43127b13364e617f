package repl

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// TestLocalTreeDirectoryRemovedDuringWalk: a directory removed after the
// walk listed its parent and before it read the directory itself (a
// partition dropped while a BOOTSTRAP walks) is gone as a deleted file
// is: the events after the pin replay it. The walk goes on.
func TestLocalTreeDirectoryRemovedDuringWalk(t *testing.T) {
	root := t.TempDir()
	// The walk reaches "zz" only after the "a" files, far more than the
	// walk's channels hold: it is still waiting when fn removes "zz".
	for i := range 200 {
		p := filepath.Join(root, "a", fmt.Sprintf("f%03d", i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(root, "zz", "dt=8"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "zz", "dt=8", "part-0"), []byte("y"), 0o644); err != nil {
		t.Fatal(err)
	}
	removed := false
	seen := map[string]bool{}
	err := LocalTree{Root: root, Workers: 1}.Walk(context.Background(), func(e Entry) error {
		if !removed {
			removed = true
			if err := os.RemoveAll(filepath.Join(root, "zz")); err != nil {
				return err
			}
		}
		seen[e.Path] = true
		return nil
	})
	if err != nil {
		t.Fatalf("walk with a directory removed during it: %v", err)
	}
	for i := range 200 {
		if p := fmt.Sprintf("a/f%03d", i); !seen[p] {
			t.Errorf("walk left out %s", p)
		}
	}
	if seen["zz/dt=8/part-0"] {
		t.Errorf("walk listed a file removed before it got there")
	}
}

// TestLocalTreeMissingRoot: a root that is not there is an error, not an
// empty tree.
func TestLocalTreeMissingRoot(t *testing.T) {
	err := LocalTree{Root: filepath.Join(t.TempDir(), "gone")}.Walk(context.Background(), func(Entry) error { return nil })
	if err == nil {
		t.Fatal("walk of a missing root succeeded")
	}
}
