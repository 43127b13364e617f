// Package at makes the system calls of a file system that serves a tree
// of another one (cmfs's backing directory) relative to a descriptor of
// that tree's root, never through its absolute path.
//
// Two reasons. A path inside the mount can be as long as PATH_MAX, and a
// call relative to the mount's working directory can name one longer
// still from the mount's root: with the backing directory's path in front
// it would no longer fit in a system call (ENAMETOOLONG where the native
// filesystem succeeds). And every call on an absolute path walks the
// backing directory's own components again; relative to its descriptor
// the kernel walks only the part below it.
//
// A Tree is the root held open (O_PATH). Its methods take paths relative
// to it, slash-separated and clean ("" is the root itself), and resolve
// them as the corresponding *at call does: a path shorter than PATH_MAX
// in one call from the root's descriptor; a longer one by opening its
// directories a PATH_MAX-sized piece at a time (Tree.Loc), then the call
// on what is left. Intermediate symlinks are followed, as they are in an
// absolute path; the mount never hands one over, since the kernel resolves
// symlinks itself before it asks.
package at

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// pathMax is PATH_MAX: a path a system call takes is shorter.
const pathMax = unix.PathMax

// procMax bounds the name a path through /proc/self/fd/N/ may end in, so
// that the whole path is shorter than PATH_MAX.
const procMax = pathMax - len("/proc/self/fd/2147483647/")

// Tree is a directory held open, with the calls on paths below it.
type Tree struct {
	fd   int
	path string
}

// Open opens the directory dir as a Tree.
func Open(dir string) (*Tree, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	return &Tree{fd: fd, path: dir}, nil
}

// Close releases the root's descriptor.
func (t *Tree) Close() error { return unix.Close(t.fd) }

// Path is the root's path as it was opened: for messages, and for what
// must name it by path (a mount).
func (t *Tree) Path() string { return t.path }

// Join is rel's path from the filesystem's root, for messages only: it
// may be too long for a system call.
func (t *Tree) Join(rel string) string { return path.Join(t.path, rel) }

// Loc is a name relative to a directory descriptor: what an *at call
// takes.
type Loc struct {
	Dir  int
	Name string
	own  bool // Dir was opened for this Loc; Close closes it
}

// Loc resolves rel to a directory descriptor and a name in it. The
// caller must Close it.
func (t *Tree) Loc(rel string) (Loc, error) { return t.loc(rel, pathMax) }

// loc is Loc with a name shorter than max.
func (t *Tree) loc(rel string, max int) (Loc, error) {
	switch {
	case rel == "":
		return Loc{Dir: t.fd, Name: "."}, nil
	case rel[0] == '/':
		// The *at call would ignore the descriptor: a caller's mistake,
		// never a path below the tree.
		return Loc{}, &os.PathError{Op: "resolve", Path: rel, Err: unix.EINVAL}
	case len(rel) < max:
		return Loc{Dir: t.fd, Name: rel}, nil
	}
	dir, own, rest := t.fd, false, rel
	for len(rest) >= max {
		// The longest piece that fits in one call.
		cut := strings.LastIndexByte(rest[:min(len(rest), pathMax-1)], '/')
		if cut <= 0 {
			// A component longer than PATH_MAX: no name is.
			return t.closing(dir, own, unix.ENAMETOOLONG)
		}
		next, err := unix.Openat(dir, rest[:cut], unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if own {
			unix.Close(dir)
		}
		if err != nil {
			return Loc{}, err
		}
		dir, own, rest = next, true, rest[cut+1:]
	}
	return Loc{Dir: dir, Name: rest, own: own}, nil
}

func (t *Tree) closing(dir int, own bool, err error) (Loc, error) {
	if own {
		unix.Close(dir)
	}
	return Loc{}, err
}

// Close releases what Loc opened.
func (l Loc) Close() {
	if l.own {
		unix.Close(l.Dir)
	}
}

// With runs fn on rel's Loc, for a call this package has no method for.
func (t *Tree) With(rel string, fn func(l Loc) error) error { return t.do(rel, fn) }

// WithPath runs fn with a path naming rel that fits in a system call, for
// a call that has no *at form or code that takes paths: the tree's own
// path joined with rel when that fits, which keeps what the call reports
// free of /proc; else Loc.Path. The path is valid only during fn.
func (t *Tree) WithPath(rel string, fn func(p string) error) error {
	l, err := t.loc(rel, procMax)
	if err != nil {
		return err
	}
	defer l.Close()
	return fn(l.pathFor(t))
}

// do runs fn on rel's Loc.
func (t *Tree) do(rel string, fn func(l Loc) error) error {
	l, err := t.Loc(rel)
	if err != nil {
		return err
	}
	defer l.Close()
	return fn(l)
}

// do2 runs fn on the Locs of two paths (rename, link).
func (t *Tree) do2(a, b string, fn func(la, lb Loc) error) error {
	return t.do(a, func(la Loc) error {
		return t.do(b, func(lb Loc) error { return fn(la, lb) })
	})
}

// Lstat is lstat(2) of rel, into the syscall package's Stat_t that the
// rest of the program (and go-fuse) uses.
func (t *Tree) Lstat(rel string, st *syscall.Stat_t) error {
	return t.do(rel, func(l Loc) error { return fstatat(l.Dir, l.Name, st, unix.AT_SYMLINK_NOFOLLOW) })
}

// fstatat is fstatat(2) into a syscall.Stat_t: the same kernel struct
// stat as unix.Stat_t, declared twice. (The array below fails to compile
// should their sizes ever differ.)
var _ = [1]struct{}{}[unsafe.Sizeof(syscall.Stat_t{})-unsafe.Sizeof(unix.Stat_t{})]

func fstatat(dir int, name string, st *syscall.Stat_t, flags int) error {
	return unix.Fstatat(dir, name, (*unix.Stat_t)(unsafe.Pointer(st)), flags)
}

// Statx is statx(2) of rel with flags (AT_SYMLINK_NOFOLLOW, …) and mask.
func (t *Tree) Statx(rel string, flags, mask int, st *unix.Statx_t) error {
	return t.do(rel, func(l Loc) error { return unix.Statx(l.Dir, l.Name, flags, mask, st) })
}

// OpenFD is open(2) of rel; the descriptor is the caller's (O_CLOEXEC
// added).
func (t *Tree) OpenFD(rel string, flags int, mode uint32) (fd int, err error) {
	err = t.do(rel, func(l Loc) error {
		fd, err = unix.Openat(l.Dir, l.Name, flags|unix.O_CLOEXEC, mode)
		return err
	})
	return fd, err
}

// Open is open(2) of rel as an *os.File named by rel's full path.
func (t *Tree) Open(rel string, flags int, mode uint32) (*os.File, error) {
	fd, err := t.OpenFD(rel, flags, mode)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: t.Join(rel), Err: err}
	}
	return os.NewFile(uintptr(fd), t.Join(rel)), nil
}

// ReadDir lists the directory rel, as os.ReadDir does (sorted by name).
func (t *Tree) ReadDir(rel string) ([]os.DirEntry, error) {
	f, err := t.Open(rel, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	entries, err := f.ReadDir(-1)
	slices.SortFunc(entries, func(a, b os.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return entries, err
}

// WalkDir walks the tree below rel as filepath.WalkDir does, lexically,
// without following symlinks, calling fn with each path relative to the
// tree's root; fn's fs.SkipDir and fs.SkipAll work as there. Unlike
// filepath.WalkDir, a tree deeper than PATH_MAX is walked whole.
func (t *Tree) WalkDir(rel string, fn fs.WalkDirFunc) error {
	var st syscall.Stat_t
	err := t.Lstat(rel, &st)
	if err != nil {
		err = fn(rel, nil, &os.PathError{Op: "lstat", Path: t.Join(rel), Err: err})
	} else {
		err = t.walkDir(rel, statEntry{name: path.Base(rel), mode: st.Mode}, fn)
	}
	if err == fs.SkipDir || err == fs.SkipAll {
		return nil
	}
	return err
}

func (t *Tree) walkDir(rel string, d fs.DirEntry, fn fs.WalkDirFunc) error {
	if err := fn(rel, d, nil); err != nil || !d.IsDir() {
		if err == fs.SkipDir && d.IsDir() {
			err = nil
		}
		return err
	}
	entries, err := t.ReadDir(rel)
	if err != nil {
		// As filepath.WalkDir: a second call for the directory, with
		// the error.
		if err = fn(rel, d, err); err != nil {
			if err == fs.SkipDir && d.IsDir() {
				err = nil
			}
			return err
		}
	}
	for _, e := range entries {
		if err := t.walkDir(path.Join(rel, e.Name()), e, fn); err != nil {
			if err == fs.SkipDir {
				break
			}
			return err
		}
	}
	return nil
}

// statEntry is the fs.DirEntry of a walk's root, from its lstat.
type statEntry struct {
	name string
	mode uint32
}

func (e statEntry) Name() string { return e.name }
func (e statEntry) IsDir() bool  { return e.mode&unix.S_IFMT == unix.S_IFDIR }
func (e statEntry) Type() fs.FileMode {
	switch e.mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return fs.ModeDir
	case unix.S_IFLNK:
		return fs.ModeSymlink
	case unix.S_IFIFO:
		return fs.ModeNamedPipe
	case unix.S_IFSOCK:
		return fs.ModeSocket
	case unix.S_IFCHR:
		return fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		return fs.ModeDevice
	}
	return 0
}
func (e statEntry) Info() (fs.FileInfo, error) { return nil, fs.ErrInvalid }

// Mkdir is mkdir(2) of rel.
func (t *Tree) Mkdir(rel string, mode uint32) error {
	return t.do(rel, func(l Loc) error { return unix.Mkdirat(l.Dir, l.Name, mode) })
}

// Mknod is mknod(2) of rel.
func (t *Tree) Mknod(rel string, mode uint32, dev int) error {
	return t.do(rel, func(l Loc) error { return unix.Mknodat(l.Dir, l.Name, mode, dev) })
}

// Rmdir is rmdir(2) of rel.
func (t *Tree) Rmdir(rel string) error {
	return t.do(rel, func(l Loc) error { return unix.Unlinkat(l.Dir, l.Name, unix.AT_REMOVEDIR) })
}

// Unlink is unlink(2) of rel.
func (t *Tree) Unlink(rel string) error {
	return t.do(rel, func(l Loc) error { return unix.Unlinkat(l.Dir, l.Name, 0) })
}

// Rename is renameat2(2) of oldRel to newRel with its flags
// (RENAME_NOREPLACE, RENAME_EXCHANGE, …).
func (t *Tree) Rename(oldRel, newRel string, flags uint) error {
	return t.do2(oldRel, newRel, func(o, n Loc) error { return unix.Renameat2(o.Dir, o.Name, n.Dir, n.Name, flags) })
}

// Link is link(2): newRel becomes a name of oldRel's inode.
func (t *Tree) Link(oldRel, newRel string) error {
	return t.do2(oldRel, newRel, func(o, n Loc) error { return unix.Linkat(o.Dir, o.Name, n.Dir, n.Name, 0) })
}

// Symlink is symlink(2): rel becomes a symlink to target.
func (t *Tree) Symlink(target, rel string) error {
	return t.do(rel, func(l Loc) error { return unix.Symlinkat(target, l.Dir, l.Name) })
}

// Readlink is readlink(2) of rel.
func (t *Tree) Readlink(rel string) (target string, err error) {
	err = t.do(rel, func(l Loc) error {
		for size := 256; ; size *= 2 {
			buf := make([]byte, size)
			n, err := unix.Readlinkat(l.Dir, l.Name, buf)
			if err != nil {
				return err
			}
			if n < size {
				target = string(buf[:n])
				return nil
			}
		}
	})
	return target, err
}

// Lchown is lchown(2) of rel.
func (t *Tree) Lchown(rel string, uid, gid int) error {
	return t.do(rel, func(l Loc) error { return unix.Fchownat(l.Dir, l.Name, uid, gid, unix.AT_SYMLINK_NOFOLLOW) })
}

// Chmod is chmod(2) of rel.
func (t *Tree) Chmod(rel string, mode uint32) error {
	return t.do(rel, func(l Loc) error { return unix.Fchmodat(l.Dir, l.Name, mode, 0) })
}

// Truncate is truncate(2) of rel (which has no *at form).
func (t *Tree) Truncate(rel string, size int64) error {
	return t.WithPath(rel, func(p string) error { return unix.Truncate(p, size) })
}

// UtimesNano is utimensat(2) of rel with flags.
func (t *Tree) UtimesNano(rel string, ts []unix.Timespec, flags int) error {
	return t.do(rel, func(l Loc) error { return unix.UtimesNanoAt(l.Dir, l.Name, ts, flags) })
}

// pathFor is WithPath's path of l, a Loc whose name is shorter than
// procMax: the tree's path and the name where that fits, else through
// the process's descriptor of l's directory in /proc, valid while l is
// open.
func (l Loc) pathFor(t *Tree) string {
	if l.Dir == t.fd && len(t.path)+1+len(l.Name) < pathMax {
		return t.path + "/" + l.Name
	}
	return fmt.Sprintf("/proc/self/fd/%d/%s", l.Dir, l.Name)
}
