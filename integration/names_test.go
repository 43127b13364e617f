package integration

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestNonUTF8Names: a change the journal could not name (a name that is
// not UTF-8) is refused with EILSEQ before anything changes; reading such
// a file, and scratch space, are unaffected.
func TestNonUTF8Names(t *testing.T) {
	backing := filepath.Join(t.TempDir(), "backing")
	if err := os.MkdirAll(backing, 0o755); err != nil {
		t.Fatal(err)
	}
	old := "old\xff"
	if err := os.WriteFile(filepath.Join(backing, old), []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	m := mountAt(t, backing)
	if err := os.MkdirAll(m.path("w.db/t"), 0o755); err != nil {
		t.Fatal(err)
	}
	before := len(events(t, m.State))

	for _, tc := range []struct {
		name string
		op   func() error
	}{
		{"create", func() error {
			f, err := os.Create(m.path("new\xfe"))
			if err == nil {
				f.Close()
			}
			return err
		}},
		{"mkdir", func() error { return os.Mkdir(m.path("dir\xfe"), 0o755) }},
		{"unlink", func() error { return os.Remove(m.path(old)) }},
		{"rename", func() error { return os.Rename(m.path(old), m.path("renamed")) }},
		{"write", func() error { return os.WriteFile(m.path(old), []byte("changed"), 0o644) }},
		{"symlink target", func() error { return os.Symlink("t\xfe", m.path("link")) }},
	} {
		if err := tc.op(); !errors.Is(err, syscall.EILSEQ) {
			t.Errorf("%s: got %v, want EILSEQ", tc.name, err)
		}
	}
	if got, err := os.ReadFile(m.path(old)); err != nil || string(got) != "kept" {
		t.Errorf("read %q through the mount: %q, %v; want \"kept\"", old, got, err)
	}
	for _, p := range []string{"new\xfe", "dir\xfe", "renamed", "link"} {
		if _, err := os.Lstat(m.backing(p)); !os.IsNotExist(err) {
			t.Errorf("%q exists in the backing directory after a refused change (%v)", p, err)
		}
	}
	if err := os.MkdirAll(m.path("w.db/t/_temporary/x\xff"), 0o755); err != nil {
		t.Errorf("scratch space refused a non-UTF-8 name: %v", err)
	}
	if after := len(events(t, m.State)); after != before {
		t.Errorf("%d events journaled for refused or scratch changes", after-before)
	}
}
