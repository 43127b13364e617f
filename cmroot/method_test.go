package cmroot

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// fakeClone makes FICLONE succeed by copying the bytes, so that the
// store takes its clone path on any filesystem.
func fakeClone(o *sysOps) {
	o.clone = func(dst, src *os.File) error {
		_, err := io.Copy(dst, io.NewSectionReader(src, 0, 1<<40))
		return err
	}
}

// TestPreserveStats: every way of preserving counts the original's file
// and bytes under its method, and only a preservation that succeeded
// counts.
func TestPreserveStats(t *testing.T) {
	type want map[Method][2]uint64 // files, bytes
	check := func(t *testing.T, s *Store, w want) {
		t.Helper()
		st := s.PreserveStats()
		if len(st) != int(numMethods) {
			t.Fatalf("PreserveStats lists %d methods, want %d", len(st), numMethods)
		}
		for i, m := range st {
			if m.Method != Method(i) {
				t.Errorf("element %d is %v, want %v", i, m.Method, Method(i))
			}
			if got := [2]uint64{m.Files, m.Bytes}; got != w[m.Method] {
				t.Errorf("%v: %d files, %d bytes; want %d, %d", m.Method, got[0], got[1], w[m.Method][0], w[m.Method][1])
			}
		}
	}
	content := func(c byte, n int) []byte { return bytes.Repeat([]byte{c}, n) }

	t.Run("same filesystem", func(t *testing.T) {
		s := newTestStore(t, noReflinks)
		dir := t.TempDir()
		p, sum := writeFile(t, dir, "a", content('a', 100))
		if _, _, err := s.Preserve(p, sum, 100, true); err != nil {
			t.Fatal(err)
		}
		p, sum = writeFile(t, dir, "b", content('b', 200))
		if _, _, err := s.Preserve(p, sum, 200, false); err != nil {
			t.Fatal(err)
		}
		// The same content again, moved and linked: the entry is refreshed.
		p, sum = writeFile(t, dir, "a2", content('a', 100))
		if _, created, err := s.Preserve(p, sum, 100, true); err != nil || created {
			t.Fatalf("Preserve of stored content = %v, %v", created, err)
		}
		p, sum = writeFile(t, dir, "b2", content('b', 200))
		if _, _, err := s.Preserve(p, sum, 200, false); err != nil {
			t.Fatal(err)
		}
		// A preservation that fails counts nothing.
		p, sum = writeFile(t, dir, "c", content('c', 300))
		if _, _, err := s.Preserve(p, sum, 301, true); err == nil {
			t.Fatal("Preserve with the wrong size succeeded")
		}
		check(t, s, want{Moved: {1, 100}, Linked: {1, 200}, Deduplicated: {2, 300}})
	})

	for _, clone := range []bool{false, true} {
		name := "copy"
		m := Copied
		tweak := noReflinks
		if clone {
			name, m, tweak = "reflink", Cloned, fakeClone
		}
		t.Run(name, func(t *testing.T) {
			var dir string
			s := newTestStore(t, crossFS(&dir), tweak)
			dir = s.Dir()
			src := t.TempDir()
			// Preserve across filesystems, moved and not.
			p, sum := writeFile(t, src, "a", content('a', 1000))
			if _, _, err := s.Preserve(p, sum, 1000, true); err != nil {
				t.Fatal(err)
			}
			p, sum = writeFile(t, src, "b", content('b', 2000))
			if _, _, err := s.Preserve(p, sum, 2000, false); err != nil {
				t.Fatal(err)
			}
			// PreserveCopy and PreserveCopyOf of new content.
			f := openFile(t, src, "c", content('c', 3000))
			if k, err := s.PreserveCopy(f); err != nil || !k.Created {
				t.Fatalf("PreserveCopy = %+v, %v", k, err)
			}
			g := openFile(t, src, "d", content('d', 4000))
			_, dsum := writeFile(t, t.TempDir(), "d", content('d', 4000))
			if _, created, err := s.PreserveCopyOf(g, dsum, 4000); err != nil || !created {
				t.Fatalf("PreserveCopyOf = %v, %v", created, err)
			}
			// Both again: deduplicated.
			if k, err := s.PreserveCopy(f); err != nil || k.Created {
				t.Fatalf("PreserveCopy of stored content = %+v, %v", k, err)
			}
			if _, created, err := s.PreserveCopyOf(g, dsum, 4000); err != nil || created {
				t.Fatalf("PreserveCopyOf of stored content = %v, %v", created, err)
			}
			// A copy made and then found stored (copyIn's late EEXIST path)
			// is a refresh too.
			p, sum = writeFile(t, src, "a2", content('a', 1000))
			if _, created, err := s.Preserve(p, sum, 1000, true); err != nil || created {
				t.Fatalf("Preserve of stored content = %v, %v", created, err)
			}
			check(t, s, want{m: {4, 10000}, Deduplicated: {3, 8000}})
		})
	}
}

// openFile writes dir/name and opens it for reading (closed at cleanup).
func openFile(t *testing.T, dir, name string, data []byte) *os.File {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestMethodString(t *testing.T) {
	var got []string
	for m := range numMethods + 1 {
		got = append(got, m.String())
	}
	if want := []string{"move", "link", "copy", "reflink", "dedup", "unknown"}; !slices.Equal(got, want) {
		t.Errorf("names %v, want %v", got, want)
	}
}
