package protect

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/cmfs-project/cmfs/internal/checksum"
	"github.com/cmfs-project/cmfs/internal/loopfs"
	"golang.org/x/sys/unix"
)

// rehashSize is the size of the files the rehash tests write: 256 blocks
// and a partial one, large enough that what XFS reserves for a write
// into a shared extent (st_blocks grows by up to 2 MiB) stays below the
// share of it a rehash allows (dirtyShare).
const rehashSize = 256*checksum.BlockSize + 1000

// xfsHarness is a harness whose backing directory (and so its cmroot) is
// on a fresh XFS, made on a loop device: originals are kept by clone.
func xfsHarness(t *testing.T) *harness {
	t.Helper()
	fs := loopfs.Temp(t, "xfs", 1<<30) // sparse
	h := openHarness(t, filepath.Join(fs.Dir, "backing"))
	t.Cleanup(func() { h.close(t) })
	return h
}

// randomBytes returns n bytes no other test file shares.
func randomBytes(n int, seed uint64) []byte {
	b := make([]byte, n+8)
	r := rand.New(rand.NewPCG(seed, 11))
	for i := 0; i < n; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	return b[:n]
}

// TestRehashAfterWrite: on XFS, the close after a write into part of a
// large file opened in place reads only the blocks the write moved off
// the clone kept at open, and journals the checksum a full read gives.
// Whatever can change a block without a write that cmfs sees (a punched
// hole, a write through a mapping, a size change) is found too.
func TestRehashAfterWrite(t *testing.T) {
	h := xfsHarness(t)
	B := int64(checksum.BlockSize)
	for i, tc := range []struct {
		name   string
		change func(t *testing.T, f *os.File)
		read   int64 // bytes the close reads (at most)
	}{
		{"4 KiB inside one block", func(t *testing.T, f *os.File) { writeAt(t, f, 4096, 4*B+1000) }, B},
		{"across a block boundary", func(t *testing.T, f *os.File) { writeAt(t, f, 8192, 6*B-4096) }, 2 * B},
		{"into the partial last block", func(t *testing.T, f *os.File) { writeAt(t, f, 10, 256*B+500) }, 1000},
		{"rewritten with the same bytes", func(t *testing.T, f *os.File) {
			b := make([]byte, 4096)
			if _, err := f.ReadAt(b, 9*B); err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt(b, 9*B); err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt([]byte("x"), 2*B); err != nil {
				t.Fatal(err)
			}
		}, 2 * B},
		{"appended to", func(t *testing.T, f *os.File) { writeAt(t, f, 300<<10, rehashSize) }, 1000 + 300<<10},
		{"a hole punched", func(t *testing.T, f *os.File) {
			if err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 3*B, B); err != nil {
				t.Skipf("punch hole: %v", err)
			}
		}, B},
		{"written through a mapping", func(t *testing.T, f *os.File) {
			m, err := unix.Mmap(int(f.Fd()), 0, rehashSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
			if err != nil {
				t.Fatal(err)
			}
			copy(m[200*B+77:], "through the mapping, never written back by hand")
			if err := unix.Munmap(m); err != nil {
				t.Fatal(err)
			}
		}, 8 * B}, // a page written through a mapping dirties its whole folio, up to 2 MiB
	} {
		t.Run(tc.name, func(t *testing.T) {
			rel := filepath.Join("d.db", "t", "p="+string(rune('a'+i)), "data")
			if err := os.MkdirAll(h.core.abs(filepath.Dir(rel)), 0o755); err != nil {
				t.Fatal(err)
			}
			// Written through the core, the file's checksum and block
			// sums are cached at its close.
			if err := h.write(rel, os.O_CREATE|os.O_WRONLY, string(randomBytes(rehashSize, uint64(i)))); err != nil {
				t.Fatal(err)
			}
			read, kept, size := changeInPlace(t, h, rel, tc.change)
			if read > tc.read {
				t.Errorf("the close read %d bytes of the file, want at most %d (the blocks changed)", read, tc.read)
			}
			if kept < size-tc.read {
				t.Errorf("the close kept the sums of %d bytes, want at least %d", kept, size-tc.read)
			}
		})
	}
}

// TestRehashFallsBack: where a rehash cannot tell what changed, the close
// hashes the whole file, and journals the right checksum all the same: no
// block sums cached, no clone (a filesystem without reflinks), most of
// the file rewritten and not written back yet. A new mount has no sums
// cached either, but the open's copy, which hashes the clone, keeps them.
func TestRehashFallsBack(t *testing.T) {
	small := func(t *testing.T, f *os.File) { writeAt(t, f, 4096, 100) }
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T) *harness
		// before runs between the file's first close and its open in
		// place, and may return a new harness.
		before func(t *testing.T, h *harness) *harness
		// forget: the cache loses every checksum after the open.
		forget bool
		change func(t *testing.T, f *os.File)
		// whole: the close reads the whole file (otherwise one block).
		whole bool
	}{
		{"a new mount", xfsHarness, func(t *testing.T, h *harness) *harness {
			backing := h.backing
			h.close(t)
			h2 := openHarness(t, backing)
			*h = *h2 // the cleanup closes it
			return h
		}, false, small, false},
		{"no block sums", xfsHarness, nil, true, small, true},
		{"no reflinks", func(t *testing.T) *harness {
			h := openHarness(t, t.TempDir())
			t.Cleanup(func() { h.close(t) })
			return h
		}, nil, false, small, true},
		{"mostly rewritten", xfsHarness, nil, false, func(t *testing.T, f *os.File) { writeAt(t, f, rehashSize/2, 0) }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := tc.setup(t)
			const rel = "data"
			if err := h.write(rel, os.O_CREATE|os.O_WRONLY, string(randomBytes(rehashSize, 99))); err != nil {
				t.Fatal(err)
			}
			if tc.before != nil {
				h = tc.before(t, h)
			}
			change := tc.change
			if tc.forget {
				change = func(t *testing.T, f *os.File) {
					h.core.sums.forget()
					tc.change(t, f)
				}
			}
			read, _, size := changeInPlace(t, h, rel, change)
			if tc.whole && read != size {
				t.Errorf("the close read %d bytes, want the whole file (%d)", read, size)
			}
			if !tc.whole && read > checksum.BlockSize {
				t.Errorf("the close read %d bytes, want one block", read)
			}
		})
	}
}

// forget empties the cache.
func (c *sumCache) forget() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m, c.blocks = nil, 0
}

// changeInPlace opens rel in place through h's core, changes it, and
// closes it; the close must journal the checksum a full read of the file
// gives. It returns what the close's checksum read and kept
// (Core.Checksummed), and the file's size.
func changeInPlace(t *testing.T, h *harness, rel string, change func(t *testing.T, f *os.File)) (read, kept, size int64) {
	t.Helper()
	hd := openInPlace(t, h, rel)
	defer hd.File().Close()
	change(t, hd.File())
	read0, kept0 := h.core.Checksummed()
	if err := hd.Flush(ctx, rel, true); err != nil {
		t.Fatal(err)
	}
	hd.Release()
	read, kept = h.core.Checksummed()
	size, want, err := checksum.File(h.core.abs(rel), nil)
	if err != nil {
		t.Fatal(err)
	}
	evs := h.events(t)
	if last := evs[len(evs)-1]; last.Path != rel || last.Files[0].XXH64 != want || last.Files[0].Size != size {
		t.Fatalf("the close journaled %+v, want %s with %d bytes of checksum %s", last, rel, size, want)
	}
	return read - read0, kept - kept0, size
}

// writeAt writes n bytes of new content at off.
func writeAt(t *testing.T, f *os.File, n int, off int64) {
	t.Helper()
	if _, err := f.WriteAt(bytes.Repeat([]byte{0xa5}, n), off); err != nil {
		t.Fatal(err)
	}
}
