package journal

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// ErrNoSpace is wrapped by Admit and Append when the journal could not
// keep its reserve: the file system is full. It wraps syscall.ENOSPC.
var ErrNoSpace = fmt.Errorf("journal: reserve: %w", syscall.ENOSPC)

// DefaultReserve is the space Options.Reserve keeps by default: room for
// a few thousand events, far more than the operations admitted at one
// time can append.
const DefaultReserve = 4 << 20

// minReserve is the smallest reserve a Log keeps: a few commits' worth.
const minReserve = 128 << 10

// reserve keeps space allocated beyond the journal's high-water mark, so
// that a commit never needs a block the file system no longer has.
//
// bbolt appends pages at the high-water mark (tx.Size()) and grows the
// file by truncate, which allocates nothing; the pages are allocated when
// they are first written, at commit. The reserve allocates them ahead of
// time with fallocate(FALLOC_FL_KEEP_SIZE), beyond the file's end if need
// be, so the file's size and content are unchanged: bbolt never sees it.
// After a commit that moved the high-water mark, the reserve is refilled;
// if that fails, the reserve is short and Admit refuses new operations
// until a refill succeeds (space was freed). Blocks below the allocated
// end stay allocated: bbolt never shrinks its file.
type reserve struct {
	f    *os.File // nil: the file system cannot preallocate; no reserve
	want int64

	mu    sync.Mutex
	end   int64 // bytes [0, end) of the file are allocated
	short atomic.Bool
	// fallocate is the system call, a seam for tests.
	fallocate func(fd int, mode uint32, off, size int64) error
}

// allocate makes sure bytes [0, to) are allocated. r.mu must be held.
func (r *reserve) allocate(to int64) error {
	if to <= r.end {
		return nil
	}
	if err := r.fallocate(int(r.f.Fd()), unix.FALLOC_FL_KEEP_SIZE, r.end, to-r.end); err != nil {
		return err
	}
	r.end = to
	return nil
}

// refill brings the reserve back to want beyond hwm, allocating a quarter
// more so that it runs once per want/4 bytes of growth, not per commit.
// It reports whether the reserve is full.
func (r *reserve) refill(hwm int64) bool {
	if r.f == nil {
		return true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if hwm+r.want <= r.end {
		r.short.Store(false)
		return true
	}
	err := r.allocate(hwm + r.want + r.want/4)
	if err != nil {
		err = r.allocate(hwm + r.want)
	}
	r.short.Store(err != nil)
	return err == nil
}

// room makes sure a commit that writes up to need bytes of new pages
// beyond hwm finds them allocated.
func (r *reserve) room(hwm, need int64) error {
	if r.f == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	to := hwm + need
	if to <= r.end {
		return nil
	}
	// A quarter of the reserve ahead, so that commits growing what is
	// pending by a page or two do not each make a system call; exactly
	// what is needed where that much is not free.
	err := r.allocate(to + r.want/4)
	if err != nil {
		err = r.allocate(to)
	}
	if err != nil {
		r.short.Store(true)
		if errors.Is(err, syscall.ENOSPC) {
			return fmt.Errorf("commit of %d bytes: %w", need, ErrNoSpace)
		}
		return fmt.Errorf("journal: preallocate %d bytes: %w", need, err)
	}
	return nil
}

// commitNeed bounds the new pages bbolt may write to apply records totalling
// n bytes, k of them, large of them bigger than a quarter page: bbolt copies
// on write every leaf and branch page on the path to the appended keys, so
// twice the records (leaves split half full at worst), a few branch pages,
// and an overflow page's rounding per large record.
func commitNeed(n, k, large int, pageSize int) int64 {
	return 2*(int64(n)+int64(k)*16) + int64(large+8)*int64(pageSize)
}

// newReserve sets up the reserve of the journal file at path, want bytes
// beyond hwm. A file system without fallocate gets no reserve (nil f): its
// commits can still fail with ENOSPC, and callers undo what they can.
func newReserve(path string, want, hwm int64, fallocate func(int, uint32, int64, int64) error) (*reserve, error) {
	if fallocate == nil {
		fallocate = unix.Fallocate
	}
	r := &reserve{want: max(want, minReserve), fallocate: fallocate}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	r.f = f
	r.mu.Lock()
	err = r.allocate(hwm + r.want)
	r.mu.Unlock()
	switch {
	case errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.ENOSYS):
		f.Close()
		r.f = nil
	case err != nil:
		// A full file system at open: the mount comes up, and refuses
		// changes until there is room.
		r.short.Store(true)
	}
	return r, nil
}

func (r *reserve) close() error {
	if r == nil || r.f == nil {
		return nil
	}
	return r.f.Close()
}
