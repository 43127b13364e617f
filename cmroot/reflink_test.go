package cmroot

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/cmfs-project/cmfs/internal/checksum"
	"github.com/cmfs-project/cmfs/internal/loopfs"
)

// reflinkSize is the size of the originals the reflink tests preserve:
// large enough that a copy shows in the filesystem's used space.
const reflinkSize = 64 << 20

// testFS mounts a fresh filesystem of type fstype (xfs and ext4 on a loop
// device, tmpfs) for the test and returns its mount point, or skips the
// test with the reason it cannot be made here.
func testFS(t *testing.T, fstype string) (string, *loopfs.FS) {
	t.Helper()
	dir := t.TempDir()
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if fstype == "tmpfs" {
		if os.Geteuid() != 0 {
			t.Skip("not root: mounting a tmpfs needs uid 0")
		}
		if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=512m", "tmpfs", mnt).CombinedOutput(); err != nil {
			t.Fatalf("mount -t tmpfs: %v: %s", err, out)
		}
		t.Cleanup(func() {
			if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
				t.Errorf("umount %s: %v: %s", mnt, err, out)
			}
		})
		return mnt, nil
	}
	if why := loopfs.Missing(fstype); why != "" {
		t.Skip(why)
	}
	fs, err := loopfs.Make(filepath.Join(dir, "img"), mnt, fstype, 512<<20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := fs.Close(); err != nil {
			t.Error(err)
		}
	})
	return mnt, fs
}

// writeOriginal writes size bytes of content no other file shares (tag
// stamps every MiB) to path, fsynced, and returns their checksum.
func writeOriginal(t *testing.T, path string, size int64, tag uint64) string {
	t.Helper()
	buf := make([]byte, 1<<20)
	r := rand.New(rand.NewPCG(tag, 7))
	for i := 0; i+8 <= len(buf); i += 8 {
		binary.LittleEndian.PutUint64(buf[i:], r.Uint64())
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for off := int64(0); off < size; off += int64(len(buf)) {
		binary.LittleEndian.PutUint64(buf, tag)
		binary.LittleEndian.PutUint64(buf[8:], uint64(off))
		if _, err := f.Write(buf[:min(int64(len(buf)), size-off)]); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	_, sum, err := checksum.File(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

// sharedBytes is loopfs.SharedBytes, with 0 for a filesystem that has no
// extent map to show (tmpfs).
func sharedBytes(t *testing.T, path string) int64 {
	t.Helper()
	n, err := loopfs.SharedBytes(path)
	if errors.Is(err, syscall.EOPNOTSUPP) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func usedBytes(t *testing.T, path string) int64 {
	t.Helper()
	n, err := loopfs.UsedBytes(path)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestPreserveReflink: on XFS every way the store copies an original
// (PreserveCopy, PreserveCopyOf, Preserve where a link is refused,
// Restore) clones it: the entry shares the original's extents and the
// filesystem's used space barely grows. A write to the original
// afterwards un-shares what it touches and leaves the entry's bytes, and
// so its checksum, as they were. On ext4 and tmpfs the same calls copy,
// with the same result.
func TestPreserveReflink(t *testing.T) {
	ways := []struct {
		name string
		tag  uint64
		// keep preserves (or restores) the original at p, whose checksum
		// is sum. It returns the copy it made, the file a later write in
		// place goes to (the original, or the restored file), and the
		// file that must keep sum whatever that write does (the entry).
		keep func(t *testing.T, s *Store, dir, p, sum string) (made, written, kept string)
	}{
		{"PreserveCopy", 1, func(t *testing.T, s *Store, _, p, sum string) (string, string, string) {
			f, err := os.Open(p)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			name, got, size, created, err := s.PreserveCopy(f)
			if err != nil || got != sum || size != reflinkSize || !created {
				t.Fatalf("PreserveCopy = %s %s %d %v %v; want checksum %s", name, got, size, created, err, sum)
			}
			return s.Path(name), p, s.Path(name)
		}},
		{"PreserveCopyOf", 2, func(t *testing.T, s *Store, _, p, sum string) (string, string, string) {
			f, err := os.Open(p)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			name, created, err := s.PreserveCopyOf(f, sum, reflinkSize)
			if err != nil || !created {
				t.Fatalf("PreserveCopyOf = %s %v %v", name, created, err)
			}
			return s.Path(name), p, s.Path(name)
		}},
		{"Preserve, link refused", 3, func(t *testing.T, s *Store, _, p, sum string) (string, string, string) {
			s.sys.link = func(a, b string) error { return &os.LinkError{Op: "link", Old: a, New: b, Err: syscall.EMLINK} }
			name, created, err := s.Preserve(p, sum, reflinkSize, false)
			if err != nil || !created {
				t.Fatalf("Preserve = %s %v %v", name, created, err)
			}
			return s.Path(name), p, s.Path(name)
		}},
		{"Restore", 4, func(t *testing.T, s *Store, dir, p, sum string) (string, string, string) {
			f, err := os.Open(p)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			name, _, _, _, err := s.PreserveCopy(f)
			if err != nil {
				t.Fatal(err)
			}
			restored := filepath.Join(dir, "restored")
			if err := s.Restore(name, restored); err != nil {
				t.Fatal(err)
			}
			return restored, restored, s.Path(name)
		}},
	}
	for _, fstype := range []string{"xfs", "ext4", "tmpfs"} {
		t.Run(fstype, func(t *testing.T) {
			mnt, _ := testFS(t, fstype)
			for _, w := range ways {
				t.Run(w.name, func(t *testing.T) {
					dir := filepath.Join(mnt, w.name)
					if err := os.Mkdir(dir, 0o755); err != nil {
						t.Fatal(err)
					}
					// After the store's own cleanup: room for the next way.
					t.Cleanup(func() { os.RemoveAll(dir) })
					s := openTestStore(t, filepath.Join(dir, "cmroot"))
					p := filepath.Join(dir, "orig")
					sum := writeOriginal(t, p, reflinkSize, w.tag)
					before := usedBytes(t, mnt)
					made, written, kept := w.keep(t, s, dir, p, sum)
					grew := usedBytes(t, mnt) - before
					shared := sharedBytes(t, made)
					t.Logf("%s: used space grew %d KiB; %d of %d KiB shared", filepath.Base(made), grew>>10, shared>>10, reflinkSize>>10)
					if fstype == "xfs" {
						if shared != reflinkSize {
							t.Errorf("on XFS %d of %d bytes of the copy are shared with the original: not a clone", shared, reflinkSize)
						}
						if grew > reflinkSize/16 {
							t.Errorf("on XFS the used space grew %d bytes for a %d-byte original: copied, not cloned", grew, reflinkSize)
						}
					} else {
						if shared != 0 {
							t.Errorf("on %s %d bytes shared", fstype, shared)
						}
						if grew < reflinkSize {
							t.Errorf("on %s the used space grew %d bytes for a %d-byte copy", fstype, grew, reflinkSize)
						}
					}

					// An in-place write to the original (or to the restored
					// file) must not reach the entry.
					f, err := os.OpenFile(written, os.O_WRONLY, 0)
					if err != nil {
						t.Fatal(err)
					}
					if _, err := f.WriteAt(make([]byte, 4096), reflinkSize/2); err != nil {
						t.Fatal(err)
					}
					// Written back: XFS moves the new block in at writeback.
					if err := f.Sync(); err != nil {
						t.Fatal(err)
					}
					if err := f.Close(); err != nil {
						t.Fatal(err)
					}
					if _, now, err := checksum.File(written, nil); err != nil || now == sum {
						t.Fatalf("checksum of %s after the write: %s, %v", filepath.Base(written), now, err)
					}
					n, got, err := checksum.File(kept, nil)
					if err != nil || got != sum || n != reflinkSize {
						t.Errorf("entry after a write to %s: %d bytes, checksum %s, %v; want %d, %s", filepath.Base(written), n, got, err, reflinkSize, sum)
					}
					if fstype == "xfs" {
						if after := sharedBytes(t, made); after >= reflinkSize || after < reflinkSize/2 {
							t.Errorf("after a 4 KiB write to %s %d of %d bytes of %s are shared; want all but what the write touched", filepath.Base(written), after, reflinkSize, filepath.Base(made))
						}
					}
				})
			}
		})
	}
}
