package protect

import (
	"os"
	"sync"
)

// reaperQueue is how many names may wait for the reaper; a replacement
// that finds it full unlinks its leftover itself.
const reaperQueue = 1024

// A reaper unlinks, in a goroutine of its own, the names that
// replacements leave in the temporary directory: each names the old inode
// of a file an O_TRUNC open or a truncation to 0 swapped a new one under
// by exchange (cmroot held its content already, in another inode), once
// that change is journaled. By then cmroot keeps an entry of the same
// content, no handle has the inode open and the tree has no name for it,
// so the name is nobody's and its unlink need not delay the reply: on
// ext4 it took a sixth of a 1-thread overwrite's time. What a
// mount killed before its reaper ran leaves behind, the next mount
// removes (cleanDir).
type reaper struct {
	names chan string
	done  chan struct{}
	once  sync.Once
}

func newReaper() *reaper {
	r := &reaper{names: make(chan string, reaperQueue), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for p := range r.names {
			os.Remove(p)
		}
	}()
	return r
}

// remove unlinks p, later or, with no reaper or a full queue, now.
func (r *reaper) remove(p string) {
	if r != nil {
		select {
		case r.names <- p:
			return
		default:
		}
	}
	os.Remove(p)
}

// close returns once every name queued is unlinked. Nothing may be
// queued after it.
func (r *reaper) close() {
	if r == nil {
		return
	}
	r.once.Do(func() { close(r.names) })
	<-r.done
}
