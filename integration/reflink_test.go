package integration

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/cmfs-project/cmfs/cmroot"
	"github.com/cmfs-project/cmfs/internal/loopfs"
	"github.com/cmfs-project/cmfs/journal"
)

// reflinkFileSize is the size of the files TestReflinkXFS changes: a copy
// of one would show plainly in the filesystem's used space.
const reflinkFileSize = 256 << 20

// xfsBacking makes an XFS filesystem on a loop device for t (removed in
// t's cleanup, after every mount registered later is gone) and returns
// its mount point. Without mkfs.xfs the test is skipped, except under CI,
// where it must run.
func xfsBacking(t *testing.T, size int64) (string, *loopfs.FS) {
	t.Helper()
	requireFUSE(t)
	if why := loopfs.Missing("xfs"); why != "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("cannot run: %s (CI=true makes this skip a failure)", why)
		}
		t.Skip(why)
	}
	fs := loopfs.Temp(t, "xfs", size)
	return fs.Dir, fs
}

// writeBig writes size bytes that no other file holds (seed stamps every
// MiB) to f, at its offset.
func writeBig(t *testing.T, f *os.File, size int64, seed uint64) {
	t.Helper()
	buf := make([]byte, 1<<20)
	r := rand.New(rand.NewPCG(seed, 11))
	for i := 0; i+8 <= len(buf); i += 8 {
		binary.LittleEndian.PutUint64(buf[i:], r.Uint64())
	}
	for off := int64(0); off < size; off += int64(len(buf)) {
		binary.LittleEndian.PutUint64(buf, seed)
		binary.LittleEndian.PutUint64(buf[8:], uint64(off))
		if _, err := f.Write(buf[:min(int64(len(buf)), size-off)]); err != nil {
			t.Fatal(err)
		}
	}
}

func used(t *testing.T, path string) int64 {
	t.Helper()
	n, err := loopfs.UsedBytes(path)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func shared(t *testing.T, path string) int64 {
	t.Helper()
	n, err := loopfs.SharedBytes(path)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestReflinkXFS: with the backing directory on XFS, the original an
// in-place write keeps is a clone, not a copy. A 4 KiB pwrite into a
// 256 MiB file journals a WRITE with the new checksum, naming a cmroot
// entry that holds the old content and shares all but the written block
// with the file; the filesystem's used space grows by far less than the
// file. That holds for a file written through the mount (its checksum is
// cached at the open) and for one that was there before the mount (the
// open hashes the clone). The close after the write reads only the block
// written: the file's block sums were kept when its checksum was made (by
// the close that wrote it, or by the open's hash of the clone), and the
// rest still shares the clone's extents. A file unlinked while still open for writing
// is cloned as well, and writes through the open descriptor afterwards
// do not reach the entry. Timings are not asserted: extents and used
// space are what a clone and a copy differ in.
func TestReflinkXFS(t *testing.T) {
	xfs, _ := xfsBacking(t, 2<<30)
	backing := filepath.Join(xfs, "backing")
	if err := os.MkdirAll(filepath.Join(backing, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	before, err := os.Create(filepath.Join(backing, "data", "before"))
	if err != nil {
		t.Fatal(err)
	}
	writeBig(t, before, reflinkFileSize, 1)
	if err := before.Close(); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	m := mountAt(t, backing, "--metrics", addr)

	through, err := os.Create(m.path("data/through"))
	if err != nil {
		t.Fatal(err)
	}
	writeBig(t, through, reflinkFileSize, 2)
	if err := through.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := through.Close(); err != nil {
		t.Fatal(err)
	}

	for _, rel := range []string{"data/through", "data/before"} {
		t.Run(filepath.Base(rel), func(t *testing.T) {
			old := xxhsum(t, m.backing(rel))
			last := lastID(t, m.State)
			grew := used(t, xfs)
			sums := scrapeMetrics(t, addr)
			f, err := os.OpenFile(m.path(rel), os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt(bytes.Repeat([]byte("x"), 4096), reflinkFileSize/2); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			grew = used(t, xfs) - grew
			after := scrapeMetrics(t, addr)
			read := after.get("cmfs_checksum_bytes_total", "how=read") - sums.get("cmfs_checksum_bytes_total", "how=read")
			kept := after.get("cmfs_checksum_bytes_total", "how=kept") - sums.get("cmfs_checksum_bytes_total", "how=kept")
			t.Logf("the close read %d KiB of the file and kept the block sums of %d KiB", int64(read)>>10, int64(kept)>>10)
			if read > 1<<20 || kept < reflinkFileSize-(1<<20) {
				// Its block sums were kept when its checksum was made: at
				// the close that wrote it, or by the open's copy.
				t.Errorf("the close read %g bytes and kept %g; want at most 1 MiB read, the rest kept", read, kept)
			}
			now := xxhsum(t, m.backing(rel))
			if now == old {
				t.Fatal("the pwrite did not change the file")
			}

			evs := eventsFrom(t, m.State, last+1)
			if len(evs) != 1 || evs[0].Type != journal.Write || evs[0].Path != rel {
				t.Fatalf("events after the in-place write: %+v; want one WRITE of %s", evs, rel)
			}
			want := []journal.File{
				{Path: rel, Size: reflinkFileSize, XXH64: now},
				{Path: rel, Size: reflinkFileSize, XXH64: old, CM: cmroot.Name(old, reflinkFileSize)},
			}
			if got := evs[0].Files; len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
				t.Fatalf("WRITE files = %+v, want %+v", got, want)
			}
			entry, err := cmEntry(m.CMRoot, want[1].CM)
			if err != nil {
				t.Fatal(err)
			}
			if got := xxhsum(t, entry); got != old {
				t.Errorf("cmroot entry hashes to %s, want the original's %s", got, old)
			}
			sh := shared(t, entry)
			t.Logf("used space grew %d KiB; the entry shares %d of %d KiB", grew>>10, sh>>10, reflinkFileSize>>10)
			if sh < reflinkFileSize-(1<<20) || sh >= reflinkFileSize {
				t.Errorf("the entry shares %d of %d bytes with the file; want all but the block the write touched", sh, reflinkFileSize)
			}
			if grew > reflinkFileSize/16 {
				t.Errorf("used space grew %d bytes for a 4 KiB write into a %d-byte file: the original was copied", grew, reflinkFileSize)
			}
		})
	}

	t.Run("unlink while open for writing", func(t *testing.T) {
		rel := "data/open"
		f, err := os.Create(m.path(rel))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		writeBig(t, f, reflinkFileSize, 3)
		sum := xxhsum(t, m.backing(rel))
		last := lastID(t, m.State)
		grew := used(t, xfs)
		if err := os.Remove(m.path(rel)); err != nil {
			t.Fatal(err)
		}
		grew = used(t, xfs) - grew
		evs := eventsFrom(t, m.State, last+1)
		name := cmroot.Name(sum, reflinkFileSize)
		if len(evs) != 1 || evs[0].Type != journal.Delete || len(evs[0].Files) != 1 || evs[0].Files[0].CM != name {
			t.Fatalf("events after the unlink: %+v; want one DELETE naming %s", evs, name)
		}
		entry, err := cmEntry(m.CMRoot, name)
		if err != nil {
			t.Fatal(err)
		}
		sh := shared(t, entry)
		t.Logf("used space grew %d KiB; the entry shares %d of %d KiB", grew>>10, sh>>10, reflinkFileSize>>10)
		if sh != reflinkFileSize {
			t.Errorf("the entry shares %d of %d bytes with the unlinked file: not a clone", sh, reflinkFileSize)
		}
		if grew > reflinkFileSize/16 {
			t.Errorf("used space grew %d bytes at the unlink of a %d-byte file: it was copied", grew, reflinkFileSize)
		}
		// The writer goes on through its descriptor: the entry stays.
		if _, err := f.WriteAt(make([]byte, 4096), 0); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		if got := xxhsum(t, entry); got != sum {
			t.Errorf("entry after a write through the unlinked file's descriptor hashes to %s, want %s", got, sum)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		if got := xxhsum(t, entry); got != sum {
			t.Errorf("entry after the last close hashes to %s, want %s", got, sum)
		}
	})
}
