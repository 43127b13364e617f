package journal

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A journal file damaged on disk (a flipped byte in a page header, in a
// leaf element, in the meta pages) must make every call the commands use
// fail with ErrCorrupt naming the file — never panic (I5).

// damagedEvents is enough events for several leaf pages, so that a damaged
// page in the middle is read only lazily (Open reads the first and last).
const damagedEvents = 600

// boltPages describes the pages of a closed bbolt file.
type boltPages struct {
	size   int
	leaves []int // leaf pages whose elements have 8-byte keys: events
}

func readPages(t *testing.T, path string) boltPages {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ps := int(binary.LittleEndian.Uint32(b[16+8:]))
	var bp boltPages
	bp.size = ps
	for id := 2; (id+1)*ps <= len(b); id++ {
		p := b[id*ps:]
		if binary.LittleEndian.Uint64(p) != uint64(id) || binary.LittleEndian.Uint16(p[8:]) != 0x02 {
			continue
		}
		if binary.LittleEndian.Uint16(p[10:]) > 0 && binary.LittleEndian.Uint32(p[16+8:]) == keyLen {
			bp.leaves = append(bp.leaves, id)
		}
	}
	if len(bp.leaves) < 3 {
		t.Fatalf("%s: %d leaf pages of events, want at least 3", path, len(bp.leaves))
	}
	return bp
}

// flip xors the byte at off of the file with x.
func flip(t *testing.T, path string, off int64, x byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b [1]byte
	if _, err := f.ReadAt(b[:], off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= x
	if _, err := f.WriteAt(b[:], off); err != nil {
		t.Fatal(err)
	}
}

// damagedJournal writes a journal of damagedEvents events, closes it and
// lets damage change the file.
func damagedJournal(t *testing.T, damage func(t *testing.T, path string, bp boltPages)) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "journal.db")
	l, err := Open(path, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	var events []*Event
	for i := range damagedEvents {
		events = append(events, testEvent(i))
	}
	if err := l.Append(context.Background(), events...); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	damage(t, path, readPages(t, path))
	return path
}

// element3 returns the offset of the key of element 3 of the leaf page at
// offset p.
func element3(t *testing.T, path string, p int64) int64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 16)
	if _, err := f.ReadAt(b, p+16+3*16); err != nil {
		t.Fatal(err)
	}
	return p + 16 + 3*16 + int64(binary.LittleEndian.Uint32(b[4:]))
}

// call runs fn, turning a panic into a test failure.
func call(t *testing.T, name string, fn func() error) (err error) {
	t.Helper()
	defer func() {
		if p := recover(); p != nil {
			t.Errorf("%s panicked: %v", name, p)
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return fn()
}

// wantCorrupt checks that err is nil or a one-line ErrCorrupt naming path.
func wantCorrupt(t *testing.T, name, path string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if strings.HasPrefix(err.Error(), "panic: ") {
		return // reported by call
	}
	if !errors.Is(err, ErrCorrupt) {
		t.Errorf("%s: %v, want ErrCorrupt", name, err)
	}
	if !strings.Contains(err.Error(), path) {
		t.Errorf("%s: %q does not name %s", name, err, path)
	}
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("%s: %q is more than one line", name, err)
	}
}

func TestDamagedFile(t *testing.T) {
	mid := func(bp boltPages) int64 { return int64(bp.leaves[len(bp.leaves)/2]) * int64(bp.size) }
	cases := []struct {
		name   string
		damage func(t *testing.T, path string, bp boltPages)
		ok     bool // the journal must still read (one meta page left)
	}{
		{"page header type", func(t *testing.T, path string, bp boltPages) {
			flip(t, path, mid(bp)+8, 0xff)
		}, false},
		{"page header id", func(t *testing.T, path string, bp boltPages) {
			flip(t, path, mid(bp)+3, 0x40)
		}, false},
		{"page header count", func(t *testing.T, path string, bp boltPages) {
			flip(t, path, mid(bp)+11, 0x7f)
		}, false},
		{"last page header", func(t *testing.T, path string, bp boltPages) {
			flip(t, path, int64(bp.leaves[len(bp.leaves)-1])*int64(bp.size)+8, 0xff)
		}, false},
		{"leaf element position", func(t *testing.T, path string, bp boltPages) {
			flip(t, path, mid(bp)+16+5*16+6, 0x7f) // element 5, pos high bytes
		}, false},
		{"leaf element key", func(t *testing.T, path string, bp boltPages) {
			flip(t, path, element3(t, path, mid(bp)), 0xff) // its key's first byte
		}, false},
		{"record payload", func(t *testing.T, path string, bp boltPages) {
			flip(t, path, element3(t, path, mid(bp))+keyLen+20, 0x01)
		}, false},
		{"both meta pages", func(t *testing.T, path string, bp boltPages) {
			flip(t, path, 16+40, 0xff)
			flip(t, path, int64(bp.size)+16+40, 0xff)
		}, false},
		{"one meta page", func(t *testing.T, path string, bp boltPages) {
			flip(t, path, 16+40, 0xff)
		}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := damagedJournal(t, c.damage)
			var failed []string
			check := func(name string, err error) {
				t.Helper()
				wantCorrupt(t, name, path, err)
				if err != nil {
					failed = append(failed, name)
					t.Logf("%s: %v", name, err)
				}
			}
			// What the unmounted commands do: a read-only Log.
			var l *Log
			err := call(t, "Open read-only", func() (err error) {
				l, err = Open(path, Options{ReadOnly: true})
				return err
			})
			check("Open read-only", err)
			if l != nil {
				check("Range", call(t, "Range", func() error {
					return l.Range(1, 0, func(*Event) error { return nil })
				}))
				call(t, "Last", func() error { l.Last(); return nil })
				for id := uint64(1); id <= damagedEvents; id += 7 {
					check(fmt.Sprintf("Get(%d)", id), call(t, "Get", func() error {
						_, err := l.Get(id)
						return err
					}))
				}
				check("Verify read-only", call(t, "Verify", l.Verify))
				l.Close()
			}
			// What mount and fsck do: a writer, then Verify.
			err = call(t, "Open", func() (err error) {
				l, err = Open(path, Options{NoSync: true})
				return err
			})
			check("Open", err)
			if err == nil {
				check("Verify", call(t, "Verify", l.Verify))
				l.Close()
			}
			if c.ok && len(failed) > 0 {
				t.Errorf("failed: %v; want a journal that still reads", failed)
			}
			if !c.ok && (len(failed) == 0 || failed[len(failed)-1] != "Verify" && failed[len(failed)-1] != "Open") {
				t.Errorf("failed: %v; want at least Open or Verify of the writer to fail", failed)
			}
		})
	}
}
