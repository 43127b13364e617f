package fs

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/cmfs-project/cmfs/journal"
	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	rel, abs := n.child(name)
	if n.r.isHidden(rel) {
		return nil, nil, 0, syscall.EPERM
	}
	if errno := n.r.journalable(rel); errno != 0 {
		return nil, nil, 0, errno
	}
	flags &^= syscall.O_APPEND
	if !n.r.excluded(rel) {
		// Should the mount die between creating the file and registering
		// its handle, the next mount journals the new file.
		_, done, err := n.r.intend(&intent{Type: journal.Write, Path: rel})
		if err != nil {
			return nil, nil, 0, toErrno(err)
		}
		defer done()
	}
	f, err := os.OpenFile(abs, int(flags)|os.O_CREATE|os.O_EXCL, os.FileMode(mode))
	if err != nil {
		if os.IsExist(err) && flags&syscall.O_EXCL == 0 {
			return n.createExisting(ctx, name, flags, out)
		}
		return nil, nil, 0, toErrno(err)
	}
	preserveOwner(ctx, abs)
	ch, errno := n.LoopbackNode.Lookup(ctx, name, out)
	if errno != 0 {
		f.Close()
		syscall.Unlink(abs)
		return nil, nil, 0, errno
	}
	cn := ch.Operations().(*node)
	cn.mu.Lock()
	defer cn.mu.Unlock()
	// A new file is new content, even if it is never written to.
	fh, err := cn.register(f, rel, true, n.r.excluded(rel), true, nil)
	if err != nil {
		f.Close()
		syscall.Unlink(abs)
		return nil, nil, 0, toErrno(err)
	}
	return ch, fh, 0, 0
}

// createExisting is O_CREAT without O_EXCL of a file that exists: an open,
// with the protection an open for writing gets.
func (n *node) createExisting(ctx context.Context, name string, flags uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	ch, errno := n.Lookup(ctx, name, out)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	fh, fuseFlags, errno := ch.Operations().(*node).Open(ctx, flags)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(fh.(*file).f.Fd()), &st); err == nil {
		out.Attr.FromStat(&st)
	}
	return ch, fh, fuseFlags, 0
}

func (n *node) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	flags &^= syscall.O_APPEND | fuse.FMODE_EXEC
	rel, live := n.rel()
	if !live {
		return nil, 0, syscall.ENOENT
	}
	abs := n.r.abs(rel)
	trunc := flags&syscall.O_TRUNC != 0
	write := flags&syscall.O_ACCMODE != syscall.O_RDONLY || trunc
	if !write || n.r.excluded(rel) {
		f, err := os.OpenFile(abs, int(flags)|syscall.O_NOFOLLOW, 0)
		if err != nil {
			return nil, 0, toErrno(err)
		}
		n.mu.Lock()
		defer n.mu.Unlock()
		return n.registered(f, rel, write, n.r.excluded(rel), false, nil)
	}

	if errno := n.r.journalable(rel); errno != 0 {
		return nil, 0, errno
	}
	// Refuse before anything changes if the journal could not take
	// the events.
	if err := n.r.log.Admit(); err != nil {
		return nil, 0, toErrno(err)
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(abs, &st); err != nil {
		return nil, 0, toErrno(err)
	}
	mayReplace := trunc && st.Size > 0 && n.r.tmpDir != ""
	if mayReplace {
		// Checksum before taking the gate, so the swap under it finds the
		// sum cached instead of stalling every release while it reads;
		// likewise the names of a linked file.
		n.r.sumPath(abs)
		n.r.linkNames(rel, &st)
		// Exclusive against releases: see root.gate.
		n.r.gate.Lock()
		defer n.r.gate.Unlock()
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	// Look again under the lock: the file may have changed meanwhile.
	if err := syscall.Lstat(abs, &st); err != nil {
		return nil, 0, toErrno(err)
	}
	if !isReg(&st) || st.Size == 0 {
		f, err := os.OpenFile(abs, int(flags)|syscall.O_NOFOLLOW, 0)
		if err != nil {
			return nil, 0, toErrno(err)
		}
		return n.registered(f, rel, true, false, false, nil)
	}

	if trunc {
		var f *os.File
		var orig preserved
		var err error
		in := intent{Type: journal.Truncate, Path: rel}
		slot, done, err := n.r.intend(&in)
		if err != nil {
			return nil, 0, toErrno(err)
		}
		defer done()
		// undo puts the original back; if it cannot, the truncation is
		// journaled later (keep).
		var undo func() error
		if mayReplace && n.opens == 0 && n.r.treeLinks(&st) == 1 {
			// O(1): keep the original inode in cmroot, put a new one in its place.
			if orig, err = n.r.preserve(abs, byLink); err != nil {
				return nil, 0, toErrno(err)
			}
			if err = n.r.intendOrig(slot, &in, rel, orig); err != nil {
				n.r.undo(orig, "")
				return nil, 0, toErrno(err)
			}
			var old string
			if f, old, err = n.r.replace(abs, &st, flags); err != nil {
				n.r.undo(orig, "")
				return nil, 0, toErrno(err)
			}
			defer os.Remove(old)
			prev := n.swappedTo(f)
			undo = func() error {
				if err := unix.Renameat2(unix.AT_FDCWD, old, unix.AT_FDCWD, abs, unix.RENAME_EXCHANGE); err != nil {
					return err
				}
				n.unswap(f, prev)
				return nil
			}
		} else {
			// Other handles or links must see the truncation: copy, then
			// truncate in place.
			if orig, err = n.r.preserve(abs, n.copying(0)); err != nil {
				return nil, 0, toErrno(err)
			}
			if err = n.r.intendOrig(slot, &in, rel, orig); err != nil {
				n.r.undo(orig, "")
				return nil, 0, toErrno(err)
			}
			if f, err = os.OpenFile(abs, int(flags)|syscall.O_NOFOLLOW, 0); err != nil {
				n.r.undo(orig, "")
				return nil, 0, toErrno(err)
			}
			undo = func() error { return n.r.refill(orig, fmt.Sprintf("/proc/self/fd/%d", f.Fd())) }
		}
		// Truncated in place, the file is empty under all its names.
		names := n.r.linkNames(rel, &st)
		events := contentEvents(journal.Truncate, rel, names, journal.File{Size: 0, XXH64: emptySum}, &orig.File)
		if err := n.r.emit(ctx, events...); err != nil {
			if undo() != nil {
				n.r.keep(slot, in)
			} else {
				n.r.undo(orig, "")
			}
			f.Close()
			return nil, 0, toErrno(err)
		}
		fh, err := n.register(f, rel, true, false, false, nil)
		if err != nil {
			// The truncation is journaled; only the handle's intent could
			// not be written: refuse the open, keep the truncation.
			f.Close()
			return nil, 0, toErrno(err)
		}
		return fh, 0, 0
	}

	// An in-place update: with passthrough the writes never reach us, so
	// the original is copied now, before the kernel has the file.
	orig, err := n.r.preserve(abs, n.copying(0))
	if err != nil {
		return nil, 0, toErrno(err)
	}
	f, err := os.OpenFile(abs, int(flags)|syscall.O_NOFOLLOW, 0)
	if err != nil {
		n.r.undo(orig, "")
		return nil, 0, toErrno(err)
	}
	fh, err := n.register(f, rel, true, false, false, &orig)
	if err != nil {
		f.Close()
		n.r.undo(orig, "")
		return nil, 0, toErrno(err)
	}
	return fh, 0, 0
}

// registered is register for the results of an open.
func (n *node) registered(f *os.File, rel string, write, excluded, created bool, orig *preserved) (gofs.FileHandle, uint32, syscall.Errno) {
	fh, err := n.register(f, rel, write, excluded, created, orig)
	if err != nil {
		f.Close()
		return nil, 0, toErrno(err)
	}
	return fh, 0, 0
}

// refill writes the preserved original p back into the file at abs, in
// place: the undo of a truncation that could not be journaled.
func (r *root) refill(p preserved, abs string) error {
	src, err := r.cm.Open(p.CM)
	if err != nil {
		return err
	}
	defer src.Close()
	f, err := os.OpenFile(abs, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	var off int64
	buf := make([]byte, 1<<20)
	for off < p.Size {
		k, err := src.ReadAt(buf[:min(int64(len(buf)), p.Size-off)], off)
		if k > 0 {
			if _, werr := f.WriteAt(buf[:k], off); werr != nil {
				return werr
			}
			off += int64(k)
		}
		if err != nil && off < p.Size {
			return err
		}
	}
	return f.Truncate(p.Size)
}

var replaceSeq atomic.Uint64

// tmpName returns a fresh name in the temporary directory.
func (r *root) tmpName(what string) string {
	return filepath.Join(r.tmpDir, fmt.Sprintf("%s-%d-%d", what, os.Getpid(), replaceSeq.Add(1)))
}

// replace puts a new, empty inode with st's mode and owner at abs and
// returns it opened with flags. The old inode is no longer at abs: it is
// at old, in the temporary directory, until the caller removes it — or
// exchanges it back to undo the replacement.
func (r *root) replace(abs string, st *syscall.Stat_t, flags uint32) (f *os.File, old string, err error) {
	tmp := r.tmpName("replace")
	f, err = os.OpenFile(tmp, int(flags&^(syscall.O_TRUNC|syscall.O_APPEND))|os.O_CREATE|os.O_EXCL, 0600)
	if err != nil {
		return nil, "", err
	}
	fd := int(f.Fd())
	if err = syscall.Fchown(fd, int(st.Uid), int(st.Gid)); err == nil {
		err = syscall.Fchmod(fd, st.Mode&07777)
	}
	if err == nil {
		err = unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, abs, unix.RENAME_EXCHANGE)
	}
	if err != nil {
		f.Close()
		os.Remove(tmp)
		return nil, "", err
	}
	return f, tmp, nil
}

// copying says how to copy the node's original: self of its writers are
// the caller's own, blocked in this operation; any other may be writing.
// n.mu must be held.
func (n *node) copying(self int) how {
	if n.writers > self {
		return byCopy
	}
	return byCopyIdle
}

// swappedTo records that the node's name now holds the inode open as f,
// and returns what it replaced, for unswap.
func (n *node) swappedTo(f *os.File) (prev swapped) {
	var x unix.Statx_t
	if unix.Statx(int(f.Fd()), "", unix.AT_EMPTY_PATH, unix.STATX_INO|unix.STATX_BTIME, &x) != nil {
		return swapped{}
	}
	r := n.r
	r.swapMu.Lock()
	defer r.swapMu.Unlock()
	old := n.swapped.Swap(x.Ino)
	prev = swapped{ino: old, set: true}
	if e, ok := r.swaps[old]; old != 0 && ok && e.n == n {
		prev.e = e
		delete(r.swaps, old)
	}
	if r.swaps == nil {
		r.swaps = make(map[uint64]swap)
	}
	r.swaps[x.Ino] = swap{n: n, btime: x.Btime}
	return prev
}

// swapped is the node's identity before a swap.
type swapped struct {
	ino uint64
	e   swap
	set bool
}

// unswap undoes swappedTo(f), once the original inode is back.
func (n *node) unswap(f *os.File, prev swapped) {
	if !prev.set {
		return
	}
	var x unix.Statx_t
	r := n.r
	r.swapMu.Lock()
	defer r.swapMu.Unlock()
	if unix.Statx(int(f.Fd()), "", unix.AT_EMPTY_PATH, unix.STATX_INO, &x) == nil {
		if e, ok := r.swaps[x.Ino]; ok && e.n == n {
			delete(r.swaps, x.Ino)
		}
	}
	n.swapped.Store(prev.ino)
	if prev.ino != 0 && prev.e.n != nil {
		r.swaps[prev.ino] = prev.e
	}
}

// register wraps an opened backing file as the node's handle; n.mu must
// be held by the caller unless the node is new. The content of a created
// file is journaled at its first close even if nothing is written; any
// other handle journals only a change from the state it opened.
//
// It fails, registering nothing, when the handle's intent cannot be
// recorded; the caller undoes the open.
func (n *node) register(f *os.File, rel string, write, excluded, created bool, orig *preserved) (*file, error) {
	fh := &file{LoopbackFile: gofs.NewLoopbackFileFromOS(f), f: f, n: n, write: write, excluded: excluded, orig: orig, slot: -1}
	if fl, err := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0); err == nil {
		fh.readable = fl&syscall.O_ACCMODE != syscall.O_WRONLY
	}
	var st syscall.Stat_t
	if write && !created && syscall.Fstat(int(f.Fd()), &st) == nil {
		fh.last, fh.synced = statState(&st), true
	}
	if write && !excluded {
		// Writes through passthrough never reach us: should the mount die
		// before the close journals them, the next mount looks.
		in := intent{Type: journal.Write, Path: rel}
		switch {
		case orig != nil:
			in.Base, in.Orig = orig.XXH64, &orig.File
		case created:
		case st.Size == 0:
			in.Base = emptySum
		default:
			in.Base, _ = n.r.sums.get(statState(&st))
		}
		// Admitted already: the open's change, if any, is made.
		slot, _, err := n.r.record(&in)
		if err != nil {
			return nil, err
		}
		fh.slot, fh.intent = slot, in
	}
	n.opens++
	if write {
		n.writers++
	}
	return fh, nil
}

func (n *node) Setattr(ctx context.Context, f gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	size, ok := in.GetSize()
	rel, live := n.rel()
	if !ok || !live || n.r.excluded(rel) {
		return n.setattr(ctx, f, in, out)
	}
	if errno := n.r.journalable(rel); errno != 0 {
		return errno
	}
	abs := n.r.abs(rel)
	fh, _ := f.(*file)
	mayReplace := fh == nil && size == 0 && n.r.tmpDir != ""
	if mayReplace {
		// As in Open.
		if _, st, err := n.r.sumPath(abs); err == nil {
			n.r.linkNames(rel, st)
		}
		n.r.gate.Lock()
		defer n.r.gate.Unlock()
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	var st syscall.Stat_t
	var err error
	if fh != nil {
		err = syscall.Fstat(int(fh.f.Fd()), &st)
	} else {
		err = syscall.Lstat(abs, &st)
	}
	if err != nil {
		return toErrno(err)
	}
	if !isReg(&st) || uint64(st.Size) == size {
		return n.setattr(ctx, f, in, out)
	}
	it := intent{Type: journal.Truncate, Path: rel}
	slot, done, err := n.r.intend(&it)
	if err != nil {
		return toErrno(err)
	}
	defer done()
	names := n.r.linkNames(rel, &st)

	var orig *preserved
	// undo puts the content back as it was; if it cannot, the change is
	// journaled later (keep).
	undo := func() error { return syscall.Truncate(abs, st.Size) }
	if st.Size > 0 {
		if mayReplace && n.opens == 0 && n.r.treeLinks(&st) == 1 {
			p, err := n.r.preserve(abs, byLink)
			if err != nil {
				return toErrno(err)
			}
			if err := n.r.intendOrig(slot, &it, rel, p); err != nil {
				n.r.undo(p, "")
				return toErrno(err)
			}
			nf, old, err := n.r.replace(abs, &st, syscall.O_RDONLY)
			if err != nil {
				n.r.undo(p, "")
				return toErrno(err)
			}
			defer os.Remove(old)
			prev := n.swappedTo(nf)
			defer nf.Close()
			undo = func() error {
				if err := unix.Renameat2(unix.AT_FDCWD, old, unix.AT_FDCWD, abs, unix.RENAME_EXCHANGE); err != nil {
					return err
				}
				n.unswap(nf, prev)
				return nil
			}
			in.Valid &^= fuse.FATTR_SIZE
			orig = &p
		} else {
			self := 0
			if fh != nil && fh.write {
				self = 1
			}
			p, err := n.r.preserve(abs, n.copying(self))
			if err != nil {
				return toErrno(err)
			}
			if err := n.r.intendOrig(slot, &it, rel, p); err != nil {
				n.r.undo(p, "")
				return toErrno(err)
			}
			orig = &p
			if size < uint64(st.Size) {
				undo = func() error { return n.r.refill(p, abs) }
			}
		}
	}
	if errno := n.setattr(ctx, f, in, out); errno != 0 {
		if orig != nil && in.Valid&fuse.FATTR_SIZE != 0 {
			n.r.undo(*orig, "")
		}
		return errno
	}
	sum := emptySum
	var serr error
	if size > 0 {
		sum, _, serr = n.r.sumPath(abs)
	}
	if serr == nil {
		var o *journal.File
		if orig != nil {
			o = &orig.File
		}
		serr = n.r.emit(ctx, contentEvents(journal.Truncate, rel, names, journal.File{Size: int64(size), XXH64: sum}, o)...)
	}
	if serr != nil {
		if undo() != nil {
			n.r.keep(slot, it)
		} else if orig != nil {
			n.r.undo(*orig, "")
		}
		return toErrno(serr)
	}
	return 0
}

// setattr is the plain loopback setattr, with cmroot's links hidden.
func (n *node) setattr(ctx context.Context, f gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if fh, ok := f.(*file); ok {
		f = fh.LoopbackFile
	}
	if errno := n.LoopbackNode.Setattr(ctx, f, in, out); errno != 0 {
		return errno
	}
	out.Nlink -= n.r.cmLinks(out.Mode, out.Ino, out.Nlink)
	return 0
}

// file is an open file of the mount. A handle opened for writing journals
// the new content when it is closed (flush), before close() returns.
type file struct {
	*gofs.LoopbackFile
	f        *os.File
	n        *node
	write    bool
	readable bool
	excluded bool

	mu sync.Mutex
	// orig is the original copied at open, journaled with the first change.
	orig *preserved
	// last is the content state last journaled (or seen at open).
	last   state
	synced bool
	// slot holds the handle's intent in the in-flight table, -1 if none.
	slot   int
	intent intent
	// unjournaled says the last flush could not journal the content.
	unjournaled bool
}

var (
	_ = (gofs.FileFlusher)((*file)(nil))
	_ = (gofs.FileFsyncer)((*file)(nil))
	_ = (gofs.FileReleaser)((*file)(nil))
	_ = (gofs.FilePassthroughFder)((*file)(nil))
)

func (f *file) Flush(ctx context.Context) syscall.Errno {
	if errno := f.LoopbackFile.Flush(ctx); errno != 0 {
		return errno
	}
	if !f.write || f.excluded {
		return 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.f.Fd()), &st); err != nil {
		return toErrno(err)
	}
	if f.synced && statState(&st) == f.last {
		return 0
	}
	r := f.n.r
	rel, live := f.n.rel()
	if !live || r.treeLinks(&st) == 0 || r.excluded(rel) {
		return 0 // no longer in the protected tree: nothing to journal
	}
	src, closeSrc, err := f.reader()
	if err != nil {
		return toErrno(err)
	}
	defer closeSrc()
	sum, cur, err := r.sumFile(src)
	if err != nil {
		return toErrno(err)
	}
	if f.orig != nil && f.orig.XXH64 == sum && f.orig.Size == cur.Size {
		// Written back unchanged: the copy was not needed.
		if f.orig.created {
			r.cm.Drop(f.orig.CM)
		}
		f.orig, f.last, f.synced = nil, statState(cur), true
		return 0
	}
	var orig *journal.File
	if f.orig != nil {
		orig = &f.orig.File
	}
	// Every name of the file holds the new content.
	names := r.linkNames(rel, cur)
	if err := r.emit(ctx, contentEvents(journal.Write, rel, names, journal.File{Size: cur.Size, XXH64: sum}, orig)...); err != nil {
		// The content is in the file and cannot be taken back: close
		// fails, and the handle's intent outlives it (Release) until a
		// later event or the next mount's recovery journals the content.
		f.unjournaled = true
		return toErrno(err)
	}
	f.unjournaled = false
	f.orig, f.last, f.synced = nil, statState(cur), true
	f.intent = intent{After: r.log.Last(), Type: journal.Write, Path: rel, Base: sum}
	r.inflight.update(f.slot, &f.intent)
	return 0
}

// Fsync checksums the content while the kernel writes it back, so the
// close that usually follows finds the checksum cached.
func (f *file) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	if !f.write || f.excluded {
		return f.LoopbackFile.Fsync(ctx, flags)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if src, closeSrc, err := f.reader(); err == nil {
			f.n.r.sumFile(src) // fills the cache; errors surface at flush
			closeSrc()
		}
	}()
	errno := f.LoopbackFile.Fsync(ctx, flags)
	<-done
	return errno
}

// reader returns a descriptor that reads the handle's inode.
func (f *file) reader() (*os.File, func(), error) {
	if f.readable {
		return f.f, func() {}, nil
	}
	// A write-only descriptor cannot be read back: open the same inode
	// again for reading, wherever its name is now.
	src, err := os.Open(fmt.Sprintf("/proc/self/fd/%d", f.f.Fd()))
	if err != nil {
		return nil, nil, err
	}
	return src, func() { src.Close() }, nil
}

func (f *file) Release(ctx context.Context) syscall.Errno {
	if f.slot >= 0 {
		f.mu.Lock()
		if f.unjournaled {
			f.n.r.keep(f.slot, f.intent)
		} else {
			f.n.r.inflight.end(f.slot)
		}
		f.mu.Unlock()
	}
	f.n.mu.Lock()
	f.n.opens--
	if f.write {
		f.n.writers--
	}
	f.n.mu.Unlock()
	return f.LoopbackFile.Release(ctx)
}

// preserveOwner gives a new file the caller's uid and gid, as the kernel
// would, when cmfs runs as root.
func preserveOwner(ctx context.Context, p string) {
	if os.Getuid() != 0 {
		return
	}
	if caller, ok := fuse.FromContext(ctx); ok {
		syscall.Lchown(p, int(caller.Uid), int(caller.Gid))
	}
}
