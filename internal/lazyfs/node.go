package lazyfs

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// node is a loopback node whose regular files' data goes through the
// mount's cache. Everything it does not override passes through.
type node struct {
	*gofs.LoopbackNode
	c *cache
}

var (
	_ = (gofs.NodeWrapChilder)((*node)(nil))
	_ = (gofs.NodeLookuper)((*node)(nil))
	_ = (gofs.NodeGetattrer)((*node)(nil))
	_ = (gofs.NodeSetattrer)((*node)(nil))
	_ = (gofs.NodeOpener)((*node)(nil))
	_ = (gofs.NodeCreater)((*node)(nil))
	_ = (gofs.NodeMknoder)((*node)(nil))
	_ = (gofs.NodeCopyFileRanger)((*node)(nil))
)

func (n *node) WrapChild(ctx context.Context, ops gofs.InodeEmbedder) gofs.InodeEmbedder {
	return &node{LoopbackNode: ops.(*gofs.LoopbackNode), c: n.c}
}

// ino keys the node's overlay.
func (n *node) ino() uint64 { return n.StableAttr().Ino }

// under is the node's path in the underlying directory.
func (n *node) under() string {
	return filepath.Join(n.RootData.Path, n.Path(n.RootData.RootNode.EmbeddedInode()))
}

// patch makes attributes read from the underlying file report the
// overlay's size.
func (c *cache) patch(ino uint64, a *fuse.Attr) {
	if a.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return
	}
	if size, ok := c.size(ino); ok {
		a.Size = uint64(size)
		a.Blocks = (a.Size + 511) / 512
	}
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	ch, errno := n.LoopbackNode.Lookup(ctx, name, out)
	if errno == 0 {
		n.c.patch(ch.StableAttr().Ino, &out.Attr)
	}
	return ch, errno
}

func (n *node) Getattr(ctx context.Context, f gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if errno := n.LoopbackNode.Getattr(ctx, f, out); errno != 0 {
		return errno
	}
	n.c.patch(n.ino(), &out.Attr)
	return 0
}

// Setattr keeps a size change in the overlay and passes the rest through.
func (n *node) Setattr(ctx context.Context, f gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if size, ok := in.GetSize(); ok {
		h, ok := f.(*file)
		if !ok {
			h = &file{ino: n.ino(), c: n.c, path: n.under()}
		}
		if errno := h.truncate(int64(size)); errno != 0 {
			return errno
		}
		rest := *in
		rest.Valid &^= fuse.FATTR_SIZE
		in = &rest
	}
	if errno := n.LoopbackNode.Setattr(ctx, f, in, out); errno != 0 {
		return errno
	}
	n.c.patch(n.ino(), &out.Attr)
	return 0
}

// openFlags are the flags the underlying file is opened with: the kernel
// keeps the offset of an O_APPEND descriptor, and truncation is the
// overlay's.
func openFlags(flags uint32) int {
	return int(flags&^(syscall.O_APPEND|syscall.O_TRUNC|fuse.FMODE_EXEC)) | syscall.O_CLOEXEC
}

func (n *node) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	f, err := os.OpenFile(n.under(), openFlags(flags), 0)
	if err != nil {
		return nil, 0, gofs.ToErrno(err)
	}
	h := &file{f: f, ino: n.ino(), c: n.c}
	if flags&syscall.O_TRUNC != 0 {
		// The kernel sends O_TRUNC as a setattr; this is in case it does not.
		if errno := h.truncate(0); errno != 0 {
			f.Close()
			return nil, 0, errno
		}
	}
	return h, 0, 0
}

// Create creates the file in the underlying directory at once (metadata is
// never lost); a new inode starts with no overlay.
func (n *node) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	p := filepath.Join(n.under(), name)
	f, err := os.OpenFile(p, openFlags(flags)|os.O_CREATE|os.O_EXCL, os.FileMode(mode&0o7777))
	created := err == nil
	if errors.Is(err, os.ErrExist) && flags&syscall.O_EXCL == 0 {
		// Lost a race with another creator: open what is there.
		f, err = os.OpenFile(p, openFlags(flags), 0)
	}
	if err != nil {
		return nil, nil, 0, gofs.ToErrno(err)
	}
	ch, errno := n.LoopbackNode.Lookup(ctx, name, out)
	if errno != 0 {
		f.Close()
		return nil, nil, 0, errno
	}
	h := &file{f: f, ino: ch.StableAttr().Ino, c: n.c}
	if created {
		n.c.forget(h.ino)
	} else if flags&syscall.O_TRUNC != 0 {
		if errno := h.truncate(0); errno != 0 {
			f.Close()
			return nil, nil, 0, errno
		}
	}
	n.c.patch(h.ino, &out.Attr)
	return ch, h, 0, 0
}

func (n *node) Mknod(ctx context.Context, name string, mode, rdev uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	ch, errno := n.LoopbackNode.Mknod(ctx, name, mode, rdev, out)
	if errno == 0 {
		n.c.forget(ch.StableAttr().Ino)
	}
	return ch, errno
}

// CopyFileRange is refused, so the kernel copies with reads and writes
// that go through the overlay.
func (n *node) CopyFileRange(ctx context.Context, fhIn gofs.FileHandle, offIn uint64, out *gofs.Inode, fhOut gofs.FileHandle, offOut uint64, length uint64, flags uint64) (uint32, syscall.Errno) {
	return 0, syscall.EOPNOTSUPP
}

// file is an open regular file (or directory, or special file) of the
// mount.
type file struct {
	f   *os.File
	ino uint64
	c   *cache
	// path names the underlying file of a truncate(2), which has no f.
	path string
}

var (
	_ = (gofs.FileReader)((*file)(nil))
	_ = (gofs.FileWriter)((*file)(nil))
	_ = (gofs.FileFsyncer)((*file)(nil))
	_ = (gofs.FileFlusher)((*file)(nil))
	_ = (gofs.FileReleaser)((*file)(nil))
	_ = (gofs.FileGetattrer)((*file)(nil))
)

func isEOF(err error) bool { return errors.Is(err, io.EOF) }

func (h *file) Read(ctx context.Context, buf []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	n, ok, err := h.c.read(h.ino, buf, off)
	if !ok {
		n, err = h.f.ReadAt(buf, off)
	}
	if err != nil && n == 0 && !isEOF(err) {
		return nil, gofs.ToErrno(err)
	}
	return fuse.ReadResultData(buf[:n]), 0
}

func (h *file) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	var n int
	err := h.withOverlay(func(o *overlay) (err error) {
		n, err = o.WriteAt(data, off)
		return err
	})
	return uint32(n), gofs.ToErrno(err)
}

func (h *file) truncate(size int64) syscall.Errno {
	return gofs.ToErrno(h.withOverlay(func(o *overlay) error {
		o.Truncate(size)
		return nil
	}))
}

func (h *file) withOverlay(fn func(*overlay) error) error {
	fd := -1
	if h.f != nil {
		fd = int(h.f.Fd())
	}
	return h.c.withOverlay(h.ino, fd, h.path, fn)
}

// Fsync makes the file's data durable: the only way here.
func (h *file) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	if err := h.c.sync(h.ino); err != nil {
		return gofs.ToErrno(err)
	}
	return gofs.ToErrno(h.f.Sync())
}

// Flush does nothing: close(2) makes nothing durable.
func (h *file) Flush(ctx context.Context) syscall.Errno { return 0 }

func (h *file) Release(ctx context.Context) syscall.Errno { return gofs.ToErrno(h.f.Close()) }

func (h *file) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	var st syscall.Stat_t
	if err := syscall.Fstat(int(h.f.Fd()), &st); err != nil {
		return gofs.ToErrno(err)
	}
	out.FromStat(&st)
	// The kernel knows the mount's inode numbers, not the underlying ones.
	out.Ino = h.ino
	h.c.patch(h.ino, &out.Attr)
	return 0
}
