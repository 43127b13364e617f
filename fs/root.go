package fs

import (
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"unicode/utf8"

	"github.com/cespare/xxhash/v2"
	"github.com/cmfs-project/cmfs/cmroot"
	"github.com/cmfs-project/cmfs/journal"
	"golang.org/x/sys/unix"
)

// emptySum is the xxh64 of no bytes.
var emptySum = journal.Sum(nil)

// root is the state every node of one mount shares.
type root struct {
	backing string
	cm      *cmroot.Store
	log     *journal.Log
	exclude []string
	// hidden holds the backing-relative paths of the state directory and
	// cmroot when they live inside the backing directory.
	hidden map[string]bool
	// cmSameDev says cmroot is on the backing filesystem, so its entries
	// may share inodes with files in the tree.
	cmSameDev bool
	// tmpDir is where replacement inodes are made before they are renamed
	// into place: on the backing filesystem, invisible through the mount.
	tmpDir string

	// gate orders inode replacement against releases: a release holds it
	// shared until go-fuse has dropped the node's passthrough backing file,
	// a replacement holds it exclusively, so a new open can never inherit
	// a backing file that now belongs to cmroot.
	gate sync.RWMutex

	sums sumCache

	// inflight records changes under way (see inflight.go); nil in tests
	// that build a root by hand.
	inflight *inflight

	// links knows every tree name of multiply-linked files (links.go);
	// nil in tests that build a root by hand.
	links *linkIndex

	// pending are changes that took effect without their event (keep);
	// pendN is len(pending), read without the lock on every emit.
	pendMu  sync.Mutex
	pending []kept
	pendN   atomic.Int32

	// swaps maps an inode cmfs swapped in to the node it belongs to.
	swapMu sync.Mutex
	swaps  map[uint64]swap
}

type swap struct {
	n     *node
	btime unix.StatxTimestamp // tells the inode from a later one with its number
}

// swappedNode returns the node an inode at abs was swapped in for, with
// the inode's attributes, or nil.
func (r *root) swappedNode(abs string) (*node, *syscall.Stat_t) {
	r.swapMu.Lock()
	empty := len(r.swaps) == 0
	r.swapMu.Unlock()
	if empty {
		return nil, nil
	}
	var x unix.Statx_t
	if unix.Statx(unix.AT_FDCWD, abs, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_BASIC_STATS|unix.STATX_BTIME, &x) != nil {
		return nil, nil
	}
	r.swapMu.Lock()
	e, ok := r.swaps[x.Ino]
	r.swapMu.Unlock()
	if !ok || e.btime != x.Btime {
		return nil, nil
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(abs, &st); err != nil || st.Ino != x.Ino {
		return nil, nil
	}
	return e.n, &st
}

// abs returns the backing path of a mount-relative path.
func (r *root) abs(rel string) string { return filepath.Join(r.backing, rel) }

// excluded says whether rel lies in engine scratch space.
func (r *root) excluded(rel string) bool {
	if rel == "" {
		return false
	}
	for _, c := range strings.Split(rel, "/") {
		if strings.HasPrefix(c, RestoreStagingPrefix) {
			return true
		}
		for _, g := range r.exclude {
			if ok, _ := path.Match(g, c); ok {
				return true
			}
		}
	}
	return false
}

// restoring says whether rel lies in a restore's staging directory.
func restoring(rel string) bool {
	for _, c := range strings.Split(rel, "/") {
		if strings.HasPrefix(c, RestoreStagingPrefix) {
			return true
		}
	}
	return false
}

// journalable refuses, with EILSEQ, a change the journal could not record:
// events carry names as UTF-8 text, and a replica needs the exact name.
// Scratch space is not journaled and takes any name. As on filesystems that
// enforce UTF-8 names, the refusal comes before anything changes.
func (r *root) journalable(paths ...string) syscall.Errno {
	for _, p := range paths {
		if !utf8.ValidString(p) && !r.excluded(p) {
			return syscall.EILSEQ
		}
	}
	return 0
}

// isHidden says whether rel is the state directory or cmroot.
func (r *root) isHidden(rel string) bool { return r.hidden[rel] }

// emit journals events; it returns once they, and everything they name,
// are durable (see flush.go).
func (r *root) emit(ctx context.Context, events ...*journal.Event) error {
	var kind journal.Type // of the caller's change, for its failpoints
	if len(events) > 0 {
		kind = generic(events[0].Type)
	}
	var ks []kept
	if r.pendN.Load() > 0 {
		// Changes that are still to be journaled come first.
		var pre []*journal.Event
		pre, ks = r.takePending()
		events = append(pre, events...)
	}
	if len(events) == 0 {
		return nil
	}
	hit(kind, stepApplied)
	if err := r.flush(r.named(events)); err != nil {
		r.settle(ks, false)
		return err
	}
	hit(kind, stepFlushed)
	if err := r.log.Append(context.WithoutCancel(ctx), events...); err != nil {
		r.settle(ks, false)
		return fmt.Errorf("journal: %w", err)
	}
	hit(kind, stepJournaled)
	r.settle(ks, true)
	return nil
}

// fileEvent builds the event for a change to the file at rel: INSERT
// inside a table, the generic type t elsewhere.
func fileEvent(t journal.Type, rel string, files ...journal.File) *journal.Event {
	loc := journal.Locate(path.Dir(rel))
	if t == journal.Write && loc.Table != "" {
		t = journal.Insert
	}
	return &journal.Event{Type: t, Path: rel, DB: loc.DB, Table: loc.Table, Partition: loc.Partition, Files: files}
}

// dirEvent builds the event for creating (mk) or removing a directory,
// typed by its level in the warehouse layout.
func dirEvent(mk bool, rel string) *journal.Event {
	loc := journal.Locate(rel)
	t := map[journal.Level][2]journal.Type{
		journal.Database:  {journal.CreateDatabase, journal.DropDatabase},
		journal.Table:     {journal.CreateTable, journal.DropTable},
		journal.Partition: {journal.AddPartition, journal.DropPartition},
	}[loc.Level]
	if t[0] == "" {
		t = [2]journal.Type{journal.Mkdir, journal.Rmdir}
	}
	e := &journal.Event{Type: t[1], Path: rel, DB: loc.DB, Table: loc.Table, Partition: loc.Partition}
	if mk {
		e.Type = t[0]
	}
	return e
}

// state is what identifies one version of a file's content.
type state struct {
	ino, size    uint64
	mtime, ctime int64
}

func statState(st *syscall.Stat_t) state {
	return state{ino: st.Ino, size: uint64(st.Size), mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano()}
}

// sumCache remembers the checksum of content cmfs has already hashed, so
// deleting a file written through the mount costs no read of its data.
type sumCache struct {
	mu sync.Mutex
	m  map[uint64]cachedSum
}

type cachedSum struct {
	st  state
	sum string
}

const sumCacheMax = 1 << 20

func (c *sumCache) get(st state) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[st.ino]
	if !ok || e.st != st {
		return "", false
	}
	return e.sum, true
}

func (c *sumCache) put(st state, sum string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= sumCacheMax {
		c.m = make(map[uint64]cachedSum)
	}
	c.m[st.ino] = cachedSum{st, sum}
}

// sumFile returns the checksum and size of the open file f, from the cache
// when its state is unchanged since it was last hashed. A file that changes
// while it is hashed is hashed again.
func (r *root) sumFile(f *os.File) (string, *syscall.Stat_t, error) {
	for try := 0; ; try++ {
		var before syscall.Stat_t
		if err := syscall.Fstat(int(f.Fd()), &before); err != nil {
			return "", nil, err
		}
		if sum, ok := r.sums.get(statState(&before)); ok {
			return sum, &before, nil
		}
		sum, err := hashReaderAt(f, before.Size)
		if err != nil {
			return "", nil, err
		}
		var after syscall.Stat_t
		if err := syscall.Fstat(int(f.Fd()), &after); err != nil {
			return "", nil, err
		}
		if statState(&before) == statState(&after) || try == 2 {
			r.sums.put(statState(&after), sum)
			return sum, &after, nil
		}
	}
}

// sumPath is sumFile for a path.
func (r *root) sumPath(p string) (string, *syscall.Stat_t, error) {
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		return "", nil, err
	}
	if sum, ok := r.sums.get(statState(&st)); ok {
		return sum, &st, nil
	}
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NOATIME, 0)
	if err != nil {
		// O_NOATIME needs ownership or CAP_FOWNER.
		if f, err = os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0); err != nil {
			return "", nil, err
		}
	}
	defer f.Close()
	return r.sumFile(f)
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 1<<20); return &b }}

// mmapMin is the size from which a file is hashed through a memory
// mapping: it saves copying every page into a buffer first.
const mmapMin = 4 << 20

// hashReaderAt hashes the first size bytes of f without moving its offset.
func hashReaderAt(f *os.File, size int64) (string, error) {
	if size >= mmapMin && int64(int(size)) == size {
		if data, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED); err == nil {
			defer unix.Munmap(data)
			unix.Madvise(data, unix.MADV_SEQUENTIAL)
			if sum, ok := hashMapped(data); ok {
				return journal.FormatSum(sum), nil
			}
			// Truncated under us: hash what is there now by reading.
		}
	}
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	d := xxhash.New()
	if _, err := io.CopyBuffer(d, io.NewSectionReader(f, 0, size), *bp); err != nil {
		return "", err
	}
	return journal.FormatSum(d.Sum64()), nil
}

// hashMapped hashes mapped file data. A file truncated by another writer
// while it is hashed faults (SIGBUS) instead of crashing the mount.
func hashMapped(data []byte) (sum uint64, ok bool) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	return xxhash.Sum64(data), true
}
