package fs

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"unicode/utf8"

	"github.com/cmfs-project/cmfs/cmroot"
	"github.com/cmfs-project/cmfs/journal"
	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// node is one file or directory of the mount: a go-fuse loopback node with
// protection on every operation that could destroy content.
type node struct {
	*gofs.LoopbackNode
	r *root

	mu      sync.Mutex
	opens   int // handles open on this node
	writers int // of which opened for writing

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

// child returns the mount-relative and backing paths of name in n. When n
// is no longer in the tree both are empty, and every syscall on them
// fails with ENOENT.
func (n *node) child(name string) (rel, abs string) {
	dir, live := n.rel()
	if !live {
		return "", ""
	}
	rel = path.Join(dir, name)
	return rel, n.r.abs(rel)
}

// lockChild returns the node go-fuse holds for name, locked, or nil.
func (n *node) lockChild(name string) *node {
	ch := n.childNode(name)
	if ch != nil {
		ch.mu.Lock()
	}
	return ch
}

// leaving says how to preserve the file st, whose node (locked, or nil)
// is ch, as its name goes away: by h, unless the inode can still change
// after — it is open for writing, or has other links — and a cmroot entry
// must never be such an inode: then by copy.
func (r *root) leaving(ch *node, st *syscall.Stat_t, h how) how {
	switch {
	case ch != nil && ch.writers > 0:
		return byCopy
	case r.treeLinks(st) > 1:
		return byCopyIdle
	}
	return h
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

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	rel, abs := n.child(name)
	if n.r.isHidden(rel) {
		return nil, syscall.ENOENT
	}
	// An inode cmfs swapped in belongs to the node that was there, under
	// every name it has.
	if sn, st := n.r.swappedNode(abs); sn != nil {
		out.Attr.FromStat(st)
		out.Ino = sn.StableAttr().Ino
		return sn.EmbeddedInode(), 0
	}
	return n.LoopbackNode.Lookup(ctx, name, out)
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
	hides := false
	for h := range n.r.hidden {
		if path.Dir(h) == dir || (dir == "" && path.Dir(h) == ".") {
			hides = true
		}
	}
	if !hides || !live {
		return n.LoopbackNode.OpendirHandle(ctx, flags)
	}
	entries, err := os.ReadDir(n.r.abs(dir))
	if err != nil {
		return nil, 0, toErrno(err)
	}
	list := make([]fuse.DirEntry, 0, len(entries))
	for _, e := range entries {
		if n.r.isHidden(path.Join(dir, e.Name())) {
			continue
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(n.r.abs(dir), e.Name()), &st); err != nil {
			continue // raced with a removal
		}
		list = append(list, fuse.DirEntry{Name: e.Name(), Mode: st.Mode, Ino: st.Ino})
	}
	return &listDir{list: list}, 0, 0
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	rel, abs := n.child(name)
	if n.r.isHidden(rel) {
		return nil, syscall.EPERM
	}
	if errno := n.r.journalable(rel); errno != 0 {
		return nil, errno
	}
	if n.r.excluded(rel) {
		return n.LoopbackNode.Mkdir(ctx, name, mode, out)
	}
	in := intent{Type: journal.Mkdir, Path: rel}
	slot, done, err := n.r.intend(&in)
	if err != nil {
		return nil, toErrno(err)
	}
	defer done()
	ch, errno := n.LoopbackNode.Mkdir(ctx, name, mode, out)
	if errno != 0 {
		return nil, errno
	}
	if err := n.r.emit(ctx, dirEvent(true, rel)); err != nil {
		if syscall.Rmdir(abs) != nil {
			n.r.keep(slot, in)
		}
		return nil, toErrno(err)
	}
	return ch, 0
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	rel, abs := n.child(name)
	if n.r.isHidden(rel) {
		return syscall.ENOENT
	}
	if errno := n.r.journalable(rel); errno != 0 {
		return errno
	}
	if n.r.excluded(rel) {
		return toErrno(syscall.Rmdir(abs))
	}
	in := intent{Type: journal.Rmdir, Path: rel}
	slot, done, err := n.r.intend(&in)
	if err != nil {
		return toErrno(err)
	}
	defer done()
	var st syscall.Stat_t
	if err := syscall.Lstat(abs, &st); err != nil {
		return toErrno(err)
	}
	if err := syscall.Rmdir(abs); err != nil {
		return toErrno(err)
	}
	if err := n.r.emit(ctx, dirEvent(false, rel)); err != nil {
		// Put the empty directory back as it was.
		if syscall.Mkdir(abs, st.Mode&07777) != nil || syscall.Lchown(abs, int(st.Uid), int(st.Gid)) != nil {
			n.r.keep(slot, in)
		}
		return toErrno(err)
	}
	return 0
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	rel, abs := n.child(name)
	if n.r.isHidden(rel) {
		return syscall.ENOENT
	}
	if errno := n.r.journalable(rel); errno != 0 {
		return errno
	}
	if n.r.excluded(rel) {
		return toErrno(syscall.Unlink(abs))
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(abs, &st); err != nil {
		return toErrno(err)
	}
	in := intent{Type: journal.Delete, Path: rel}
	slot, done, err := n.r.intend(&in)
	if err != nil {
		return toErrno(err)
	}
	defer done()
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		target, _ := os.Readlink(abs)
		if err := syscall.Unlink(abs); err != nil {
			return toErrno(err)
		}
		if err := n.r.emit(ctx, fileEvent(journal.Delete, rel)); err != nil {
			if st.Mode&syscall.S_IFMT != syscall.S_IFLNK || syscall.Symlink(target, abs) != nil {
				n.r.keep(slot, in)
			}
			return toErrno(err)
		}
		return 0
	}
	ch := n.lockChild(name)
	if ch != nil {
		defer ch.mu.Unlock()
	}
	h := n.r.leaving(ch, &st, byMove)
	if h == byMove {
		// The move is the unlink: name its entry before it happens.
		if sum, cur, err := n.r.sumPath(abs); err == nil {
			in.Orig = &journal.File{Path: rel, Size: cur.Size, XXH64: sum, CM: cmroot.Name(sum, cur.Size)}
			if err := n.r.inflight.update(slot, &in); err != nil {
				return toErrno(err)
			}
		}
	}
	orig, err := n.r.preserve(abs, h)
	if err != nil {
		return toErrno(err)
	}
	orig.Path = rel
	if err := n.r.intendOrig(slot, &in, rel, orig); err != nil {
		if n.r.undo(orig, abs) != nil {
			n.r.keep(slot, in)
		}
		return toErrno(err)
	}
	if h != byMove {
		if err := syscall.Unlink(abs); err != nil {
			n.r.undo(orig, "")
			return toErrno(err)
		}
	}
	if err := n.r.emit(ctx, fileEvent(journal.Delete, rel, orig.File)); err != nil {
		if n.r.undo(orig, abs) != nil {
			n.r.keep(slot, in)
		}
		return toErrno(err)
	}
	n.r.unlinkedName(rel, &st)
	return 0
}

func (n *node) Rename(ctx context.Context, name string, newParent gofs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	np, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	oldRel, oldAbs := n.child(name)
	newRel, newAbs := np.child(newName)
	if n.r.isHidden(oldRel) || n.r.isHidden(newRel) {
		return syscall.EPERM
	}
	if errno := n.r.journalable(oldRel, newRel); errno != 0 {
		return errno
	}
	oldEx, newEx := n.r.excluded(oldRel), n.r.excluded(newRel)
	in := intent{Type: journal.Rename, Path: oldRel, NewPath: newRel}
	switch {
	case oldEx && newEx:
		in.Type = ""
	case oldEx:
		in = intent{Type: journal.Write, Path: newRel} // arriving content
	case newEx:
		in = intent{Type: journal.Delete, Path: oldRel} // leaving the tree
	}
	slot := -1
	if in.Type != "" {
		var done func()
		var err error
		if slot, done, err = n.r.intend(&in); err != nil {
			return toErrno(err)
		}
		defer done()
	}

	var src, tst syscall.Stat_t
	if err := syscall.Lstat(oldAbs, &src); err != nil {
		return toErrno(err)
	}
	targetExists := syscall.Lstat(newAbs, &tst) == nil
	if targetExists && tst.Ino == src.Ino && tst.Dev == src.Dev && flags&unix.RENAME_EXCHANGE == 0 {
		// Two names of one inode: rename(2) does nothing, and so do we.
		return toErrno(unix.Renameat2(unix.AT_FDCWD, oldAbs, unix.AT_FDCWD, newAbs, uint(flags)))
	}
	// Leaving the protected tree for scratch space is a delete: keep the
	// originals before they become unprotected.
	var events []*journal.Event
	var kept []preserved
	if !oldEx && newEx {
		var err error
		if events, kept, err = n.r.preserveTree(oldAbs, oldRel); err != nil {
			return toErrno(err)
		}
	}
	// The replaced target, if any.
	var target *preserved
	if flags&unix.RENAME_NOREPLACE == 0 && flags&unix.RENAME_EXCHANGE == 0 && !newEx &&
		targetExists && isReg(&tst) && src.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		ch := np.lockChild(newName)
		if ch != nil {
			defer ch.mu.Unlock()
		}
		p, err := n.r.preserve(newAbs, n.r.leaving(ch, &tst, byLink))
		if err != nil {
			n.r.undoAll(kept)
			return toErrno(err)
		}
		p.Path = newRel
		target = &p
		if err := n.r.intendOrig(slot, &in, newRel, p); err != nil {
			n.r.undo(p, "")
			n.r.undoAll(kept)
			return toErrno(err)
		}
	}
	// Should the event not be journaled, the rename is undone: the
	// replaced inode is held by a second name until then.
	var hold string
	if targetExists && !newEx && flags&(unix.RENAME_NOREPLACE|unix.RENAME_EXCHANGE) == 0 &&
		tst.Mode&syscall.S_IFMT != syscall.S_IFDIR && n.r.tmpDir != "" {
		hold = n.r.tmpName("hold")
		if err := syscall.Link(newAbs, hold); err != nil {
			if target != nil {
				n.r.undo(*target, "")
			}
			n.r.undoAll(kept)
			return toErrno(err)
		}
		defer os.Remove(hold)
	}
	if err := unix.Renameat2(unix.AT_FDCWD, oldAbs, unix.AT_FDCWD, newAbs, uint(flags)); err != nil {
		if target != nil {
			n.r.undo(*target, "")
		}
		n.r.undoAll(kept)
		return toErrno(err)
	}
	// fail undoes the rename after err, or keeps its intent if it cannot.
	fail := func(err error) syscall.Errno {
		if n.r.unrename(oldAbs, newAbs, flags, targetExists, &tst, hold, target) != nil {
			n.r.keep(slot, in)
			return toErrno(err)
		}
		if target != nil {
			n.r.undo(*target, "")
		}
		n.r.undoAll(kept)
		return toErrno(err)
	}
	n.r.renamedNames(oldRel, newRel, &src, &tst, targetExists && flags&unix.RENAME_NOREPLACE == 0, newEx, flags)
	switch {
	case oldEx && newEx:
		return 0
	case oldEx:
		// Arriving from scratch space: the content is new to the tree.
		var err error
		if events, err = n.r.arrivals(newAbs, newRel); err != nil {
			return fail(err)
		}
		if restoring(oldRel) {
			for _, e := range events {
				if e.Type == journal.Insert || e.Type == journal.Write {
					e.Type = journal.Restore
				}
			}
		}
		if target != nil && len(events) > 0 {
			events[0].Files = append(events[0].Files, target.File)
		}
	case newEx:
		// events were built before the rename.
	default:
		e := renameEvent(oldRel, newRel, &src)
		if src.Mode&syscall.S_IFMT == syscall.S_IFREG {
			sum, st, err := n.r.sumPath(newAbs)
			if err != nil {
				return fail(err)
			}
			e.Files = append(e.Files, journal.File{Path: newRel, Size: st.Size, XXH64: sum})
		}
		if target != nil {
			e.Files = append(e.Files, target.File)
		}
		if flags&unix.RENAME_EXCHANGE != 0 {
			e.Target = "exchange"
		}
		events = append(events, e)
	}
	if err := n.r.emit(ctx, events...); err != nil {
		return fail(err)
	}
	return 0
}

// unrename undoes a rename of oldAbs to newAbs: the renamed object goes
// back, and what it replaced (st, when existed) is put back from hold,
// its second name, or else from its cmroot entry target.
func (r *root) unrename(oldAbs, newAbs string, flags uint32, existed bool, st *syscall.Stat_t, hold string, target *preserved) error {
	if flags&unix.RENAME_EXCHANGE != 0 {
		return unix.Renameat2(unix.AT_FDCWD, newAbs, unix.AT_FDCWD, oldAbs, unix.RENAME_EXCHANGE)
	}
	if err := unix.Renameat2(unix.AT_FDCWD, newAbs, unix.AT_FDCWD, oldAbs, unix.RENAME_NOREPLACE); err != nil {
		return err
	}
	switch {
	case !existed:
		return nil
	case hold != "":
		return unix.Renameat2(unix.AT_FDCWD, hold, unix.AT_FDCWD, newAbs, unix.RENAME_NOREPLACE)
	case st.Mode&syscall.S_IFMT == syscall.S_IFDIR:
		if err := syscall.Mkdir(newAbs, st.Mode&07777); err != nil {
			return err
		}
		return syscall.Lchown(newAbs, int(st.Uid), int(st.Gid))
	case target != nil:
		return r.cm.Restore(target.CM, newAbs)
	}
	return fmt.Errorf("rename: cannot put back what %s replaced", newAbs)
}

// renameEvent types a rename by what moved: a database, table or
// partition directory renamed within its level, or anything else.
func renameEvent(oldRel, newRel string, st *syscall.Stat_t) *journal.Event {
	loc := journal.Locate(oldRel)
	t := journal.Rename
	if st.Mode&syscall.S_IFMT == syscall.S_IFDIR && journal.Locate(newRel).Level == loc.Level {
		switch loc.Level {
		case journal.Database:
			t = journal.RenameDatabase
		case journal.Table:
			t = journal.RenameTable
		case journal.Partition:
			t = journal.RenamePartition
		}
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		loc = journal.Locate(path.Dir(oldRel))
	}
	return &journal.Event{Type: t, Path: oldRel, NewPath: newRel, DB: loc.DB, Table: loc.Table, Partition: loc.Partition}
}

func (n *node) Link(ctx context.Context, target gofs.InodeEmbedder, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	rel, abs := n.child(name)
	if n.r.isHidden(rel) {
		return nil, syscall.EPERM
	}
	if errno := n.r.journalable(rel); errno != 0 {
		return nil, errno
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
	if !n.r.excluded(rel) && !utf8.ValidString(trel) {
		return nil, syscall.EILSEQ
	}
	if !n.r.excluded(rel) {
		_, done, err := n.r.intend(&intent{Type: journal.Link, Path: trel, NewPath: rel})
		if err != nil {
			return nil, toErrno(err)
		}
		defer done()
	}
	if err := syscall.Link(n.r.abs(trel), abs); err != nil {
		return nil, toErrno(err)
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(abs, &st); err != nil {
		syscall.Unlink(abs)
		return nil, toErrno(err)
	}
	out.Attr.FromStat(&st)
	out.Ino = tn.StableAttr().Ino
	n.r.linkedName(trel, rel, &st)
	// A second name of the same inode is the same node.
	if n.r.excluded(rel) {
		return tn.EmbeddedInode(), 0
	}
	e := fileEvent(journal.Link, trel)
	e.NewPath = rel
	if isReg(&st) {
		sum, st, err := n.r.sumPath(abs)
		if err != nil {
			syscall.Unlink(abs)
			return nil, toErrno(err)
		}
		e.Files = []journal.File{{Path: rel, Size: st.Size, XXH64: sum}}
	}
	if err := n.r.emit(ctx, e); err != nil {
		syscall.Unlink(abs)
		return nil, toErrno(err)
	}
	return tn.EmbeddedInode(), 0
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	rel, abs := n.child(name)
	if n.r.isHidden(rel) {
		return nil, syscall.EPERM
	}
	if errno := n.r.journalable(rel); errno != 0 {
		return nil, errno
	}
	if !utf8.ValidString(target) && !n.r.excluded(rel) {
		return nil, syscall.EILSEQ
	}
	if n.r.excluded(rel) {
		return n.LoopbackNode.Symlink(ctx, target, name, out)
	}
	_, done, err := n.r.intend(&intent{Type: journal.Symlink, Path: rel, Target: target})
	if err != nil {
		return nil, toErrno(err)
	}
	defer done()
	ch, errno := n.LoopbackNode.Symlink(ctx, target, name, out)
	if errno != 0 {
		return nil, errno
	}
	e := fileEvent(journal.Symlink, rel)
	e.Target = target
	if err := n.r.emit(ctx, e); err != nil {
		syscall.Unlink(abs)
		return nil, toErrno(err)
	}
	return ch, 0
}

func (n *node) Mknod(ctx context.Context, name string, mode, rdev uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if rel, _ := n.child(name); n.r.isHidden(rel) {
		return nil, syscall.EPERM
	}
	return n.LoopbackNode.Mknod(ctx, name, mode, rdev, out)
}

// Getattr reports links that only cmroot holds as absent: to every
// program a preserved file looks deleted.
func (n *node) Getattr(ctx context.Context, f gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if errno := n.LoopbackNode.Getattr(ctx, f, out); errno != 0 {
		return errno
	}
	out.Nlink -= n.r.cmLinks(out.Mode, out.Ino, out.Nlink)
	return 0
}

func (n *node) Statx(ctx context.Context, f gofs.FileHandle, flags, mask uint32, out *fuse.StatxOut) syscall.Errno {
	if errno := n.LoopbackNode.Statx(ctx, f, flags, mask, out); errno != 0 {
		return errno
	}
	out.Nlink -= n.r.cmLinks(uint32(out.Mode), out.Ino, out.Nlink)
	return 0
}

// treeLinks returns how many links a file has outside cmroot.
func (r *root) treeLinks(st *syscall.Stat_t) uint64 {
	return st.Nlink - uint64(r.cmLinks(st.Mode, st.Ino, uint32(st.Nlink)))
}

// cmLinks returns how many of a file's nlink links live in cmroot.
func (r *root) cmLinks(mode uint32, ino uint64, nlink uint32) uint32 {
	if !r.cmSameDev || mode&syscall.S_IFMT != syscall.S_IFREG {
		return 0
	}
	return min(r.cm.Links(ino), nlink)
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
