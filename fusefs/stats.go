package fusefs

import (
	"sync/atomic"
	"syscall"

	"github.com/cmfs-project/cmfs/protect"
	"golang.org/x/sys/unix"
)

// op is an operation of the mount that Stats counts: every one that
// changes the tree or goes through the protection core, and the life of
// an open file. Lookups, reads of attributes and directories, xattrs and
// the writes the kernel passes through are not counted.
type op int

const (
	opCreate op = iota
	opOpen
	opUnlink
	opRename
	opMkdir
	opRmdir
	opLink
	opSymlink
	opMknod
	opTmpfile
	opTruncate // SETATTR with a size
	opSetattr  // SETATTR of mode, owner or times only
	opFlush
	opFsync
	opRelease
	numOps
)

var opNames = [numOps]string{"create", "open", "unlink", "rename", "mkdir", "rmdir", "link", "symlink",
	"mknod", "tmpfile", "truncate", "setattr", "flush", "fsync", "release"}

// numResults is the counters each op has: "ok" (index 0), one per errno
// below maxErrno (Linux names none at or above 134: EHWPOISON is 133),
// and "other".
const (
	maxErrno   = 134
	numResults = maxErrno + 1
)

// Stats counts the mount's operations by result. Counting is one atomic
// add into a fixed array, on the hot path of every operation: no lock,
// no map, no label lookup; a reader builds the labels (Ops).
type Stats struct {
	counts [numOps][numResults]atomic.Uint64
	core   atomic.Pointer[protect.Core]
}

// NewStats returns empty counters for Config.Stats.
func NewStats() *Stats { return &Stats{} }

// done counts op ending with errno (0: ok) and returns errno.
func (s *Stats) done(o op, errno syscall.Errno) syscall.Errno {
	i := uintptr(errno)
	if i >= maxErrno {
		i = maxErrno
	}
	s.counts[o][i].Add(1)
	return errno
}

// count is done for a deferred call on a named result.
func (s *Stats) count(o op, errno *syscall.Errno) { s.done(o, *errno) }

// OpCount is how many times an operation ended with one result.
type OpCount struct {
	Op     string // create, open, unlink, rename, mkdir, rmdir, link, symlink, mknod, tmpfile, truncate, setattr, flush, fsync, release
	Result string // "ok", the errno's name ("ENOENT"), or "other"
	N      uint64
}

// Ops returns the counts since Mount: every operation's "ok", 0
// included, and each error it has returned at least once.
func (s *Stats) Ops() []OpCount {
	var out []OpCount
	for o := range numOps {
		var other uint64
		for i := range numResults {
			n := s.counts[o][i].Load()
			if n == 0 && i != 0 {
				continue
			}
			if name := resultName(i); name != "other" {
				out = append(out, OpCount{Op: opNames[o], Result: name, N: n})
			} else {
				other += n
			}
		}
		if other > 0 {
			out = append(out, OpCount{Op: opNames[o], Result: "other", N: other})
		}
	}
	return out
}

// resultName names result counter i.
func resultName(i int) string {
	switch {
	case i == 0:
		return "ok"
	case i < maxErrno:
		if name := unix.ErrnoName(syscall.Errno(i)); name != "" {
			return name
		}
	}
	return "other"
}

// InFlight is the protection core's in-flight intents
// (protect.Core.InFlight), 0 before Mount has opened it.
func (s *Stats) InFlight() int {
	if c := s.core.Load(); c != nil {
		return c.InFlight()
	}
	return 0
}

// Checksummed is what the protection core's checksums of file content
// came to (protect.Core.Checksummed), zeros before Mount has opened it.
func (s *Stats) Checksummed() (read, kept int64) {
	if c := s.core.Load(); c != nil {
		return c.Checksummed()
	}
	return 0, 0
}
