package cmroot

import (
	"bytes"
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
	if fstype == "tmpfs" {
		return mountTmpfs(t, "512m"), nil
	}
	fs := loopfs.Temp(t, fstype, 512<<20)
	return fs.Dir, fs
}

// mountTmpfs mounts a tmpfs of the given size ("8m") for the test and
// returns its mount point, or skips the test when not root.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("not root: mounting a tmpfs needs uid 0")
	}
	mnt := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Fatalf("mount -t tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", mnt, err, out)
		}
	})
	return mnt
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
			k, err := s.PreserveCopy(f)
			if err != nil || k.XXH64 != sum || k.Size != reflinkSize || !k.Created {
				t.Fatalf("PreserveCopy = %+v, %v; want checksum %s", k, err, sum)
			}
			if len(k.Blocks) != checksum.BlockCount(reflinkSize) || checksum.Format(checksum.Combine(k.Blocks)) != sum {
				t.Fatalf("PreserveCopy kept %d block sums, combining to %016x; want %d, combining to %s",
					len(k.Blocks), checksum.Combine(k.Blocks), checksum.BlockCount(reflinkSize), sum)
			}
			return s.Path(k.Name), p, s.Path(k.Name)
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
			k, err := s.PreserveCopy(f)
			if err != nil {
				t.Fatal(err)
			}
			name := k.Name
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
					if refused := s.noClone.Load(); refused != (fstype != "xfs") {
						t.Errorf("on %s the store remembers no reflinks: %v", fstype, refused)
					}
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

// noReflinks makes the store's filesystem one without reflinks.
func noReflinks(o *sysOps) {
	o.clone = func(dst, src *os.File) error {
		return &os.PathError{Op: "FICLONE", Path: src.Name(), Err: syscall.EOPNOTSUPP}
	}
}

// TestCloneRefused: where FICLONE fails, every way of copying copies, and
// the entry is what a copy makes. A filesystem without reflinks
// (EOPNOTSUPP, ENOTTY) is asked once per store; EXDEV and EINVAL, which
// say something of one file, are asked each time; any other error (the
// clone cut short) is left to the copy, which starts from an empty file.
func TestCloneRefused(t *testing.T) {
	tests := []struct {
		errno syscall.Errno
		// partial: the failed clone wrote something first.
		partial bool
		calls   int // of 3 copies
	}{
		{syscall.EOPNOTSUPP, false, 1},
		{syscall.ENOTTY, false, 1},
		{syscall.EXDEV, false, 3},
		{syscall.EINVAL, false, 3},
		{syscall.EIO, true, 3},
	}
	for _, tt := range tests {
		t.Run(tt.errno.Error(), func(t *testing.T) {
			calls := 0
			s := newTestStore(t, func(o *sysOps) {
				o.clone = func(dst, src *os.File) error {
					calls++
					if tt.partial {
						dst.Write([]byte("half a clone"))
					}
					return &os.PathError{Op: "FICLONE", Path: src.Name(), Err: tt.errno}
				}
				o.link = func(a, b string) error { return &os.LinkError{Op: "link", Old: a, New: b, Err: syscall.EMLINK} }
			})
			dir := t.TempDir()
			p1, sum1 := writeFile(t, dir, "a", bytes.Repeat([]byte("a"), 100000))
			p2, sum2 := writeFile(t, dir, "b", bytes.Repeat([]byte("b"), 100001))
			p3, sum3 := writeFile(t, dir, "c", bytes.Repeat([]byte("c"), 100002))

			f1, _ := os.Open(p1)
			defer f1.Close()
			k1, err := s.PreserveCopy(f1)
			if err != nil || k1.XXH64 != sum1 {
				t.Fatalf("PreserveCopy = %s, %v; want %s", k1.XXH64, err, sum1)
			}
			name1 := k1.Name
			f2, _ := os.Open(p2)
			defer f2.Close()
			name2, _, err := s.PreserveCopyOf(f2, sum2, 100001)
			if err != nil {
				t.Fatal(err)
			}
			name3, _, err := s.Preserve(p3, sum3, 100002, false)
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range []string{name1, name2, name3} {
				sum, size, _ := ParseName(n)
				if m, got, err := checksum.File(s.Path(n), nil); err != nil || got != sum || m != size {
					t.Errorf("entry %s holds %d bytes hashing to %s (%v)", n, m, got, err)
				}
			}
			if calls != tt.calls {
				t.Errorf("FICLONE tried %d times for 3 copies, want %d", calls, tt.calls)
			}
			if n := tmpFiles(t, s); len(n) != 0 {
				t.Errorf("temp files left: %v", n)
			}
		})
	}
}

// TestCloneVerified: a clone is verified as a copy is. The checksum an
// entry is named by is of the clone's own bytes, so when the original
// changes under the clone (a writer through FUSE passthrough does not
// wait for cmfs) PreserveCopy names the entry by what it holds, and
// Preserve, which was told the checksum, refuses with ErrChecksum and
// leaves nothing behind (fail closed).
func TestCloneVerified(t *testing.T) {
	changed := []byte("the 0riginal") // a writer's change, as long as the original
	s := newTestStore(t, func(o *sysOps) {
		o.clone = func(dst, src *os.File) error {
			_, err := dst.Write(changed)
			return err
		}
		o.link = func(a, b string) error { return &os.LinkError{Op: "link", Old: a, New: b, Err: syscall.EMLINK} }
	})
	p, sum := writeFile(t, t.TempDir(), "f", []byte("the original"))

	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	k, err := s.PreserveCopy(f)
	if err != nil {
		t.Fatal(err)
	}
	name, got, size := k.Name, k.XXH64, k.Size
	if want := checksum.Bytes(changed); got != want || size != int64(len(changed)) || name != Name(want, size) {
		t.Errorf("PreserveCopy of a changing file = %s %s %d; want it named by what it holds, %s", name, got, size, want)
	}
	if !bytes.Equal(readEntry(t, s, name), changed) {
		t.Error("entry does not hold what its name says")
	}

	if _, _, err := s.Preserve(p, sum, int64(len("the original")), false); !errors.Is(err, ErrChecksum) {
		t.Fatalf("Preserve whose clone differs from the checksum: %v, want ErrChecksum", err)
	}
	if n, _ := s.Stats(); n != 1 || len(tmpFiles(t, s)) != 0 {
		t.Errorf("after the refusal: %d entries (want 1), tmp %v", n, tmpFiles(t, s))
	}
}

// TestCloneDurable: an original the store cloned survives a power loss
// (XFS shut down without writing its log, then mounted again), both as
// the store makes it durable itself (durable.Write's fsync) and as
// protect's flush does for a store without sync (fdatasync of the entry:
// on XFS it forces the log that holds the clone's extent map). A file
// cloned after the last sync, and one written without any, are gone after
// the crash: the crash takes back what was not forced.
func TestCloneDurable(t *testing.T) {
	t.Run("store", func(t *testing.T) {
		mnt, fs := testFS(t, "xfs")
		dir := filepath.Join(mnt, "cmroot")
		s, err := open(dir, Options{}, defaultSys())
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(mnt, "orig")
		sum := writeOriginal(t, p, reflinkSize, 1)
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		k, err := s.PreserveCopy(f)
		name := k.Name
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if shared := sharedBytes(t, s.Path(name)); shared != reflinkSize {
			t.Fatalf("entry shares %d of %d bytes: not a clone", shared, reflinkSize)
		}
		unsynced := filepath.Join(mnt, "unsynced")
		if err := os.WriteFile(unsynced, []byte("never fsynced"), 0o644); err != nil {
			t.Fatal(err)
		}
		s.crash()
		if err := fs.Crash(); err != nil {
			t.Fatal(err)
		}
		if got, err := os.ReadFile(unsynced); err == nil && len(got) > 0 {
			t.Fatalf("a file never fsynced survived the crash (%q): the crash did not drop the log", got)
		}
		s = openTestStore(t, dir)
		if _, err := s.Lookup(name); err != nil {
			t.Fatalf("entry after the crash: %v", err)
		}
		if n, got, err := checksum.File(s.Path(name), nil); err != nil || got != sum || n != reflinkSize {
			t.Errorf("entry after the crash: %d bytes hashing to %s (%v); want %d, %s", n, got, err, reflinkSize, sum)
		}
	})
	t.Run("fdatasync", func(t *testing.T) {
		mnt, fs := testFS(t, "xfs")
		p := filepath.Join(mnt, "orig")
		sum := writeOriginal(t, p, reflinkSize, 2)
		src, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		defer src.Close()
		// Both clones get names that are durable before they clone.
		var dsts []*os.File
		for _, n := range []string{"synced", "unsynced"} {
			f, err := os.Create(filepath.Join(mnt, n))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
			dsts = append(dsts, f)
		}
		d, err := os.Open(mnt)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Sync(); err != nil {
			t.Fatal(err)
		}
		d.Close()
		sys := defaultSys()
		if err := sys.clone(dsts[0], src); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Fdatasync(int(dsts[0].Fd())); err != nil {
			t.Fatal(err)
		}
		if err := sys.clone(dsts[1], src); err != nil {
			t.Fatal(err)
		}
		for _, f := range append(dsts, src) {
			f.Close()
		}
		if err := fs.Crash(); err != nil {
			t.Fatal(err)
		}
		if n, got, err := checksum.File(filepath.Join(mnt, "synced"), nil); err != nil || got != sum || n != reflinkSize {
			t.Errorf("clone fdatasynced before the crash: %d bytes hashing to %s (%v); want %d, %s", n, got, err, reflinkSize, sum)
		}
		if n, _, err := checksum.File(filepath.Join(mnt, "unsynced"), nil); err != nil || n != 0 {
			t.Errorf("clone never synced: %d bytes after the crash (%v), want 0: the crash did not drop the log", n, err)
		}
	})
}
