package cmroot

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// A damaged index file (a flipped byte in a bbolt page header, in a leaf
// element, in the meta pages) is a cache gone bad: Open rebuilds it from
// the directory, as after a crash, and must never panic (I5).
func TestDamagedIndex(t *testing.T) {
	const n = 400 // several leaf pages of entries
	leafOf := func(t *testing.T, path string) (int64, int64) {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		ps := int64(binary.LittleEndian.Uint32(b[16+8:]))
		var leaves []int64
		for id := int64(2); (id+1)*ps <= int64(len(b)); id++ {
			p := b[id*ps:]
			if binary.LittleEndian.Uint64(p) == uint64(id) && binary.LittleEndian.Uint16(p[8:]) == 0x02 &&
				binary.LittleEndian.Uint16(p[10:]) > 0 && binary.LittleEndian.Uint32(p[16+8:]) > 17 {
				leaves = append(leaves, id)
			}
		}
		if len(leaves) < 3 {
			t.Fatalf("%d leaf pages of entries, want at least 3", len(leaves))
		}
		return leaves[len(leaves)/2] * ps, ps
	}
	flip := func(t *testing.T, path string, off int64, x byte) {
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		var b [1]byte
		f.ReadAt(b[:], off)
		b[0] ^= x
		if _, err := f.WriteAt(b[:], off); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name   string
		damage func(t *testing.T, path string)
	}{
		{"page header type", func(t *testing.T, path string) {
			p, _ := leafOf(t, path)
			flip(t, path, p+8, 0xff)
		}},
		{"page header id", func(t *testing.T, path string) {
			p, _ := leafOf(t, path)
			flip(t, path, p+3, 0x40)
		}},
		{"leaf element", func(t *testing.T, path string) {
			p, _ := leafOf(t, path)
			flip(t, path, p+16+5*16+6, 0x7f)
		}},
		{"leaf element key", func(t *testing.T, path string) {
			p, _ := leafOf(t, path)
			b := make([]byte, 16)
			f, _ := os.Open(path)
			f.ReadAt(b, p+16+3*16)
			f.Close()
			flip(t, path, p+16+3*16+int64(binary.LittleEndian.Uint32(b[4:])), 0xff)
		}},
		{"both meta pages", func(t *testing.T, path string) {
			_, ps := leafOf(t, path)
			flip(t, path, 16+40, 0xff)
			flip(t, path, ps+16+40, 0xff)
		}},
		{"one meta page", func(t *testing.T, path string) {
			flip(t, path, 16+40, 0xff)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "cmroot")
			s := openTestStore(t, dir)
			src := t.TempDir()
			var names []string
			for i := range n {
				content := []byte(fmt.Sprintf("original %d", i))
				p, sum := writeFile(t, src, fmt.Sprint(i), content)
				name, _, err := s.Preserve(p, sum, int64(len(content)), true)
				if err != nil {
					t.Fatal(err)
				}
				names = append(names, name)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			c.damage(t, filepath.Join(dir, indexFile))
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Fatalf("Open panicked: %v", p)
					}
				}()
				s = openTestStore(t, dir)
			}()
			if got, _ := s.Stats(); got != n {
				t.Errorf("%d entries after reopen, want %d", got, n)
			}
			for _, name := range names {
				if _, err := s.Lookup(name); err != nil {
					t.Errorf("Lookup: %v", err)
				}
			}
			if err := s.List(func(Entry) error { return nil }); err != nil {
				t.Errorf("List: %v", err)
			}
		})
	}
}
