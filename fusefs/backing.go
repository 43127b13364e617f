package fusefs

import (
	"context"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/cmfs-project/cmfs/internal/at"
)

// The loopback's operations that name a node's backing file by path, made
// on the backing tree instead (package at): relative to the backing
// root's descriptor, so that a file the mount can name, the daemon can
// too, however long its path from the root. go-fuse's loopback joins the
// backing directory's path in front of every path, and a path of PATH_MAX
// bytes inside the mount fails with ENAMETOOLONG behind it.
//
// Every go-fuse LoopbackNode method that takes a path is overridden here
// or in node.go and open.go; what is left of the embedded loopback works
// on open descriptors only.

var (
	_ = (gofs.NodeReadlinker)((*node)(nil))
	_ = (gofs.NodeReaddirer)((*node)(nil))
	_ = (gofs.NodeStatfser)((*node)(nil))
	_ = (gofs.NodeGetxattrer)((*node)(nil))
	_ = (gofs.NodeSetxattrer)((*node)(nil))
	_ = (gofs.NodeRemovexattrer)((*node)(nil))
	_ = (gofs.NodeListxattrer)((*node)(nil))
)

// tree is the backing directory the core holds open.
func (r *root) tree() *at.Tree { return r.core.Tree() }

// relLive is rel, or ENOENT for a node no longer in the tree.
func (n *node) relLive() (string, syscall.Errno) {
	rel, live := n.rel()
	if !live {
		return "", syscall.ENOENT
	}
	return rel, 0
}

// lookup is the loopback's LOOKUP of name in n: the child's attributes
// and its node, identified as the loopback identifies it.
func (n *node) lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	rel, live := n.child(name)
	if !live {
		return nil, syscall.ENOENT
	}
	st, btime, err := n.r.statx(rel)
	if err != nil {
		return nil, gofs.ToErrno(err)
	}
	out.Attr.FromStat(st)
	return n.newChild(ctx, st, btime), 0
}

// newChild makes the node of a backing file with attributes st.
func (n *node) newChild(ctx context.Context, st *syscall.Stat_t, btime unix.StatxTimestamp) *gofs.Inode {
	return n.NewInode(ctx, &gofs.LoopbackNode{RootData: n.RootData}, n.stableAttr(st, btime))
}

// stableAttr identifies a backing file as go-fuse's loopback does: its
// inode number with the device's mixed in (none for the backing
// directory's own device), and its birth time as the generation, so that
// a reused inode number is another file.
func (n *node) stableAttr(st *syscall.Stat_t, btime unix.StatxTimestamp) gofs.StableAttr {
	swap := func(dev uint64) uint64 { return dev<<32 | dev>>32 }
	gen := uint64(1)
	if btime.Sec != 0 || btime.Nsec != 0 {
		gen = uint64(btime.Sec)*1e9 + uint64(btime.Nsec)
	}
	return gofs.StableAttr{Mode: st.Mode, Gen: gen, Ino: swap(st.Dev) ^ swap(n.RootData.Dev) ^ st.Ino}
}

// statx returns the attributes of rel, not following a final symlink,
// and its birth time (zero where the filesystem keeps none).
func (r *root) statx(rel string) (*syscall.Stat_t, unix.StatxTimestamp, error) {
	var x unix.Statx_t
	if err := r.tree().Statx(rel, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_BASIC_STATS|unix.STATX_BTIME, &x); err != nil {
		return nil, unix.StatxTimestamp{}, err
	}
	var btime unix.StatxTimestamp
	if x.Mask&unix.STATX_BTIME != 0 {
		btime = x.Btime
	}
	return statOfStatx(&x), btime, nil
}

// statOfStatx is what stat(2) would have said of x.
func statOfStatx(x *unix.Statx_t) *syscall.Stat_t {
	ts := func(t unix.StatxTimestamp) syscall.Timespec { return syscall.Timespec{Sec: t.Sec, Nsec: int64(t.Nsec)} }
	return &syscall.Stat_t{
		Dev:     unix.Mkdev(x.Dev_major, x.Dev_minor),
		Ino:     x.Ino,
		Nlink:   uint64(x.Nlink),
		Mode:    uint32(x.Mode),
		Uid:     x.Uid,
		Gid:     x.Gid,
		Rdev:    unix.Mkdev(x.Rdev_major, x.Rdev_minor),
		Size:    int64(x.Size),
		Blksize: int64(x.Blksize),
		Blocks:  int64(x.Blocks),
		Atim:    ts(x.Atime),
		Mtim:    ts(x.Mtime),
		Ctim:    ts(x.Ctime),
	}
}

// Getattr reports links that only cmroot holds as absent: to every
// program a preserved file looks deleted.
func (n *node) Getattr(ctx context.Context, f gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if fga, ok := f.(gofs.FileGetattrer); ok && f != nil {
		if errno := fga.Getattr(ctx, out); errno != 0 {
			return errno
		}
	} else {
		var st syscall.Stat_t
		rel, live := n.rel()
		switch {
		case live:
			if err := n.r.tree().Lstat(rel, &st); err != nil {
				return gofs.ToErrno(err)
			}
		case !n.heldStat(&st):
			return syscall.ENOENT
		}
		out.FromStat(&st)
	}
	out.Nlink -= n.r.core.CMLinks(out.Mode, out.Ino, out.Nlink)
	return 0
}

func (n *node) Statx(ctx context.Context, f gofs.FileHandle, flags, mask uint32, out *fuse.StatxOut) syscall.Errno {
	if fsx, ok := f.(gofs.FileStatxer); ok && f != nil {
		if errno := fsx.Statx(ctx, flags, mask, out); errno != 0 {
			return errno
		}
	} else {
		var x unix.Statx_t
		rel, live := n.rel()
		switch {
		case live:
			if err := n.r.tree().Statx(rel, int(flags), int(mask), &x); err != nil {
				return gofs.ToErrno(err)
			}
		case !n.heldStatx(flags, mask, &x):
			return syscall.ENOENT
		}
		out.FromStatx(&x)
	}
	out.Nlink -= n.r.core.CMLinks(uint32(out.Mode), out.Ino, out.Nlink)
	return 0
}

// setattr sets what in asks but the size (Setattr's, through the core),
// through the open file f where there is one, and reports the result with
// cmroot's links hidden.
func (n *node) setattr(ctx context.Context, f gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if fh, ok := f.(*file); ok {
		f = fh.LoopbackFile
	}
	if fsa, ok := f.(gofs.FileSetattrer); ok && f != nil {
		if errno := fsa.Setattr(ctx, in, out); errno != 0 {
			return errno
		}
		out.Nlink -= n.r.core.CMLinks(out.Mode, out.Ino, out.Nlink)
		return 0
	}
	rel, errno := n.relLive()
	if errno != 0 {
		return errno
	}
	t := n.r.tree()
	if m, ok := in.GetMode(); ok {
		if err := t.Chmod(rel, m); err != nil {
			return gofs.ToErrno(err)
		}
	}
	uid, uok := in.GetUID()
	gid, gok := in.GetGID()
	if uok || gok {
		u, g := -1, -1
		if uok {
			u = int(uid)
		}
		if gok {
			g = int(gid)
		}
		if err := t.Lchown(rel, u, g); err != nil {
			return gofs.ToErrno(err)
		}
	}
	mtime, mok := in.GetMTime()
	atime, aok := in.GetATime()
	if mok || aok {
		ts := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, {Nsec: unix.UTIME_OMIT}}
		if aok {
			ts[0] = unix.NsecToTimespec(atime.UnixNano())
		}
		if mok {
			ts[1] = unix.NsecToTimespec(mtime.UnixNano())
		}
		if err := t.UtimesNano(rel, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return gofs.ToErrno(err)
		}
	}
	return n.Getattr(ctx, nil, out)
}

func (n *node) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	rel, errno := n.relLive()
	if errno != 0 {
		return nil, errno
	}
	target, err := n.r.tree().Readlink(rel)
	if err != nil {
		return nil, gofs.ToErrno(err)
	}
	return []byte(target), 0
}

// dirStream opens the directory rel for listing.
func (n *node) dirStream(rel string) (gofs.DirStream, syscall.Errno) {
	fd, err := n.r.tree().OpenFD(rel, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, gofs.ToErrno(err)
	}
	return gofs.NewLoopbackDirStreamFd(fd)
}

func (n *node) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	rel, errno := n.relLive()
	if errno != 0 {
		return nil, errno
	}
	return n.dirStream(rel)
}

// openDir opens the directory rel, the node's, for listing, and holds the
// directory itself open (O_PATH) until the handle is released: fstat of an
// open directory sends the daemon no handle, only the node, and once a
// rename has put another directory at its name the node has no path left
// (Getattr). The listing is read from the held directory, so both are the
// same one.
func (n *node) openDir(rel string) (gofs.FileHandle, uint32, syscall.Errno) {
	n.heldMu.Lock()
	defer n.heldMu.Unlock()
	if n.holds == 0 {
		fd, err := n.r.tree().OpenFD(rel, unix.O_PATH|unix.O_DIRECTORY, 0)
		if err != nil {
			return nil, 0, gofs.ToErrno(err)
		}
		n.held = fd
	}
	fd, err := unix.Openat(n.held, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		if n.holds == 0 {
			unix.Close(n.held)
		}
		return nil, 0, gofs.ToErrno(err)
	}
	ds, errno := gofs.NewLoopbackDirStreamFd(fd)
	if errno != 0 {
		if n.holds == 0 {
			unix.Close(n.held)
		}
		return nil, 0, errno
	}
	n.holds++
	return &openDir{FileHandle: ds, n: n}, 0, 0
}

// heldStat is the attributes of the node's held directory, when it holds
// one (openDir).
func (n *node) heldStat(st *syscall.Stat_t) bool {
	n.heldMu.Lock()
	defer n.heldMu.Unlock()
	return n.holds > 0 && syscall.Fstat(n.held, st) == nil
}

// heldStatx is heldStat by statx(2).
func (n *node) heldStatx(flags, mask uint32, x *unix.Statx_t) bool {
	n.heldMu.Lock()
	defer n.heldMu.Unlock()
	return n.holds > 0 && unix.Statx(n.held, "", unix.AT_EMPTY_PATH|int(flags), int(mask), x) == nil
}

// openDir is a directory handle: a loopback listing, and a hold on the
// node's directory.
type openDir struct {
	gofs.FileHandle
	n *node
}

var (
	_ = (gofs.FileReaddirenter)((*openDir)(nil))
	_ = (gofs.FileSeekdirer)((*openDir)(nil))
	_ = (gofs.FileFsyncdirer)((*openDir)(nil))
	_ = (gofs.FileIoctler)((*openDir)(nil))
	_ = (gofs.FileReleasedirer)((*openDir)(nil))
)

func (d *openDir) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	return d.FileHandle.(gofs.FileReaddirenter).Readdirent(ctx)
}

func (d *openDir) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	return d.FileHandle.(gofs.FileSeekdirer).Seekdir(ctx, off)
}

func (d *openDir) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno {
	return d.FileHandle.(gofs.FileFsyncdirer).Fsyncdir(ctx, flags)
}

func (d *openDir) Ioctl(ctx context.Context, cmd uint32, arg uint64, input, output []byte) (int32, syscall.Errno) {
	return d.FileHandle.(gofs.FileIoctler).Ioctl(ctx, cmd, arg, input, output)
}

func (d *openDir) Releasedir(ctx context.Context, flags uint32) {
	d.FileHandle.(gofs.FileReleasedirer).Releasedir(ctx, flags)
	n := d.n
	n.heldMu.Lock()
	defer n.heldMu.Unlock()
	if n.holds--; n.holds == 0 {
		unix.Close(n.held)
	}
}

// Mknod makes special files (not journaled: nothing a replica carries),
// owned by the caller.
func (n *node) Mknod(ctx context.Context, name string, mode, rdev uint32, out *fuse.EntryOut) (_ *gofs.Inode, errno syscall.Errno) {
	defer n.r.stats.count(opMknod, &errno)
	rel, live := n.child(name)
	switch {
	case !live:
		return nil, syscall.ENOENT
	case n.r.core.Hidden(rel):
		return nil, syscall.EPERM
	}
	t := n.r.tree()
	if err := t.Mknod(rel, mode, int(rdev)); err != nil {
		return nil, gofs.ToErrno(err)
	}
	caller(ctx).Own(t, rel)
	st, btime, err := n.r.statx(rel)
	if err != nil {
		t.Unlink(rel)
		return nil, gofs.ToErrno(err)
	}
	out.Attr.FromStat(st)
	return n.newChild(ctx, st, btime), 0
}

// Tmpfile is O_TMPFILE in n: an unnamed file, which the journal never
// sees unless it is linked in (and LINK refuses a nameless node).
func (n *node) Tmpfile(ctx context.Context, flags uint32, mode uint32, out *fuse.EntryOut) (_ *gofs.Inode, _ gofs.FileHandle, _ uint32, errno syscall.Errno) {
	defer n.r.stats.count(opTmpfile, &errno)
	rel, errno := n.relLive()
	if errno != 0 {
		return nil, nil, 0, errno
	}
	fd, err := n.r.tree().OpenFD(rel, int(flags&^syscall.O_APPEND)|unix.O_TMPFILE, mode)
	if err != nil {
		return nil, nil, 0, gofs.ToErrno(err)
	}
	caller(ctx).OwnFD(n.r.tree(), rel, fd)
	var x unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_BASIC_STATS|unix.STATX_BTIME, &x); err != nil {
		unix.Close(fd)
		return nil, nil, 0, gofs.ToErrno(err)
	}
	st := statOfStatx(&x)
	out.FromStat(st)
	return n.newChild(ctx, st, x.Btime), gofs.NewLoopbackFile(fd), 0, 0
}

func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	rel, errno := n.relLive()
	if errno != 0 {
		return errno
	}
	var s syscall.Statfs_t
	if err := n.r.tree().WithPath(rel, func(p string) error { return syscall.Statfs(p, &s) }); err != nil {
		return gofs.ToErrno(err)
	}
	out.FromStatfsT(&s)
	return 0
}

// xattr runs one of the l*xattr calls, which have no *at form, on a path
// naming the node's backing file.
func (n *node) xattr(fn func(p string) (int, error)) (int, syscall.Errno) {
	rel, errno := n.relLive()
	if errno != 0 {
		return 0, errno
	}
	var sz int
	err := n.r.tree().WithPath(rel, func(p string) (err error) {
		sz, err = fn(p)
		return err
	})
	return sz, gofs.ToErrno(err)
}

func (n *node) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	sz, errno := n.xattr(func(p string) (int, error) { return unix.Lgetxattr(p, attr, dest) })
	return uint32(sz), errno
}

func (n *node) Listxattr(ctx context.Context, dest []byte) (uint32, syscall.Errno) {
	sz, errno := n.xattr(func(p string) (int, error) { return unix.Llistxattr(p, dest) })
	return uint32(sz), errno
}

func (n *node) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	_, errno := n.xattr(func(p string) (int, error) { return 0, unix.Lsetxattr(p, attr, data, int(flags)) })
	return errno
}

func (n *node) Removexattr(ctx context.Context, attr string) syscall.Errno {
	_, errno := n.xattr(func(p string) (int, error) { return 0, unix.Lremovexattr(p, attr) })
	return errno
}
