package fusefs

import (
	"context"
	"os"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/cmfs-project/cmfs/internal/at"
)

// The mount asks for FUSE_HANDLE_KILLPRIV_V2. Without it the kernel, which
// must know before every write whether the write drops the file's
// capabilities, asks the daemon for security.capability: a GETXATTR round
// trip per write, passthrough or not, that cost 4 KiB random writes four
// fifths of their speed. With it the superblock is SB_NOSEC, so an inode
// once checked is S_NOSEC and writes ask nothing; in exchange, clearing the
// set-ID bits that a write or truncation by a caller without CAP_FSETID
// must clear is the daemon's job (set-user-ID always, set-group-ID where
// the group may execute). The kernel says when — OPEN_KILL_SUIDGID on an
// O_TRUNC open, FATTR_KILL_SUIDGID on a truncate, WRITE_KILL_SUIDGID on a
// write — except for the writes it hands to the backing file itself
// (passthrough), which the daemon never sees. So:
//
//   - the handles of a file whose set-ID bits a write would clear are not
//     passed through: they are opened for direct I/O, their reads and
//     writes come to the daemon, and a write the kernel flags clears the
//     bits before it lands. The kernel refuses an open that is not passed
//     through of an inode it passes through (EIO), so a handle opened
//     while others are open is of their kind (register), and go-fuse,
//     which counts the inode's backing file over every handle, keeps its
//     count for a direct one too (notPassedThrough);
//   - an O_TRUNC open, and a truncate, the kernel flags clear them after;
//   - a change of owner clears them in the backing filesystem, as
//     natively.
//
// go-fuse hands a node a request's flags and caller, but not OPEN's open
// flags nor WRITE's write flags: gatedFS marks the requests that carry
// the kernel's word in killFlags, by their cancel channel, which is a
// request's own while it is served.
//
// Known limits: a file made set-ID (chmod) while it has handles passed
// through keeps its bits through the writes of those, and of every
// handle opened before the last of them closes; fallocate and
// copy_file_range into a set-ID file by a caller without CAP_FSETID keep
// them (the kernel flags neither); a set-ID file open through the mount,
// being direct I/O, cannot be mapped shared (ENODEV; a private mapping,
// as exec makes, works).

// killFlags are the requests being served whose caller, the kernel says,
// must lose the file's set-ID bits.
type killFlags struct{ m sync.Map }

// mark records that the request with cancel channel c carries the
// kernel's word, until the returned function is called.
func (k *killFlags) mark(c <-chan struct{}) (unmark func()) {
	k.m.Store(c, struct{}{})
	return func() { k.m.Delete(c) }
}

// of says whether the request ctx serves carries the kernel's word.
func (k *killFlags) of(ctx context.Context) bool {
	fc, ok := ctx.(*fuse.Context)
	if !ok {
		return false
	}
	_, ok = k.m.Load(fc.Cancel)
	return ok
}

// setIDClearable says whether a write by a caller without CAP_FSETID
// clears some of a regular file's set-ID bits in mode.
func setIDClearable(mode uint32) bool {
	return mode&syscall.S_IFMT == syscall.S_IFREG &&
		(mode&syscall.S_ISUID != 0 || mode&(syscall.S_ISGID|syscall.S_IXGRP) == syscall.S_ISGID|syscall.S_IXGRP)
}

// clearSetID clears the set-ID bits of the open file f that a write or
// truncation by a caller without CAP_FSETID clears.
func clearSetID(f *os.File) error {
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return err
	}
	if !setIDClearable(st.Mode) {
		return nil
	}
	mode := st.Mode &^ syscall.S_ISUID
	if mode&syscall.S_IXGRP != 0 {
		mode &^= syscall.S_ISGID
	}
	return syscall.Fchmod(int(f.Fd()), mode&0o7777)
}

// clearSetIDAt is clearSetID for the regular file rel of t.
func clearSetIDAt(t *at.Tree, rel string) error {
	f, err := t.Open(rel, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	return clearSetID(f)
}

// notPassedThrough takes passthrough back from the reply to an open that
// asked for direct I/O (register): go-fuse gives every handle of an inode
// the inode's backing file, counts it, and gives one count up at every
// release, so such a handle keeps its count (and the inode its backing
// file) while the kernel sends its reads and writes to the daemon.
func notPassedThrough(out *fuse.OpenOut) {
	if out.OpenFlags&fuse.FOPEN_DIRECT_IO != 0 {
		out.OpenFlags &^= fuse.FOPEN_PASSTHROUGH
		out.BackingID = 0
	}
}
