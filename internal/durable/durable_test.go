package durable

import (
	"errors"
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
