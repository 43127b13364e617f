package integration

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cmfs-project/cmfs/journal"
)

// pathMax is PATH_MAX: the longest path a system call takes, with its NUL.
const pathMax = 4096

// longPath returns a relative path of exactly n bytes whose components are
// NAME_MAX/2 (127) bytes long but for the last, as pjdfstest's dirgen_max
// builds it, and whose last component ends in last.
func longPath(n int, last byte) string {
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		if b.Len() > 0 {
			b.WriteByte('/')
		}
		b.WriteString(strings.Repeat(string(rune('a'+i%26)), 127))
	}
	p := []byte(b.String()[:n])
	if p[n-1] == '/' || p[n-2] == '/' {
		// A component of one byte or none: shift the cut.
		p = append(p[:n-3], 'q', 'q', 'q')
	}
	p[n-1] = last
	return string(p)
}

// inDir runs fn on a thread of its own whose working directory is dir, so
// that fn can name paths relative to it as a shell in dir would (and as
// pjdfstest does), with paths too long to carry dir in front.
func inDir(t *testing.T, dir string, fn func()) {
	t.Helper()
	back, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		// Never unlocked: no other goroutine runs on a thread with a
		// working directory of its own. The runtime may keep the thread
		// after the goroutine ends, so it goes back to the process's
		// working directory first: it must not hold the mount busy.
		runtime.LockOSThread()
		done <- func() error {
			if err := unix.Unshare(unix.CLONE_FS); err != nil {
				return err
			}
			defer unix.Chdir(back)
			if err := unix.Chdir(dir); err != nil {
				return err
			}
			fn()
			return nil
		}()
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// mkdirs makes every directory of the relative path p, one mkdir of each
// ever longer prefix, as mkdir -p does.
func mkdirs(p string) error {
	for i := 0; i < len(p); i++ {
		if p[i] == '/' {
			if err := unix.Mkdir(p[:i], 0o755); err != nil {
				return fmt.Errorf("mkdir %d-byte prefix: %w", i, err)
			}
		}
	}
	return unix.Mkdir(p, 0o755)
}

// longPathSteps are the namespace system calls pjdfstest runs on paths of
// PATH_MAX-1 bytes (its */03 tests and rename/02) and on NAME_MAX names,
// in order, each named; each returns what the call returned.
func longPathSteps() (steps []string, run func(i int) error) {
	nx := longPath(pathMax-1, 'f') // the longest a call takes
	dir := path.Dir(nx)
	nx2 := nx[:len(nx)-1] + "g"
	nxl := nx[:len(nx)-1] + "l"
	nxp := nx[:len(nx)-1] + "p"
	nxd := nx[:len(nx)-1] + "d"
	nxx := nx + "x" // one byte too long: the kernel refuses it
	n255 := strings.Repeat("n", 255)
	m255 := strings.Repeat("m", 255)
	n256 := strings.Repeat("n", 256)
	write := func(p string, flags int, data string) error {
		fd, err := unix.Open(p, flags|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
		if err != nil {
			return err
		}
		if _, err := unix.Write(fd, []byte(data)); err != nil {
			unix.Close(fd)
			return err
		}
		return unix.Close(fd)
	}
	size := func(p string, want int64) error {
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		if st.Size != want {
			return fmt.Errorf("size %d, want %d", st.Size, want)
		}
		return nil
	}
	type step struct {
		name string
		do   func() error
	}
	all := []step{
		{"mkdir -p the directories", func() error { return mkdirs(dir) }},
		{"create", func() error { return write(nx, unix.O_CREAT|unix.O_EXCL, "hello") }},
		{"stat", func() error { return size(nx, 5) }},
		{"chmod", func() error { return unix.Chmod(nx, 0o600) }},
		{"lchown", func() error { return unix.Lchown(nx, 65534, 65534) }},
		{"utimes", func() error {
			return unix.UtimesNanoAt(unix.AT_FDCWD, nx, []unix.Timespec{{Sec: 1}, {Sec: 2}}, unix.AT_SYMLINK_NOFOLLOW)
		}},
		{"truncate by path", func() error { return unix.Truncate(nx, 2) }},
		{"stat after truncate", func() error { return size(nx, 2) }},
		{"overwrite with O_TRUNC", func() error { return write(nx, unix.O_TRUNC, "over") }},
		{"append", func() error { return write(nx, unix.O_APPEND, "+") }},
		{"stat after writes", func() error { return size(nx, 5) }},
		{"link to a short name", func() error { return unix.Link(nx, "short") }},
		{"link a short name to a long one", func() error { return unix.Link("short", nx2) }},
		{"unlink the short name", func() error { return unix.Unlink("short") }},
		// Two names of one inode: rename does nothing.
		{"rename long over its own link", func() error { return unix.Rename(nx, nx2) }},
		{"stat the old name", func() error { return size(nx, 5) }},
		{"unlink the old name", func() error { return unix.Unlink(nx) }},
		{"stat the new name", func() error { return size(nx2, 5) }},
		{"rename long to long", func() error { return unix.Rename(nx2, nx) }},
		{"rename it back", func() error { return unix.Rename(nx, nx2) }},
		{"symlink", func() error { return unix.Symlink("target", nxl) }},
		{"readlink", func() error {
			buf := make([]byte, 64)
			n, err := unix.Readlink(nxl, buf)
			if err == nil && string(buf[:n]) != "target" {
				return fmt.Errorf("readlink: %q", buf[:n])
			}
			return err
		}},
		{"symlink to a long target", func() error { return unix.Symlink(nx2, "to-long") }},
		{"mkfifo", func() error { return unix.Mkfifo(nxp, 0o644) }},
		{"mkdir", func() error { return unix.Mkdir(nxd, 0o755) }},
		{"list the deep directory", func() error {
			fd, err := unix.Openat(unix.AT_FDCWD, dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			d := os.NewFile(uintptr(fd), "deep")
			defer d.Close()
			names, err := d.Readdirnames(-1)
			if err != nil {
				return err
			}
			if len(names) != 4 {
				return fmt.Errorf("%d entries, want 4", len(names))
			}
			return nil
		}},
		{"rmdir", func() error { return unix.Rmdir(nxd) }},
		{"unlink the fifo", func() error { return unix.Unlink(nxp) }},
		{"unlink the symlink", func() error { return unix.Unlink(nxl) }},
		{"unlink the file", func() error { return unix.Unlink(nx2) }},
		{"unlink it again", func() error { return unix.Unlink(nx2) }},
		{"create one byte too long", func() error { return write(nxx, unix.O_CREAT, "x") }},
		{"mkdir one byte too long", func() error { return unix.Mkdir(nxx, 0o755) }},
		{"create a NAME_MAX name", func() error { return write(n255, unix.O_CREAT|unix.O_EXCL, "n") }},
		{"rename NAME_MAX names", func() error { return unix.Rename(n255, m255) }},
		{"unlink a NAME_MAX name", func() error { return unix.Unlink(m255) }},
		{"create a name one byte too long", func() error { return write(n256, unix.O_CREAT, "x") }},
		{"remove the deep tree", func() error { return os.RemoveAll(nx[:strings.IndexByte(nx, '/')]) }},
	}
	for _, s := range all {
		steps = append(steps, s.name)
	}
	return steps, func(i int) error { return all[i].do() }
}

// TestLongPaths: every namespace system call on a path of PATH_MAX-1 bytes
// and on a NAME_MAX name gives through the mount what it gives on the
// native filesystem, although the mount's backing path of the same file is
// longer than PATH_MAX; and the changes are journaled and preserved.
func TestLongPaths(t *testing.T) {
	steps, run := longPathSteps()
	// in runs the steps with dir as the working directory.
	in := func(dir string) []string {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		var got []string
		inDir(t, dir, func() {
			for i := range steps {
				got = append(got, errText(run(i)))
			}
		})
		return got
	}
	native := in(filepath.Join(t.TempDir(), "native", "work"))
	for i, r := range native {
		if want := wantNative(steps[i]); r != want {
			t.Fatalf("native %s: %s, want %s (the test's own premise)", steps[i], r, want)
		}
	}
	m := mount(t)
	// From working directories at several depths (the mount's root, as
	// pjdfstest runs its */03 tests, and below): the backing path of the
	// same file falls into PATH_MAX-sized pieces differently each time,
	// and from the root it is short enough for one call, but not with
	// the backing directory's path in front.
	for _, wd := range []string{"", "work", "pjdfstest_0123456789abcdef0123456789abcdef", "d/e/e/p/e/r"} {
		through := in(m.path(wd))
		for i, s := range steps {
			if g, w := through[i], native[i]; g != w {
				t.Errorf("in %s: %s: %s through the mount, %s natively", wd, s, g, w)
			}
		}
	}

	// The long file's life is in the journal, its original in cmroot.
	nx2 := "work/" + longPath(pathMax-1, 'f')[:pathMax-2] + "g"
	var deleted *journal.Event
	for _, e := range events(t, m.State) {
		if e.Type == journal.Delete && e.Path == nx2 {
			deleted = &e
		}
	}
	switch {
	case deleted == nil:
		t.Errorf("no DELETE of the %d-byte path journaled", len(nx2))
	case len(deleted.Files) != 1 || deleted.Files[0].CM == "":
		t.Errorf("DELETE of the long path preserved nothing: %+v", deleted)
	default:
		p, err := cmEntry(m.CMRoot, deleted.Files[0].CM)
		if err != nil {
			t.Fatal(err)
		}
		if got := string(readFile(t, p)); got != "over+" {
			t.Errorf("cmroot kept %q for the long path, want \"over+\"", got)
		}
	}
}

// wantNative is what each step returns on a native filesystem.
func wantNative(step string) string {
	switch {
	case strings.HasSuffix(step, "too long"):
		return errText(syscall.ENAMETOOLONG)
	case step == "unlink it again":
		return errText(syscall.ENOENT)
	}
	return "ok"
}

func errText(err error) string {
	if err == nil {
		return "ok"
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno.Error()
	}
	return err.Error()
}
