// Package loopfs is for tests and benchmarks that need a filesystem of a
// given type (XFS, ext4) whatever the machine's own disks are: it makes one
// in an image file, attaches the image to a loop device and mounts it, and
// takes all of that down again. It also counts the bytes a file shares
// with another (a reflink), and can end an XFS filesystem as a power
// loss would.
//
// Everything here needs root, and mkfs.TYPE from the distribution
// (Debian: xfsprogs, e2fsprogs); Missing says what is lacking.
package loopfs

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/cmfs-project/cmfs/internal/extents"
	"github.com/cmfs-project/cmfs/internal/procfs"
	"golang.org/x/sys/unix"
)

// FS is a filesystem made on a loop device and mounted.
type FS struct {
	Type  string // "xfs", "ext4"
	Image string // the image file
	Dev   string // the loop device, /dev/loopN
	Dir   string // the mount point
}

// packages names the Debian package of each mkfs.
var packages = map[string]string{"xfs": "xfsprogs", "ext4": "e2fsprogs", "btrfs": "btrfs-progs"}

// Missing says why a filesystem of type fstype cannot be made here, or "".
func Missing(fstype string) string {
	if os.Geteuid() != 0 {
		return "not root: a loop device and a mount need uid 0"
	}
	mkfs := "mkfs." + fstype
	if _, err := exec.LookPath(mkfs); err != nil {
		if pkg := packages[fstype]; pkg != "" {
			return fmt.Sprintf("%s is missing (Debian: apt-get install %s)", mkfs, pkg)
		}
		return mkfs + " is missing"
	}
	for _, tool := range []string{"losetup", "mount", "umount"} {
		if _, err := exec.LookPath(tool); err != nil {
			return tool + " is missing (Debian: util-linux, mount)"
		}
	}
	return ""
}

// mkfsArgs are the options each type is made with. XFS asks for reflinks
// explicitly (the default since xfsprogs 5.1, but the point of most
// callers); -f and -F let the image be made again over an old one. ext4's
// inode tables and journal are written by mkfs, not by the kernel's
// ext4lazyinit thread after the mount, whose writes would land in the
// middle of whatever is measured on it.
var mkfsArgs = map[string][]string{
	"xfs":  {"-q", "-f", "-m", "reflink=1"},
	"ext4": {"-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0"},
}

// Temp makes a filesystem of type fstype and size bytes in t's temporary
// directory, mounted at its "mnt", taken down in t's cleanup (after
// everything registered later), and returns it. A machine that cannot
// make one (Missing) skips the test.
func Temp(t testing.TB, fstype string, size int64) *FS {
	t.Helper()
	if why := Missing(fstype); why != "" {
		t.Skip(why)
	}
	dir := t.TempDir()
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	fs, err := Make(filepath.Join(dir, "img"), mnt, fstype, size)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := fs.Close(); err != nil {
			t.Error(err)
		}
	})
	return fs
}

// Make creates the image file image of size bytes (sparse), makes a
// filesystem of type fstype on it, attaches it to a free loop device and
// mounts it at dir, which must exist and be empty. Close undoes all of it;
// on error nothing is left behind.
func Make(image, dir, fstype string, size int64) (f *FS, err error) {
	f = &FS{Type: fstype, Image: image, Dir: dir}
	defer func() {
		if err != nil {
			err = errors.Join(fmt.Errorf("make %s on %s: %w", fstype, image, err), f.Close())
			f = nil
		}
	}()
	img, err := os.OpenFile(image, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return f, err
	}
	err = img.Truncate(size)
	if cerr := img.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return f, err
	}
	if err := run("mkfs."+fstype, append(mkfsArgs[fstype], image)...); err != nil {
		return f, err
	}
	out, err := exec.Command("losetup", "--find", "--show", image).CombinedOutput()
	if err != nil {
		return f, fmt.Errorf("losetup --find --show: %w: %s", err, strings.TrimSpace(string(out)))
	}
	f.Dev = strings.TrimSpace(string(out))
	if err := run("mount", "-t", fstype, f.Dev, dir); err != nil {
		return f, err
	}
	return f, nil
}

// Close unmounts the filesystem, detaches the loop device and removes the
// image, as far as each was made. A filesystem still busy (a daemon on
// it exiting after its own unmount) is tried again for up to busyWait. It
// is safe to call more than once.
func (f *FS) Close() error {
	var errs []error
	if f.Dir != "" && procfs.Mounted(f.Dir) {
		deadline := time.Now().Add(busyWait)
		for {
			err := run("umount", f.Dir)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				errs = append(errs, err)
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if f.Dev != "" && len(errs) == 0 {
		if err := run("losetup", "-d", f.Dev); err != nil {
			errs = append(errs, err)
		}
		f.Dev = ""
	}
	if f.Image != "" && len(errs) == 0 {
		if err := os.Remove(f.Image); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Crash ends the filesystem as a power loss would and brings it back:
// XFS shuts down without writing its log (XFS_IOC_GOINGDOWN with
// NOLOGFLUSH: what no fsync forced to the log is gone), then it is
// unmounted and mounted again, which replays the log as recovery after a
// power loss does. XFS only.
func (f *FS) Crash() error {
	if f.Type != "xfs" {
		return fmt.Errorf("crash %s: only XFS can be shut down without its log", f.Dir)
	}
	d, err := os.Open(f.Dir)
	if err != nil {
		return err
	}
	flags := uint32(xfsGoingDownNoLogFlush)
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, d.Fd(), xfsIocGoingDown, uintptr(unsafe.Pointer(&flags)))
	d.Close()
	if errno != 0 {
		return fmt.Errorf("crash %s: XFS_IOC_GOINGDOWN: %w", f.Dir, errno)
	}
	if err := run("umount", f.Dir); err != nil {
		return err
	}
	return run("mount", "-t", f.Type, f.Dev, f.Dir)
}

// busyWait bounds how long Close waits for a busy filesystem.
const busyWait = 15 * time.Second

// XFS_IOC_GOINGDOWN (_IOR('X', 125, __u32)) and its flag that drops the
// log instead of writing it.
const (
	xfsIocGoingDown        = 0x8004587d
	xfsGoingDownNoLogFlush = 2
)

// UsedBytes returns how many bytes the filesystem holding path has in use.
func UsedBytes(path string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, &os.PathError{Op: "statfs", Path: path, Err: err}
	}
	return int64(st.Blocks-st.Bfree) * st.Bsize, nil
}

// SharedBytes returns how many bytes of the file at path lie in extents it
// shares with another file.
func SharedBytes(path string) (int64, error) {
	exts, err := extents.MapPath(path)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, e := range exts {
		if e.Flags&extents.Shared != 0 {
			n += int64(e.Length)
		}
	}
	return n, nil
}

func run(name string, args ...string) error {
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
