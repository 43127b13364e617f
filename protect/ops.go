package protect

import (
	"context"
	"fmt"
	"os"
	"path"
	"syscall"
	"unicode/utf8"

	"github.com/cmfs-project/cmfs/cmroot"
	"github.com/cmfs-project/cmfs/internal/at"
	"github.com/cmfs-project/cmfs/journal"
	"golang.org/x/sys/unix"
)

// Use says how a file is in use through the mount: the handles open on it
// and how many of them write. The adapter knows it and holds it steady
// (the node's lock) while the core decides by it: a file still written to
// is copied, never moved or linked, into cmroot.
type Use struct {
	Opens, Writers int
}

// Caller is who asked for an operation that creates a file: as root, cmfs
// gives new files the owner the kernel would give the caller's.
type Caller struct {
	Uid, Gid uint32
	Known    bool
}

// Own gives the file rel of t, just made by the server, the owner the
// kernel gives a file its caller makes: the caller's user, and the
// caller's group unless the file's directory hands down its own
// (set-group-ID). chown clears the set-id bits of a file, even root's; the
// caller made the file with them, as its owner, and keeps them, as
// natively. A chown that would change nothing is not made.
//
// Known limit: natively a caller outside a set-group-ID directory's group
// and without CAP_FSETID loses the S_ISGID it asks for on a new file
// there; through the mount it keeps it.
func (cl Caller) Own(t *at.Tree, rel string) { cl.own(t, rel, parent(rel), -1) }

// OwnFD is Own of the open file fd, made in the directory dir of t (a
// file O_TMPFILE made has no name).
func (cl Caller) OwnFD(t *at.Tree, dir string, fd int) { cl.own(t, "", dir, fd) }

// The server's own ids, which never change: every create asks.
var (
	serverUID = os.Getuid()
	serverGID = uint32(os.Getegid())
)

// own is Own of rel, or of the descriptor fd where it is not -1, made in
// the directory dir.
func (cl Caller) own(t *at.Tree, rel, dir string, fd int) {
	if !cl.Known || serverUID != 0 {
		return
	}
	var st syscall.Stat_t
	var err error
	if fd >= 0 {
		err = syscall.Fstat(fd, &st)
	} else {
		err = t.Lstat(rel, &st)
	}
	if err != nil {
		return
	}
	gid := cl.Gid
	if st.Gid != gid && inheritsGroup(t, dir, &st) {
		gid = st.Gid
	}
	if st.Uid == cl.Uid && st.Gid == gid {
		return
	}
	setid := st.Mode&(syscall.S_ISUID|syscall.S_ISGID) != 0 && st.Mode&syscall.S_IFMT != syscall.S_IFLNK
	if fd >= 0 {
		err = syscall.Fchown(fd, int(cl.Uid), int(gid))
	} else {
		err = t.Lchown(rel, int(cl.Uid), int(gid))
	}
	if err != nil || !setid {
		return
	}
	if fd >= 0 {
		syscall.Fchmod(fd, st.Mode&0o7777)
	} else {
		t.Chmod(rel, st.Mode&0o7777)
	}
}

// inheritsGroup says whether the file st, just made by the server in the
// directory dir, took its group from dir, as a set-group-ID directory
// hands it down: its group is not the server's, which only such a
// directory gives (or a filesystem mounted grpid), or dir is
// set-group-ID.
func inheritsGroup(t *at.Tree, dir string, st *syscall.Stat_t) bool {
	if st.Gid != serverGID {
		return true
	}
	var dst syscall.Stat_t
	return t.Lstat(dir, &dst) == nil && dst.Mode&syscall.S_ISGID != 0
}

// parent is the directory of rel, "" for the tree's top.
func parent(rel string) string {
	if dir := path.Dir(rel); dir != "." {
		return dir
	}
	return ""
}

// leaving says how to preserve the file st, in use as u, as its name goes
// away: by h, unless the inode can still change after — it is open for
// writing, or has other links — and a cmroot entry must never be such an
// inode: then by copy.
func (c *Core) leaving(u Use, st *syscall.Stat_t, h how) how {
	switch {
	case u.Writers > 0:
		return byCopy
	case c.treeLinks(st) > 1:
		return byCopyIdle
	}
	return h
}

// Mkdir makes the directory rel with mode, owned by the caller.
func (c *Core) Mkdir(ctx context.Context, rel string, mode uint32, cl Caller) error {
	ex, err := c.admit(rel, syscall.EPERM)
	if err != nil {
		return err
	}
	if ex {
		return c.mkdir(rel, mode, cl)
	}
	in := intent{Type: journal.Mkdir, Path: rel}
	slot, done, err := c.intend(&in)
	if err != nil {
		return err
	}
	defer done()
	if err := c.mkdir(rel, mode, cl); err != nil {
		return err
	}
	if err := c.emit(ctx, dirEvent(true, rel)); err != nil {
		if c.fs.Rmdir(rel) != nil {
			c.keep(slot, in)
		}
		return err
	}
	return nil
}

func (c *Core) mkdir(rel string, mode uint32, cl Caller) error {
	if err := c.fs.Mkdir(rel, mode); err != nil {
		return err
	}
	cl.Own(c.fs, rel)
	return nil
}

// Rmdir removes the empty directory rel: one structural event (rm -r has
// journaled a DELETE for every file below first).
func (c *Core) Rmdir(ctx context.Context, rel string) error {
	ex, err := c.admit(rel, syscall.ENOENT)
	if err != nil {
		return err
	}
	if ex {
		return c.fs.Rmdir(rel)
	}
	in := intent{Type: journal.Rmdir, Path: rel}
	slot, done, err := c.intend(&in)
	if err != nil {
		return err
	}
	defer done()
	var st syscall.Stat_t
	if err := c.fs.Lstat(rel, &st); err != nil {
		return err
	}
	if err := c.fs.Rmdir(rel); err != nil {
		return err
	}
	if err := c.emit(ctx, dirEvent(false, rel)); err != nil {
		// Put the empty directory back as it was.
		if c.fs.Mkdir(rel, st.Mode&07777) != nil || c.fs.Lchown(rel, int(st.Uid), int(st.Gid)) != nil {
			c.keep(slot, in)
		}
		return err
	}
	return nil
}

// Unlink removes the name rel of a file in use as u. A regular file's
// original goes to cmroot: moved there (the move is the unlink), or copied
// when the inode can still change.
func (c *Core) Unlink(ctx context.Context, rel string, u Use) error {
	ex, err := c.admit(rel, syscall.ENOENT)
	if err != nil {
		return err
	}
	if ex {
		return c.fs.Unlink(rel)
	}
	var st syscall.Stat_t
	if err := c.fs.Lstat(rel, &st); err != nil {
		return err
	}
	in := intent{Type: journal.Delete, Path: rel}
	h := c.leaving(u, &st, byMove)
	var sum string // of the file moved, taken for the intent
	var cur *syscall.Stat_t
	if isReg(&st) && h == byMove {
		// The move is the unlink: the intent names its entry before it
		// happens.
		var err error
		if sum, cur, err = c.sumStat(rel, &st); err == nil {
			in.Orig = &journal.File{Path: rel, Size: cur.Size, XXH64: sum, CM: cmroot.Name(sum, cur.Size)}
		}
	}
	slot, done, err := c.intend(&in)
	if err != nil {
		return err
	}
	defer done()
	if !isReg(&st) {
		target, _ := c.fs.Readlink(rel)
		if err := c.fs.Unlink(rel); err != nil {
			return err
		}
		if err := c.emit(ctx, fileEvent(journal.Delete, rel)); err != nil {
			if st.Mode&syscall.S_IFMT != syscall.S_IFLNK || c.fs.Symlink(target, rel) != nil {
				c.keep(slot, in)
			}
			return err
		}
		return nil
	}
	var orig preserved
	if in.Orig != nil {
		// The file the intent names, not one checksummed again.
		orig, err = c.preserveSummed(rel, h, sum, cur)
	} else {
		orig, err = c.preserve(rel, h)
	}
	if err != nil {
		return err
	}
	orig.Path = rel
	if err := c.intendOrig(slot, &in, rel, orig); err != nil {
		if c.undo(orig, rel) != nil {
			c.keep(slot, in)
		}
		return err
	}
	if h != byMove {
		if err := c.fs.Unlink(rel); err != nil {
			c.undo(orig, "")
			return err
		}
	}
	if err := c.emit(ctx, fileEvent(journal.Delete, rel, orig.File)); err != nil {
		if c.undo(orig, rel) != nil {
			c.keep(slot, in)
		}
		return err
	}
	c.unlinkedName(rel, &st)
	return nil
}

// Rename renames oldRel to newRel with rename(2)'s flags; target is the
// use of the file it replaces, if any. The replaced regular file is kept
// in cmroot first; a tree leaving for scratch space is copied into cmroot;
// one arriving from it is journaled as new content. Should the event not
// be journaled, the rename is undone.
func (c *Core) Rename(ctx context.Context, oldRel, newRel string, flags uint32, target Use) error {
	if c.isHidden(oldRel) || c.isHidden(newRel) {
		return syscall.EPERM
	}
	if err := c.journalable(oldRel, newRel); err != nil {
		return err
	}
	oldEx, newEx := c.excluded(oldRel), c.excluded(newRel)
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
		if slot, done, err = c.intend(&in); err != nil {
			return err
		}
		defer done()
	}

	var src, tst syscall.Stat_t
	if err := c.fs.Lstat(oldRel, &src); err != nil {
		return err
	}
	targetExists := c.fs.Lstat(newRel, &tst) == nil
	if targetExists && tst.Ino == src.Ino && tst.Dev == src.Dev && flags&unix.RENAME_EXCHANGE == 0 {
		// Two names of one inode: rename(2) does nothing, and so do we.
		return c.fs.Rename(oldRel, newRel, uint(flags))
	}
	// Leaving the protected tree for scratch space is a delete: keep the
	// originals before they become unprotected.
	var events []*journal.Event
	var kept []preserved
	if !oldEx && newEx {
		var err error
		if events, kept, err = c.preserveTree(oldRel); err != nil {
			return err
		}
	}
	// The replaced file, if any.
	var replaced *preserved
	if flags&unix.RENAME_NOREPLACE == 0 && flags&unix.RENAME_EXCHANGE == 0 && !newEx &&
		targetExists && isReg(&tst) && src.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		p, err := c.preserve(newRel, c.leaving(target, &tst, byLink))
		if err != nil {
			c.undoAll(kept)
			return err
		}
		p.Path = newRel
		replaced = &p
		if err := c.intendOrig(slot, &in, newRel, p); err != nil {
			c.undo(p, "")
			c.undoAll(kept)
			return err
		}
	}
	// Should the event not be journaled, the rename is undone: the
	// replaced inode is held by a second name until then.
	var hold string
	if targetExists && !newEx && flags&(unix.RENAME_NOREPLACE|unix.RENAME_EXCHANGE) == 0 &&
		tst.Mode&syscall.S_IFMT != syscall.S_IFDIR && c.tmpDir != "" {
		hold = c.tmpName("hold")
		if err := c.fs.With(newRel, func(l at.Loc) error { return unix.Linkat(l.Dir, l.Name, unix.AT_FDCWD, hold, 0) }); err != nil {
			if replaced != nil {
				c.undo(*replaced, "")
			}
			c.undoAll(kept)
			return err
		}
		defer os.Remove(hold)
	}
	if err := c.fs.Rename(oldRel, newRel, uint(flags)); err != nil {
		if replaced != nil {
			c.undo(*replaced, "")
		}
		c.undoAll(kept)
		return err
	}
	// fail undoes the rename after err, or keeps its intent if it cannot.
	fail := func(err error) error {
		if c.unrename(oldRel, newRel, flags, targetExists, &tst, hold, replaced) != nil {
			c.keep(slot, in)
			return err
		}
		if replaced != nil {
			c.undo(*replaced, "")
		}
		c.undoAll(kept)
		return err
	}
	var over *syscall.Stat_t // what the rename replaced, if anything
	if targetExists && flags&unix.RENAME_NOREPLACE == 0 {
		over = &tst
	}
	c.renamedNames(oldRel, newRel, &src, over, flags)
	switch {
	case oldEx && newEx:
		return nil
	case oldEx:
		// Arriving from scratch space: the content is new to the tree.
		var err error
		if events, err = c.arrivals(newRel); err != nil {
			return fail(err)
		}
		if restoring(oldRel) {
			for _, e := range events {
				if e.Type == journal.Insert || e.Type == journal.Write {
					e.Type = journal.Restore
				}
			}
		}
		if replaced != nil && len(events) > 0 {
			events[0].Files = append(events[0].Files, replaced.File)
		}
	case newEx:
		// events were built before the rename.
	default:
		e := renameEvent(oldRel, newRel, &src)
		if isReg(&src) {
			sum, st, err := c.sumPath(newRel)
			if err != nil {
				return fail(err)
			}
			e.Files = append(e.Files, journal.File{Path: newRel, Size: st.Size, XXH64: sum})
		}
		if replaced != nil {
			e.Files = append(e.Files, replaced.File)
		}
		if flags&unix.RENAME_EXCHANGE != 0 {
			e.Target = "exchange"
		}
		events = append(events, e)
	}
	if err := c.emit(ctx, events...); err != nil {
		return fail(err)
	}
	return nil
}

// unrename undoes a rename of oldRel to newRel: the renamed object goes
// back, and what it replaced (st, when existed) is put back from hold,
// its second name, or else from its cmroot entry replaced.
func (c *Core) unrename(oldRel, newRel string, flags uint32, existed bool, st *syscall.Stat_t, hold string, replaced *preserved) error {
	if flags&unix.RENAME_EXCHANGE != 0 {
		return c.fs.Rename(newRel, oldRel, unix.RENAME_EXCHANGE)
	}
	if err := c.fs.Rename(newRel, oldRel, unix.RENAME_NOREPLACE); err != nil {
		return err
	}
	switch {
	case !existed:
		return nil
	case hold != "":
		return c.renameIn(hold, newRel, unix.RENAME_NOREPLACE)
	case st.Mode&syscall.S_IFMT == syscall.S_IFDIR:
		if err := c.fs.Mkdir(newRel, st.Mode&07777); err != nil {
			return err
		}
		return c.fs.Lchown(newRel, int(st.Uid), int(st.Gid))
	case replaced != nil:
		return c.fs.WithPath(newRel, func(p string) error { return c.cm.Restore(replaced.CM, p) })
	}
	return fmt.Errorf("rename: cannot put back what %s replaced", newRel)
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

// Link gives the file at oldRel, a name in the tree, the new name rel,
// and returns the file's attributes.
func (c *Core) Link(ctx context.Context, oldRel, rel string) (*syscall.Stat_t, error) {
	ex, err := c.admit(rel, syscall.EPERM)
	if err != nil {
		return nil, err
	}
	if !ex && !utf8.ValidString(oldRel) {
		return nil, syscall.EILSEQ
	}
	if !ex {
		_, done, err := c.intend(&intent{Type: journal.Link, Path: oldRel, NewPath: rel})
		if err != nil {
			return nil, err
		}
		defer done()
	}
	if err := c.fs.Link(oldRel, rel); err != nil {
		return nil, err
	}
	var st syscall.Stat_t
	if err := c.fs.Lstat(rel, &st); err != nil {
		c.fs.Unlink(rel)
		return nil, err
	}
	c.linkedName(oldRel, rel, &st)
	if ex {
		return &st, nil
	}
	e := fileEvent(journal.Link, oldRel)
	e.NewPath = rel
	if isReg(&st) {
		sum, cur, err := c.sumPath(rel)
		if err != nil {
			c.fs.Unlink(rel)
			return nil, err
		}
		e.Files = []journal.File{{Path: rel, Size: cur.Size, XXH64: sum}}
	}
	if err := c.emit(ctx, e); err != nil {
		c.fs.Unlink(rel)
		return nil, err
	}
	return &st, nil
}

// Symlink makes rel a symbolic link to target, owned by the caller.
func (c *Core) Symlink(ctx context.Context, target, rel string, cl Caller) error {
	ex, err := c.admit(rel, syscall.EPERM)
	if err != nil {
		return err
	}
	if !utf8.ValidString(target) && !ex {
		return syscall.EILSEQ
	}
	if ex {
		return c.symlink(target, rel, cl)
	}
	_, done, err := c.intend(&intent{Type: journal.Symlink, Path: rel, Target: target})
	if err != nil {
		return err
	}
	defer done()
	if err := c.symlink(target, rel, cl); err != nil {
		return err
	}
	e := fileEvent(journal.Symlink, rel)
	e.Target = target
	if err := c.emit(ctx, e); err != nil {
		c.fs.Unlink(rel)
		return err
	}
	return nil
}

func (c *Core) symlink(target, rel string, cl Caller) error {
	if err := c.fs.Symlink(target, rel); err != nil {
		return err
	}
	cl.Own(c.fs, rel)
	return nil
}

// treeLinks returns how many links a file has outside cmroot.
func (c *Core) treeLinks(st *syscall.Stat_t) uint64 {
	return st.Nlink - uint64(c.CMLinks(st.Mode, st.Ino, uint32(st.Nlink)))
}

// CMLinks returns how many of a file's nlink links live in cmroot: links
// no program may see, so that a preserved file looks deleted.
func (c *Core) CMLinks(mode uint32, ino uint64, nlink uint32) uint32 {
	if !c.cmSameDev || mode&syscall.S_IFMT != syscall.S_IFREG {
		return 0
	}
	return min(c.cm.Links(ino), nlink)
}
