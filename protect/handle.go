package protect

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/cmfs-project/cmfs/internal/at"
	"github.com/cmfs-project/cmfs/journal"
	"golang.org/x/sys/unix"
)

// Identity is told when cmfs puts a new inode in place of a file's (an
// O_TRUNC or a truncate to 0 keeps the original inode in cmroot): the
// adapter keeps the file's identity, so that the kernel sees one file.
// Swapped records that the file's name now holds the inode open as f and
// returns what undoes that record.
type Identity interface {
	Swapped(f *os.File) (undo func())
}

// Prepared is what Prepare did before an open or truncate that may put a
// new inode in place of the file's: the checksum and the link names are
// looked up ahead. Use reads the file's use under the Gate.
type Prepared struct {
	c       *Core
	replace bool
}

// Use returns the file's use as read, for a change that may replace its
// inode once every release under way has ended (see Gate). Call it with
// the file's lock held, which keeps new handles from being counted in.
func (p Prepared) Use(read func() Use) Use {
	if !p.replace {
		return read()
	}
	p.c.Gate.Lock()
	defer p.c.Gate.Unlock()
	return read()
}

// Prepare readies a change of rel that empties it (O_TRUNC, truncate to
// 0 by name): when its inode may be replaced, the checksum is computed
// and the names of a linked file found first, so that the replacement
// finds them cached. Call before locking the file's use.
func (c *Core) Prepare(rel string, empties bool) Prepared {
	if !empties || c.tmpDir == "" || c.excluded(rel) {
		return Prepared{c: c}
	}
	var st syscall.Stat_t
	if err := c.fs.Lstat(rel, &st); err != nil || st.Size == 0 {
		return Prepared{c: c}
	}
	if _, cur, err := c.sumStat(rel, &st); err == nil {
		c.linkNames(rel, cur)
	}
	return Prepared{c: c, replace: true}
}

// Handle is a file open through the mount. One opened for writing
// journals the new content when it is closed (Flush), before close()
// returns.
type Handle struct {
	c        *Core
	f        *os.File
	write    bool
	readable bool
	excluded bool
	// quiet: f was opened read-write and O_NOATIME for a write-only
	// caller (quietly), and checksums read it.
	quiet bool

	mu sync.Mutex
	// orig is the original copied at open, journaled with the first change.
	orig *preserved
	// last is the content state last journaled (or seen at open).
	last   state
	synced bool
	// openBlocks is the file's st_blocks at open: how much more it has
	// at close tells how much may still wait for writeback (sumWritten).
	openBlocks int64
	// slot holds the handle's intent in the in-flight table, -1 if none.
	slot   int
	intent intent
	// unjournaled says the last flush could not journal the content.
	unjournaled bool
	// durable says an fsync made the handle's intent durable (Fsync).
	durable bool
	// fsyncSum is what the handle's checksums at fsync have come to:
	// the state last hashed, whether one was, and whether they are given
	// up (one was cut short by its fsync's end, or outdated by writes).
	fsyncSum    state
	fsyncSummed bool
	noFsyncSum  bool
}

// File returns the backing file the handle reads and writes.
func (h *Handle) File() *os.File { return h.f }

// Writes says whether the handle was opened for writing.
func (h *Handle) Writes() bool { return h.write }

// Create makes rel, exclusively, with flags and mode, owned by the
// caller, and opens it. A file that exists fails with EEXIST.
func (c *Core) Create(ctx context.Context, rel string, flags, mode uint32, cl Caller) (*Handle, error) {
	ex, err := c.admit(rel, syscall.EPERM)
	if err != nil {
		return nil, err
	}
	o := handleOpts{write: true, excluded: ex, created: true}
	done := func() {}
	if !ex {
		// The handle's intent, recorded before the file exists: should
		// the mount die before the close journals the new file, the next
		// mount does.
		o.in = intent{Type: journal.Write, Path: rel}
		if o.slot, done, err = c.intend(&o.in); err != nil {
			return nil, err
		}
		o.recorded = true
	}
	oflags, quiet := quietly(flags)
	o.quiet = quiet && !ex
	f, err := c.fs.Open(rel, oflags|os.O_CREATE|os.O_EXCL, mode&0o7777)
	if err != nil {
		done()
		return nil, err
	}
	cl.own(c.fs, rel, parent(rel), int(f.Fd()))
	// A new file is new content, even if it is never written to.
	h, err := c.newHandle(f, rel, o)
	if err != nil {
		f.Close()
		c.fs.Unlink(rel)
		done()
		return nil, err
	}
	return h, nil
}

// quietly returns the open(2) flags, from a caller's flags, of a backing
// file that cmfs makes for the caller and checksums at close: a caller's
// write-only open becomes read-write and O_NOATIME, so that the checksum
// reads the handle's own descriptor, leaving atime alone, instead of
// opening the file again. The caller sees nothing of it: the kernel
// refuses reads and mappings of its write-only handle before they reach
// the backing file. quiet says the flags were changed. Only for a file
// cmfs makes, which it owns as O_NOATIME requires.
func quietly(flags uint32) (oflags int, quiet bool) {
	if flags&syscall.O_ACCMODE != syscall.O_WRONLY {
		return int(flags), false
	}
	return int(flags&^syscall.O_ACCMODE) | syscall.O_RDWR | syscall.O_NOATIME, true
}

// Abort undoes a Create whose file the adapter could not take on.
func (h *Handle) Abort(rel string) {
	h.f.Close()
	h.c.fs.Unlink(rel)
	h.Release()
}

// Open opens rel with flags for a file in use as u (held steady by the
// caller), after Prepare. An open for writing of a non-empty file keeps
// the original first: with O_TRUNC it is linked into cmroot and a new
// inode put in place (O(1); id is told), or copied and the file truncated
// in place when other handles or links must see the truncation; without
// O_TRUNC it is copied now, because with FUSE passthrough the writes
// never pass through cmfs.
func (c *Core) Open(ctx context.Context, rel string, flags uint32, u Use, p Prepared, id Identity) (*Handle, error) {
	trunc := flags&syscall.O_TRUNC != 0
	write := flags&syscall.O_ACCMODE != syscall.O_RDONLY || trunc
	if !write || c.excluded(rel) {
		f, err := c.fs.Open(rel, int(flags)|syscall.O_NOFOLLOW, 0)
		if err != nil {
			return nil, err
		}
		return c.opened(f, rel, handleOpts{write: write, excluded: c.excluded(rel)})
	}
	if err := c.journalable(rel); err != nil {
		return nil, err
	}
	// Refuse before anything changes if the journal could not take the
	// events.
	if err := c.log.Admit(); err != nil {
		return nil, err
	}
	var st syscall.Stat_t
	if err := c.fs.Lstat(rel, &st); err != nil {
		return nil, err
	}
	if !isReg(&st) || st.Size == 0 {
		f, err := c.fs.Open(rel, int(flags)|syscall.O_NOFOLLOW, 0)
		if err != nil {
			return nil, err
		}
		return c.opened(f, rel, handleOpts{write: true})
	}
	if !trunc {
		// An in-place update: the original is copied before the kernel
		// has the file.
		orig, err := c.preserve(rel, copying(u, 0))
		if err != nil {
			return nil, err
		}
		f, err := c.fs.Open(rel, int(flags)|syscall.O_NOFOLLOW, 0)
		if err != nil {
			c.undo(orig, "")
			return nil, err
		}
		h, err := c.opened(f, rel, handleOpts{write: true, orig: &orig})
		if err != nil {
			c.undo(orig, "")
			return nil, err
		}
		return h, nil
	}

	in := intent{Type: journal.Truncate, Path: rel}
	slot, done, err := c.intend(&in)
	if err != nil {
		return nil, err
	}
	defer done()
	var f *os.File
	var orig preserved
	var quiet bool // f is a new inode, opened quietly
	// undo puts the original back; if it cannot, the truncation is
	// journaled later (keep).
	var undo func() error
	if p.replace && u.Opens == 0 && c.treeLinks(&st) == 1 {
		// O(1): keep the original inode in cmroot, put a new one in its
		// place. No handle has it open: its lstat above still holds.
		var sum string
		var cur *syscall.Stat_t
		if sum, cur, err = c.sumStat(rel, &st); err != nil {
			return nil, err
		}
		if orig, err = c.preserveSummed(rel, byLink, sum, cur); err != nil {
			return nil, err
		}
		if err = c.intendOrig(slot, &in, rel, orig); err != nil {
			c.undo(orig, "")
			return nil, err
		}
		var swapDone func()
		if f, undo, swapDone, err = c.swap(rel, &st, flags, orig, id); err != nil {
			c.undo(orig, "")
			return nil, err
		}
		defer swapDone()
		_, quiet = quietly(flags)
	} else {
		// Other handles or links must see the truncation: copy, then
		// truncate in place.
		if orig, err = c.preserve(rel, copying(u, 0)); err != nil {
			return nil, err
		}
		if err = c.intendOrig(slot, &in, rel, orig); err != nil {
			c.undo(orig, "")
			return nil, err
		}
		if f, err = c.fs.Open(rel, int(flags)|syscall.O_NOFOLLOW, 0); err != nil {
			c.undo(orig, "")
			return nil, err
		}
		undo = func() error {
			// Through a descriptor of its own: f may append.
			return c.refill(orig, func() (*os.File, error) {
				return os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", f.Fd()), os.O_WRONLY, 0)
			})
		}
	}
	// Truncated, the file is empty under all its names.
	names := c.linkNames(rel, &st)
	events := contentEvents(journal.Truncate, rel, names, journal.File{Size: 0, XXH64: emptySum}, &orig.File)
	if err := c.emit(ctx, events...); err != nil {
		if undo() != nil {
			c.keep(slot, in)
		} else {
			c.undo(orig, "")
		}
		f.Close()
		return nil, err
	}
	// The truncation is journaled; should the handle's intent not be
	// written, the open is refused and the truncation stays.
	return c.opened(f, rel, handleOpts{write: true, quiet: quiet})
}

// handleOpts says what a new handle is for.
type handleOpts struct {
	write bool
	// excluded: rel is excluded from journaling.
	excluded bool
	// created: this open made the file, so its content is new.
	created bool
	// orig is the original kept at open, journaled with the first change.
	orig *preserved
	// quiet: the file was opened read-write and O_NOATIME for a
	// write-only caller (quietly).
	quiet bool
	// recorded: the open recorded the handle's intent, in, in slot
	// already (Create); newHandle records one otherwise.
	recorded bool
	slot     int
	in       intent
}

// opened is newHandle for an open: the file is closed on error.
func (c *Core) opened(f *os.File, rel string, o handleOpts) (*Handle, error) {
	h, err := c.newHandle(f, rel, o)
	if err != nil {
		f.Close()
		return nil, err
	}
	return h, nil
}

// swapped tells id, if any, that f's inode now holds the file's name.
func swapped(id Identity, f *os.File) (undo func()) {
	if id == nil {
		return func() {}
	}
	return id.Swapped(f)
}

// copying says how to copy the original of a file in use as u: self of
// its writers are the caller's own, blocked in this operation; any other
// may be writing.
func copying(u Use, self int) how {
	if u.Writers > self {
		return byCopy
	}
	return byCopyIdle
}

// newHandle wraps an opened backing file. The content of a created file is
// journaled at its first close even if nothing is written; any other
// handle journals only a change from the state it opened. A handle for
// writing records its intent (writes through passthrough never reach
// cmfs: should the mount die before the close journals them, the next
// mount looks); it fails when that cannot be recorded.
func (c *Core) newHandle(f *os.File, rel string, o handleOpts) (*Handle, error) {
	h := &Handle{c: c, f: f, write: o.write, excluded: o.excluded, orig: o.orig, slot: -1, quiet: o.quiet}
	if o.quiet {
		h.readable = true
	} else if fl, err := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0); err == nil {
		h.readable = fl&syscall.O_ACCMODE != syscall.O_WRONLY
	}
	var st syscall.Stat_t
	if o.write && !o.created && syscall.Fstat(int(f.Fd()), &st) == nil {
		h.last, h.synced, h.openBlocks = statState(&st), true, st.Blocks
	}
	if o.write && !o.excluded && o.recorded {
		h.slot, h.intent = o.slot, o.in
	} else if o.write && !o.excluded {
		in := intent{Type: journal.Write, Path: rel}
		switch {
		case o.orig != nil:
			in.Base, in.Orig = o.orig.XXH64, &o.orig.File
		case o.created:
		case st.Size == 0:
			in.Base = emptySum
		default:
			in.Base, _ = c.sums.get(statState(&st))
		}
		// Admitted already: the open's change, if any, is made.
		slot, _, err := c.record(&in)
		if err != nil {
			return nil, err
		}
		h.slot, h.intent = slot, in
	}
	return h, nil
}

// Truncate changes the size of rel — through h when the caller truncates
// an open file, by name otherwise — for a file in use as u, after
// Prepare. The original is kept first: linked into cmroot with a new
// empty inode put in its place (truncate to 0 by name, nothing open; id
// is told), or copied.
func (c *Core) Truncate(ctx context.Context, rel string, size uint64, h *Handle, u Use, p Prepared, id Identity) error {
	apply := func() error {
		if h != nil {
			return h.f.Truncate(int64(size))
		}
		return c.fs.Truncate(rel, int64(size))
	}
	if c.excluded(rel) {
		return apply()
	}
	if err := c.journalable(rel); err != nil {
		return err
	}
	var st syscall.Stat_t
	var err error
	if h != nil {
		err = syscall.Fstat(int(h.f.Fd()), &st)
	} else {
		err = c.fs.Lstat(rel, &st)
	}
	if err != nil {
		return err
	}
	if !isReg(&st) || uint64(st.Size) == size {
		return apply()
	}
	in := intent{Type: journal.Truncate, Path: rel}
	slot, done, err := c.intend(&in)
	if err != nil {
		return err
	}
	defer done()
	names := c.linkNames(rel, &st)

	var orig *preserved
	// undo puts the content back as it was; if it cannot, the change is
	// journaled later (keep).
	undo := func() error { return c.fs.Truncate(rel, st.Size) }
	if st.Size > 0 {
		if p.replace && h == nil && size == 0 && u.Opens == 0 && c.treeLinks(&st) == 1 {
			o, err := c.preserve(rel, byLink)
			if err != nil {
				return err
			}
			if err := c.intendOrig(slot, &in, rel, o); err != nil {
				c.undo(o, "")
				return err
			}
			nf, unswap, swapDone, err := c.swap(rel, &st, syscall.O_RDONLY, o, id)
			if err != nil {
				c.undo(o, "")
				return err
			}
			defer swapDone()
			defer nf.Close()
			undo = unswap
			apply = func() error { return nil } // the new inode is empty
			orig = &o
		} else {
			self := 0
			if h != nil && h.write {
				self = 1
			}
			o, err := c.preserve(rel, copying(u, self))
			if err != nil {
				return err
			}
			if err := c.intendOrig(slot, &in, rel, o); err != nil {
				c.undo(o, "")
				return err
			}
			orig = &o
			if size < uint64(st.Size) {
				undo = func() error {
					return c.refill(o, func() (*os.File, error) { return c.fs.Open(rel, os.O_WRONLY, 0) })
				}
			}
		}
	}
	if err := apply(); err != nil {
		if orig != nil {
			c.undo(*orig, "") // the content is as it was
		}
		return err
	}
	sum := emptySum
	var serr error
	if size > 0 {
		sum, _, serr = c.sumPath(rel)
	}
	if serr == nil {
		var o *journal.File
		if orig != nil {
			o = &orig.File
		}
		serr = c.emit(ctx, contentEvents(journal.Truncate, rel, names, journal.File{Size: int64(size), XXH64: sum}, o)...)
	}
	if serr == nil && h != nil && h.write {
		h.settle(rel, orig, sum)
	}
	if serr != nil {
		if undo() != nil {
			c.keep(slot, in)
		} else if orig != nil {
			c.undo(*orig, "")
		}
		return serr
	}
	return nil
}

// Flush journals the handle's new content, if it changed, at rel, the
// file's name now (live false: it has none in the tree any more).
func (h *Handle) Flush(ctx context.Context, rel string, live bool) error {
	if !h.write || h.excluded {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(h.f.Fd()), &st); err != nil {
		return err
	}
	if h.synced && statState(&st) == h.last {
		return nil
	}
	c := h.c
	if !live || c.treeLinks(&st) == 0 || c.excluded(rel) {
		return nil // no longer in the protected tree: nothing to journal
	}
	src, closeSrc, err := h.reader()
	if err != nil {
		return err
	}
	defer closeSrc()
	sum, cur, err := h.sumWritten(src, &st)
	if err != nil {
		return err
	}
	if h.orig != nil && h.orig.XXH64 == sum && h.orig.Size == cur.Size {
		// Written back unchanged: the copy was not needed.
		if h.orig.created {
			c.cm.Drop(h.orig.CM)
		}
		h.orig, h.last, h.synced = nil, statState(cur), true
		return nil
	}
	if h.orig == nil && h.synced && h.intent.Base == sum && h.last.size == uint64(cur.Size) {
		// The content is what the last event said (a close of a dup'd
		// descriptor, a touch): times and modes are not journaled.
		h.last = statState(cur)
		return nil
	}
	var orig *journal.File
	if h.orig != nil {
		orig = &h.orig.File
	}
	// Every name of the file holds the new content.
	names := c.linkNames(rel, cur)
	if err := c.emit(ctx, contentEvents(journal.Write, rel, names, journal.File{Size: cur.Size, XXH64: sum}, orig)...); err != nil {
		// The content is in the file and cannot be taken back: close
		// fails, and the handle's intent outlives it (Release) until a
		// later event or the next mount's recovery journals the content.
		h.unjournaled = true
		return err
	}
	h.unjournaled = false
	h.orig, h.last, h.synced = nil, statState(cur), true
	prev := h.intent.Path
	h.intent = intent{After: c.log.Written(), Type: journal.Write, Path: rel, Base: sum}
	if rel != prev {
		// The table keeps the intent of the open otherwise: the
		// recovery it leads to finds this event, whose content is the
		// file's unless written since, and journals only a difference.
		c.inflight.update(h.slot, &h.intent)
	}
	return nil
}

// settle records that an event, a truncation through h naming orig,
// journaled the handle's content as sum, so that its close journals only a
// change from that. The original h kept at open is the one the event
// named if the file still held it; otherwise h keeps it for its close.
func (h *Handle) settle(rel string, orig *preserved, sum string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.orig != nil && (orig == nil || orig.XXH64 != h.orig.XXH64 || orig.Size != h.orig.Size) {
		return
	}
	var st syscall.Stat_t
	if h.slot < 0 || syscall.Fstat(int(h.f.Fd()), &st) != nil {
		return
	}
	h.orig, h.last, h.synced = nil, statState(&st), true
	h.intent = intent{After: h.c.log.Written(), Type: journal.Write, Path: rel, Base: sum}
	h.c.inflight.update(h.slot, &h.intent)
}

// Fsync makes what the handle wrote durable: fsync is the backing file's.
// It journals nothing (the close journals the content), but the content
// it makes durable is not yet what the journal says of the file, so the
// first fsync of a handle makes the handle's intent durable as well:
// after a power loss, the next mount finds it and journals the content
// the file then holds (I3). Later fsyncs cost the backing fsync alone.
//
// While fsync runs, the content is checksummed for the close that usually
// follows, as long as that costs the fsync nothing: the checksum is given
// up when fsync ends first. A handle stops checksumming at fsync for good
// once such a checksum was given up, or outdated by writes before the
// next fsync: random writes with an fsync every few (a database, a log)
// would otherwise read the whole file at every fsync. Write, fsync, close
// still finds the checksum made.
func (h *Handle) Fsync(fsync func() error) error {
	if !h.write || h.excluded {
		return fsync()
	}
	sum, err := h.fsyncing()
	if err != nil {
		return err
	}
	if !sum {
		return fsync()
	}
	src, closeSrc, err := h.reader()
	if err != nil {
		return fsync() // the close checksums, and says what fails
	}
	defer closeSrc()
	stop := make(chan struct{})
	type summed struct {
		st state
		ok bool
	}
	done := make(chan summed, 1)
	go func() {
		st, ok := h.c.sumFileUntil(src, stop)
		done <- summed{st, ok}
	}()
	err = fsync()
	close(stop)
	r := <-done
	h.mu.Lock()
	h.fsyncSum, h.fsyncSummed = r.st, r.ok
	h.noFsyncSum = h.noFsyncSum || !r.ok
	h.mu.Unlock()
	return err
}

// fsyncing readies an fsync of the handle: its intent is made durable
// the first time, and it says whether to checksum while the fsync runs.
func (h *Handle) fsyncing() (sum bool, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.durable && h.slot >= 0 && h.c.inflight != nil {
		if err := h.c.inflight.sync(); err != nil {
			return false, err
		}
		h.durable = true
	}
	if h.fsyncSummed && !h.noFsyncSum {
		var st syscall.Stat_t
		if syscall.Fstat(int(h.f.Fd()), &st) != nil || statState(&st) != h.fsyncSum {
			h.noFsyncSum = true // written since: that checksum was for nothing
		}
	}
	return !h.noFsyncSum, nil
}

// reader returns a descriptor that reads the handle's inode: the same
// inode opened again, wherever its name is now, without updating its
// access time, so that checksumming what a caller wrote stays invisible
// (reading through the caller's own descriptor would touch atime, which
// the caller may already have looked at).
func (h *Handle) reader() (*os.File, func(), error) {
	if h.quiet {
		return h.f, func() {}, nil
	}
	// Not openNoAtime: /proc/self/fd/N is a link to follow.
	proc := fmt.Sprintf("/proc/self/fd/%d", h.f.Fd())
	src, err := os.OpenFile(proc, os.O_RDONLY|syscall.O_NOATIME, 0)
	if errors.Is(err, syscall.EPERM) {
		src, err = os.Open(proc)
	}
	if err != nil && h.readable {
		return h.f, func() {}, nil
	}
	if err != nil {
		return nil, nil, err
	}
	return src, func() { src.Close() }, nil
}

// Release ends the handle: its intent is cleared, or kept when its last
// content could not be journaled. The caller closes the file.
func (h *Handle) Release() {
	if h.slot < 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	var st syscall.Stat_t
	if h.orig != nil && !h.unjournaled && h.synced && syscall.Fstat(int(h.f.Fd()), &st) == nil && statState(&st) == h.last {
		// Opened for writing, closed unchanged: no event names the copy
		// taken at open, and none will.
		if h.orig.created {
			h.c.cm.DropUnused(h.orig.CM)
		}
		h.orig = nil
	}
	if h.unjournaled {
		h.c.keep(h.slot, h.intent)
	} else {
		h.c.inflight.end(h.slot)
	}
	h.slot = -1
}

// refill writes the preserved original p back, in place, into the file
// open opens for writing: the undo of a truncation that could not be
// journaled.
func (c *Core) refill(p preserved, open func() (*os.File, error)) error {
	src, err := c.cm.Open(p.CM)
	if err != nil {
		return err
	}
	defer src.Close()
	f, err := open()
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

var tmpSeq atomic.Uint64

// tmpName returns a fresh name in the temporary directory.
func (c *Core) tmpName(what string) string {
	return filepath.Join(c.tmpDir, fmt.Sprintf("%s-%d-%d", what, os.Getpid(), tmpSeq.Add(1)))
}

// swap puts a new, empty inode with st's mode and owner at rel in place
// of the old one, which orig keeps in cmroot, tells id so, and returns the
// new inode opened with flags (quietly) and the undo that puts the old
// inode back at rel. done ends the swap once it is journaled or undone.
//
// An entry orig created by a link is the old inode itself: the new inode
// is renamed over rel, and the undo links the entry back. Any other entry
// (one there before, with the same content; a copy) is not, and the old
// inode has no other name: the new inode is exchanged with it, which
// leaves the old one under a temporary name until done unlinks it
// (c.leftovers), or the undo exchanges it back.
func (c *Core) swap(rel string, st *syscall.Stat_t, flags uint32, orig preserved, id Identity) (f *os.File, undo func() error, done func(), err error) {
	tmp := c.tmpName("replace")
	oflags, _ := quietly(flags &^ (syscall.O_TRUNC | syscall.O_APPEND))
	// open(2) and os.NewFile rather than os.OpenFile, which tries the
	// new descriptor on the poller (four fcntl and an epoll_ctl that a
	// regular file refuses) on every overwrite.
	fd, err := unix.Open(tmp, oflags|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, nil, nil, &os.PathError{Op: "open", Path: tmp, Err: err}
	}
	f = os.NewFile(uintptr(fd), tmp)
	if err = syscall.Fchown(fd, int(st.Uid), int(st.Gid)); err == nil {
		err = syscall.Fchmod(fd, st.Mode&0o7777)
	}
	// how puts the new inode at rel, back the old one again, done ends
	// the swap: by exchange unless cmroot's entry is the old inode.
	how := uint(unix.RENAME_EXCHANGE)
	back := func() error { return c.renameIn(tmp, rel, unix.RENAME_EXCHANGE) }
	done = func() { c.leftovers.remove(tmp) }
	if orig.created && c.cm.Links(st.Ino) > 0 {
		how = 0
		back = func() error { return c.relink(orig.CM, rel) }
		done = func() {}
	}
	if err == nil {
		err = c.renameIn(tmp, rel, how)
	}
	if err != nil {
		f.Close()
		os.Remove(tmp)
		return nil, nil, nil, err
	}
	unswap := swapped(id, f)
	undo = func() error {
		if err := back(); err != nil {
			return err
		}
		unswap()
		return nil
	}
	return f, undo, done, nil
}

// relink puts cmroot's entry name back at rel, over the file there: the
// undo of a swap whose entry is the old inode. The entry stays, for the
// caller to drop.
func (c *Core) relink(name, rel string) error {
	tmp := c.tmpName("undo")
	if err := os.Link(c.cm.Path(name), tmp); err != nil {
		return err
	}
	if err := c.renameIn(tmp, rel, 0); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// renameIn renames tmp, a path in the temporary directory, to the tree's
// rel with renameat2's flags: 0 over the file there, RENAME_NOREPLACE
// only where rel is free, RENAME_EXCHANGE swapping the two (both names
// stay, each now naming the other's inode).
func (c *Core) renameIn(tmp, rel string, flags uint) error {
	return c.fs.With(rel, func(l at.Loc) error {
		return unix.Renameat2(unix.AT_FDCWD, tmp, l.Dir, l.Name, flags)
	})
}
