package fusefs

import (
	"context"
	"path"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/cmfs-project/cmfs/protect"
	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// node is one file or directory of the mount: a go-fuse loopback node whose
// every operation that could destroy content goes through the protection
// core (package protect) with paths relative to the backing directory.
type node struct {
	*gofs.LoopbackNode
	r *root

	mu sync.Mutex
	// The handles open on this node. One is counted in under mu and out
	// without it (file.Release), so that a release never waits for a
	// change holding mu through its durable event: while mu is held the
	// counts can fall, never rise. A file seen unused stays so; one seen
	// written may have stopped: the safe side of every decision made by
	// them (protect.Use).
	countMu sync.Mutex
	opens   int
	writers int // of which opened for writing
	direct  int // of which not passed through to the kernel (setid.go)

	// held is the directory itself, open (O_PATH) while the node has
	// directory handles open (holds of them): see openDir.
	heldMu sync.Mutex
	held   int
	holds  int

	// swapped is the backing inode number now behind this node when cmfs
	// replaced the inode at its path (O_TRUNC, truncate to 0): the node
	// keeps its identity, so the kernel and go-fuse keep one node per
	// inode (root.swaps). 0 when the node's identity is its backing inode.
	swapped atomic.Uint64
}

var (
	_ = (gofs.NodeWrapChilder)((*node)(nil))
	_ = (gofs.NodeOnForgetter)((*node)(nil))
	_ = (gofs.NodeLookuper)((*node)(nil))
	_ = (gofs.NodeOpendirHandler)((*node)(nil))
	_ = (gofs.NodeMkdirer)((*node)(nil))
	_ = (gofs.NodeRmdirer)((*node)(nil))
	_ = (gofs.NodeUnlinker)((*node)(nil))
	_ = (gofs.NodeRenamer)((*node)(nil))
	_ = (gofs.NodeLinker)((*node)(nil))
	_ = (gofs.NodeSymlinker)((*node)(nil))
	_ = (gofs.NodeMknoder)((*node)(nil))
	_ = (gofs.NodeCreater)((*node)(nil))
	_ = (gofs.NodeOpener)((*node)(nil))
	_ = (gofs.NodeSetattrer)((*node)(nil))
	_ = (gofs.NodeGetattrer)((*node)(nil))
	_ = (gofs.NodeStatxer)((*node)(nil))
	_ = (gofs.NodeTmpfiler)((*node)(nil))
	_ = (gofs.NodeCopyFileRanger)((*node)(nil))
)

// WrapChild makes every node go-fuse creates below the root a *node.
func (n *node) WrapChild(ctx context.Context, ops gofs.InodeEmbedder) gofs.InodeEmbedder {
	return &node{LoopbackNode: ops.(*gofs.LoopbackNode), r: n.r}
}

// rel returns the node's path relative to the backing root, and false for
// a node that is no longer in the tree.
func (n *node) rel() (string, bool) {
	if n.IsRoot() {
		return "", true
	}
	if _, parent := n.Parent(); parent == nil {
		return "", false
	}
	return n.Path(n.Root()), true
}

// child returns the path of name in n relative to the backing root, and
// false when n is no longer in the tree.
func (n *node) child(name string) (string, bool) {
	dir, live := n.rel()
	if !live {
		return "", false
	}
	return path.Join(dir, name), true
}

// childNode returns the node go-fuse holds for name, if any.
func (n *node) childNode(name string) *node {
	if ch := n.GetChild(name); ch != nil {
		if cn, ok := ch.Operations().(*node); ok {
			return cn
		}
	}
	return nil
}

// use returns how the node is in use; n.mu must be held.
func (n *node) use() protect.Use {
	n.countMu.Lock()
	defer n.countMu.Unlock()
	return protect.Use{Opens: n.opens, Writers: n.writers}
}

// lockChild locks the node go-fuse holds for name, if any, and returns
// its use, which can only fall until unlock.
func (n *node) lockChild(name string) (u protect.Use, unlock func()) {
	ch := n.childNode(name)
	if ch == nil {
		return protect.Use{}, func() {}
	}
	ch.mu.Lock()
	return ch.use(), ch.mu.Unlock
}

// caller is who asked for the operation in ctx.
func caller(ctx context.Context) protect.Caller {
	if c, ok := fuse.FromContext(ctx); ok {
		return protect.Caller{Uid: c.Uid, Gid: c.Gid, Known: true}
	}
	return protect.Caller{}
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	rel, live := n.child(name)
	if !live || n.r.core.Hidden(rel) {
		return nil, syscall.ENOENT
	}
	// An inode cmfs swapped in belongs to the node that was there, under
	// every name it has.
	if sn, st := n.r.swappedNode(rel); sn != nil {
		out.Attr.FromStat(st)
		out.Ino = sn.StableAttr().Ino
		return sn.EmbeddedInode(), 0
	}
	return n.lookup(ctx, name, out)
}

// OnForget drops the node's swapped inode from the root's table.
func (n *node) OnForget() {
	if ino := n.swapped.Load(); ino != 0 {
		n.r.swapMu.Lock()
		if e, ok := n.r.swaps[ino]; ok && e.n == n {
			delete(n.r.swaps, ino)
		}
		n.r.swapMu.Unlock()
	}
}

func (n *node) OpendirHandle(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	dir, live := n.rel()
	if !live {
		return nil, 0, syscall.ENOENT
	}
	if !n.r.core.HidesIn(dir) {
		return n.openDir(dir)
	}
	entries, err := n.r.tree().ReadDir(dir)
	if err != nil {
		return nil, 0, toErrno(err)
	}
	list := make([]fuse.DirEntry, 0, len(entries))
	for _, e := range entries {
		if n.r.core.Hidden(path.Join(dir, e.Name())) {
			continue
		}
		var st syscall.Stat_t
		if err := n.r.tree().Lstat(path.Join(dir, e.Name()), &st); err != nil {
			continue // raced with a removal
		}
		list = append(list, fuse.DirEntry{Name: e.Name(), Mode: st.Mode, Ino: st.Ino})
	}
	return &listDir{list: list}, 0, 0
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (_ *gofs.Inode, errno syscall.Errno) {
	defer n.r.stats.count(opMkdir, &errno)
	rel, live := n.child(name)
	if !live {
		return nil, syscall.ENOENT
	}
	if err := n.r.core.Mkdir(ctx, rel, mode, caller(ctx)); err != nil {
		return nil, toErrno(err)
	}
	return n.lookup(ctx, name, out)
}

func (n *node) Rmdir(ctx context.Context, name string) (errno syscall.Errno) {
	defer n.r.stats.count(opRmdir, &errno)
	rel, live := n.child(name)
	if !live {
		return syscall.ENOENT
	}
	return toErrno(n.r.core.Rmdir(ctx, rel))
}

func (n *node) Unlink(ctx context.Context, name string) (errno syscall.Errno) {
	defer n.r.stats.count(opUnlink, &errno)
	rel, live := n.child(name)
	if !live {
		return syscall.ENOENT
	}
	u, unlock := n.lockChild(name)
	defer unlock()
	return toErrno(n.r.core.Unlink(ctx, rel, u))
}

func (n *node) Rename(ctx context.Context, name string, newParent gofs.InodeEmbedder, newName string, flags uint32) (errno syscall.Errno) {
	defer n.r.stats.count(opRename, &errno)
	np, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	oldRel, live := n.child(name)
	newRel, newLive := np.child(newName)
	if !live || !newLive {
		return syscall.ENOENT
	}
	u, unlock := np.lockChild(newName)
	defer unlock()
	return toErrno(n.r.core.Rename(ctx, oldRel, newRel, flags, u))
}

func (n *node) Link(ctx context.Context, target gofs.InodeEmbedder, name string, out *fuse.EntryOut) (_ *gofs.Inode, errno syscall.Errno) {
	defer n.r.stats.count(opLink, &errno)
	rel, live := n.child(name)
	if !live {
		return nil, syscall.ENOENT
	}
	tn, ok := target.(*node)
	if !ok {
		return nil, syscall.EXDEV
	}
	trel, live := tn.rel()
	if !live {
		// An O_TMPFILE file or an unlinked one: LINK names no path.
		return nil, syscall.EXDEV
	}
	st, err := n.r.core.Link(ctx, trel, rel)
	if err != nil {
		return nil, toErrno(err)
	}
	out.Attr.FromStat(st)
	out.Ino = tn.StableAttr().Ino
	// A second name of the same inode is the same node.
	return tn.EmbeddedInode(), 0
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (_ *gofs.Inode, errno syscall.Errno) {
	defer n.r.stats.count(opSymlink, &errno)
	rel, live := n.child(name)
	if !live {
		return nil, syscall.ENOENT
	}
	if err := n.r.core.Symlink(ctx, target, rel, caller(ctx)); err != nil {
		return nil, toErrno(err)
	}
	return n.lookup(ctx, name, out)
}

func (n *node) CopyFileRange(ctx context.Context, fhIn gofs.FileHandle, offIn uint64, out *gofs.Inode, fhOut gofs.FileHandle, offOut uint64, len uint64, flags uint64) (uint32, syscall.Errno) {
	in, ok1 := fhIn.(*file)
	o, ok2 := fhOut.(*file)
	if !ok1 || !ok2 {
		return 0, syscall.ENOTSUP
	}
	return n.LoopbackNode.CopyFileRange(ctx, in.LoopbackFile, offIn, out, o.LoopbackFile, offOut, len, flags)
}

// listDir is a directory listing with hidden entries filtered out.
type listDir struct {
	list []fuse.DirEntry
	pos  int
}

var (
	_ = (gofs.FileReaddirenter)((*listDir)(nil))
	_ = (gofs.FileSeekdirer)((*listDir)(nil))
)

func (d *listDir) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	if d.pos >= len(d.list) {
		return nil, 0
	}
	e := d.list[d.pos]
	d.pos++
	e.Off = uint64(d.pos)
	return &e, 0
}

func (d *listDir) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	d.pos = int(off)
	return 0
}
