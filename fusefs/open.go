package fusefs

import (
	"context"
	"errors"
	"syscall"

	"github.com/cmfs-project/cmfs/protect"
	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (_ *gofs.Inode, _ gofs.FileHandle, _ uint32, errno syscall.Errno) {
	defer n.r.stats.count(opCreate, &errno)
	rel, live := n.child(name)
	if !live {
		return nil, nil, 0, syscall.ENOENT
	}
	flags &^= syscall.O_APPEND
	h, err := n.r.core.Create(ctx, rel, flags, mode, caller(ctx))
	if errors.Is(err, syscall.EEXIST) && flags&syscall.O_EXCL == 0 {
		return n.createExisting(ctx, name, flags, out)
	}
	if err != nil {
		return nil, nil, 0, toErrno(err)
	}
	ch, errno := n.lookup(ctx, name, out)
	if errno != 0 {
		h.Abort(rel)
		return nil, nil, 0, errno
	}
	cn := ch.Operations().(*node)
	cn.mu.Lock()
	defer cn.mu.Unlock()
	fh, fuseFlags := cn.register(h)
	return ch, fh, fuseFlags, 0
}

// createExisting is O_CREAT without O_EXCL of a file that exists: an open,
// with the protection an open for writing gets.
func (n *node) createExisting(ctx context.Context, name string, flags uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	ch, errno := n.Lookup(ctx, name, out)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	fh, fuseFlags, errno := ch.Operations().(*node).open(ctx, flags)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(fh.(*file).h.File().Fd()), &st); err == nil {
		out.Attr.FromStat(&st)
	}
	return ch, fh, fuseFlags, 0
}

func (n *node) Open(ctx context.Context, flags uint32) (_ gofs.FileHandle, _ uint32, errno syscall.Errno) {
	defer n.r.stats.count(opOpen, &errno)
	return n.open(ctx, flags)
}

// open is Open, uncounted: createExisting's too.
func (n *node) open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	flags &^= syscall.O_APPEND | fuse.FMODE_EXEC
	rel, live := n.rel()
	if !live {
		return nil, 0, syscall.ENOENT
	}
	if flags&syscall.O_ACCMODE == syscall.O_RDONLY && flags&syscall.O_TRUNC == 0 {
		// A read changes nothing: only its registration needs the lock,
		// so readers of one file do not wait on each other's open.
		swap := n.swapped.Load()
		h, err := n.r.core.Open(ctx, rel, flags, protect.Use{}, protect.Prepared{}, n)
		if err != nil {
			return nil, 0, toErrno(err)
		}
		n.mu.Lock()
		defer n.mu.Unlock()
		if n.swapped.Load() != swap {
			// A truncation put a new inode at the path while this open
			// was under way, and it may have opened the old one, now in
			// cmroot. Registered, its backing file would be every later
			// handle's of the node (go-fuse keeps one per node), and
			// their writes would land in the original cmroot keeps. Open
			// again under the lock, where no replacement runs.
			h.Release()
			h.File().Close()
			if h, err = n.r.core.Open(ctx, rel, flags, protect.Use{}, protect.Prepared{}, n); err != nil {
				return nil, 0, toErrno(err)
			}
		}
		fh, fuseFlags := n.register(h)
		return fh, fuseFlags, 0
	}
	p := n.r.core.Prepare(rel, flags&syscall.O_TRUNC != 0)
	n.mu.Lock()
	defer n.mu.Unlock()
	use := p.Use(n.use) // see protect.Core.Gate
	h, err := n.r.core.Open(ctx, rel, flags, use, p, n)
	if err != nil {
		return nil, 0, toErrno(err)
	}
	if flags&syscall.O_TRUNC != 0 && n.r.kills.of(ctx) {
		// Truncated by a caller without CAP_FSETID (setid.go).
		if err := clearSetID(h.File()); err != nil {
			h.Release()
			h.File().Close()
			return nil, 0, toErrno(err)
		}
	}
	fh, fuseFlags := n.register(h)
	return fh, fuseFlags, 0
}

// register makes h a handle of the node and returns it with the flags of
// its open; n.mu must be held by the caller. The handles of a set-ID file
// are not passed through to the kernel, so that the daemon sees their
// writes; the kernel refuses to mix the two kinds on an inode it passes
// through, so every handle opened while others are open is of their kind
// (setid.go).
func (n *node) register(h *protect.Handle) (*file, uint32) {
	f := &file{LoopbackFile: gofs.NewLoopbackFileFromOS(h.File()), h: h, n: n}
	n.countMu.Lock()
	defer n.countMu.Unlock()
	var st syscall.Stat_t
	switch {
	case n.opens > n.direct:
	case n.direct > 0:
		f.direct = true
	default:
		f.direct = syscall.Fstat(int(h.File().Fd()), &st) == nil && setIDClearable(st.Mode)
	}
	n.opens++
	if h.Writes() {
		n.writers++
	}
	if f.direct {
		n.direct++
		return f, fuse.FOPEN_DIRECT_IO
	}
	return f, 0
}

func (n *node) Setattr(ctx context.Context, f gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) (errno syscall.Errno) {
	size, ok := in.GetSize()
	o := opSetattr
	if ok {
		o = opTruncate
	}
	defer n.r.stats.count(o, &errno)
	rel, live := n.rel()
	if !ok || !live {
		return n.setattr(ctx, f, in, out)
	}
	fh, _ := f.(*file)
	var h *protect.Handle
	if fh != nil {
		h = fh.h
	}
	p := n.r.core.Prepare(rel, h == nil && size == 0)
	n.mu.Lock()
	use := p.Use(n.use) // see protect.Core.Gate
	err := n.r.core.Truncate(ctx, rel, size, h, use, p, n)
	n.mu.Unlock()
	if err == nil && in.Valid&fuse.FATTR_KILL_SUIDGID != 0 {
		// Truncated by a caller without CAP_FSETID (setid.go).
		if h != nil {
			err = clearSetID(h.File())
		} else {
			err = clearSetIDAt(n.r.tree(), rel)
		}
	}
	if err != nil {
		return toErrno(err)
	}
	// The size is set; the other attributes, if any, follow.
	in.Valid &^= fuse.FATTR_SIZE
	return n.setattr(ctx, f, in, out)
}

// file is an open file of the mount: go-fuse's loopback file over the
// core's handle, which journals the new content at close.
type file struct {
	*gofs.LoopbackFile
	h *protect.Handle
	n *node
	// direct: the kernel does not pass this handle through (setid.go).
	direct bool
}

var (
	_ = (gofs.FileWriter)((*file)(nil))
	_ = (gofs.FileFlusher)((*file)(nil))
	_ = (gofs.FileFsyncer)((*file)(nil))
	_ = (gofs.FileReleaser)((*file)(nil))
	_ = (gofs.FilePassthroughFder)((*file)(nil))
)

// Write is a write the kernel did not pass through: it clears the
// file's set-ID bits first where the kernel says the caller must lose
// them (setid.go).
func (f *file) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	if f.n.r.kills.of(ctx) {
		if err := clearSetID(f.h.File()); err != nil {
			return 0, toErrno(err)
		}
	}
	return f.LoopbackFile.Write(ctx, data, off)
}

func (f *file) Flush(ctx context.Context) (errno syscall.Errno) {
	defer f.n.r.stats.count(opFlush, &errno)
	if errno := f.LoopbackFile.Flush(ctx); errno != 0 {
		return errno
	}
	rel, live := f.n.rel()
	return toErrno(f.h.Flush(ctx, rel, live))
}

func (f *file) Fsync(ctx context.Context, flags uint32) (errno syscall.Errno) {
	defer f.n.r.stats.count(opFsync, &errno)
	return toErrno(f.h.Fsync(func() error {
		if errno := f.LoopbackFile.Fsync(ctx, flags); errno != 0 {
			return errno
		}
		return nil
	}))
}

func (f *file) Release(ctx context.Context) (errno syscall.Errno) {
	defer f.n.r.stats.count(opRelease, &errno)
	f.h.Release()
	// Counted out without the node's lock (see node.opens).
	f.n.countMu.Lock()
	f.n.opens--
	if f.h.Writes() {
		f.n.writers--
	}
	if f.direct {
		f.n.direct--
	}
	f.n.countMu.Unlock()
	return f.LoopbackFile.Release(ctx)
}
