package durable

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "state.json")
	for _, content := range []string{"first", "second, longer"} {
		if err := WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(p)
		if err != nil || string(got) != content {
			t.Fatalf("read back %q, %v; want %q", got, err, content)
		}
	}
	fi, err := os.Stat(p)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, %v; want 0600", fi.Mode(), err)
	}
	assertOnly(t, dir, "state.json")
}

func TestWriteLeavesNothingOnError(t *testing.T) {
	dir := t.TempDir()
	boom := errors.New("boom")
	err := Write(dir, 0o644, true, func(f *os.File) error {
		f.WriteString("partial")
		return boom
	}, func(tmp string) (string, error) { t.Fatal("placed after a failed fill"); return "", nil })
	if !errors.Is(err, boom) {
		t.Fatalf("Write = %v, want the fill's error", err)
	}
	err = Write(dir, 0o644, true, func(f *os.File) error { return nil },
		func(tmp string) (string, error) { return "", boom })
	if !errors.Is(err, boom) {
		t.Fatalf("Write = %v, want the place's error", err)
	}
	assertOnly(t, dir)
}

func assertOnly(t *testing.T, dir string, names ...string) {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, de := range des {
		got = append(got, de.Name())
	}
	if len(got) != len(names) {
		t.Fatalf("%s holds %v, want %v", dir, got, names)
	}
	for i := range names {
		if got[i] != names[i] {
			t.Fatalf("%s holds %v, want %v", dir, got, names)
		}
	}
}

func TestRenameNoReplace(t *testing.T) {
	dir := t.TempDir()
	a, b, c := filepath.Join(dir, "a"), filepath.Join(dir, "b"), filepath.Join(dir, "c")
	for p, data := range map[string]string{a: "a", b: "b"} {
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	err := RenameNoReplace(a, b)
	if !errors.Is(err, fs.ErrExist) {
		t.Fatalf("RenameNoReplace onto an existing file = %v, want EEXIST", err)
	}
	if got, _ := os.ReadFile(b); string(got) != "b" {
		t.Errorf("the existing file holds %q after a refused rename, want %q", got, "b")
	}
	if err := RenameNoReplace(a, c); err != nil {
		t.Fatalf("RenameNoReplace to a free name: %v", err)
	}
	if got, _ := os.ReadFile(c); string(got) != "a" {
		t.Errorf("renamed file holds %q, want %q", got, "a")
	}
	if _, err := os.Lstat(a); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("old name after the rename: %v, want gone", err)
	}
}

func TestClearDir(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []string{"a/b/c", "d"} {
		if err := os.MkdirAll(filepath.Join(dir, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "a/b/f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := ClearDir(dir); err != nil {
		t.Fatal(err)
	}
	if des, err := os.ReadDir(dir); err != nil || len(des) != 0 {
		t.Errorf("after ClearDir: %d entries, %v; want an empty directory", len(des), err)
	}
	if err := ClearDir(filepath.Join(dir, "missing")); !os.IsNotExist(err) {
		t.Errorf("ClearDir(missing) = %v, want not exist", err)
	}
}
