package fusefs

import (
	"os"
	"sync"
	"syscall"

	"github.com/cmfs-project/cmfs/protect"
	"golang.org/x/sys/unix"
)

// root is the state every node of one mount shares: the protection core,
// and the identity of files whose inode cmfs replaced.
type root struct {
	core  *protect.Core
	stats *Stats

	// kills are the requests whose caller must lose set-ID bits (setid.go).
	kills killFlags

	// swaps maps an inode cmfs swapped in to the node it belongs to.
	swapMu sync.Mutex
	swaps  map[uint64]swap
}

type swap struct {
	n     *node
	btime unix.StatxTimestamp // tells the inode from a later one with its number
}

// swappedNode returns the node an inode at rel was swapped in for, with
// the inode's attributes, or nil.
func (r *root) swappedNode(rel string) (*node, *syscall.Stat_t) {
	r.swapMu.Lock()
	empty := len(r.swaps) == 0
	r.swapMu.Unlock()
	if empty {
		return nil, nil
	}
	st, btime, err := r.statx(rel)
	if err != nil {
		return nil, nil
	}
	r.swapMu.Lock()
	e, ok := r.swaps[st.Ino]
	r.swapMu.Unlock()
	if !ok || e.btime != btime {
		return nil, nil
	}
	return e.n, st
}

// Swapped records that the node's name now holds the inode open as f
// (protect.Identity), and returns what undoes the record.
func (n *node) Swapped(f *os.File) (undo func()) {
	var x unix.Statx_t
	if unix.Statx(int(f.Fd()), "", unix.AT_EMPTY_PATH, unix.STATX_INO|unix.STATX_BTIME, &x) != nil {
		return func() {}
	}
	r := n.r
	r.swapMu.Lock()
	defer r.swapMu.Unlock()
	old := n.swapped.Swap(x.Ino)
	prev, hadPrev := r.swaps[old]
	hadPrev = hadPrev && old != 0 && prev.n == n
	if hadPrev {
		delete(r.swaps, old)
	}
	if r.swaps == nil {
		r.swaps = make(map[uint64]swap)
	}
	r.swaps[x.Ino] = swap{n: n, btime: x.Btime}
	return func() {
		r.swapMu.Lock()
		defer r.swapMu.Unlock()
		if e, ok := r.swaps[x.Ino]; ok && e.n == n {
			delete(r.swaps, x.Ino)
		}
		n.swapped.Store(old)
		if hadPrev {
			r.swaps[old] = prev
		}
	}
}
