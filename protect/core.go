package protect

import (
	"context"
	"errors"
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
	"time"
	"unicode/utf8"

	"github.com/cmfs-project/cmfs/cmroot"
	"github.com/cmfs-project/cmfs/internal/at"
	"github.com/cmfs-project/cmfs/internal/checksum"
	"github.com/cmfs-project/cmfs/internal/pagecache"
	"github.com/cmfs-project/cmfs/internal/statedir"
	"github.com/cmfs-project/cmfs/journal"
	"golang.org/x/sys/unix"
)

// emptySum is the xxh64 of no bytes.
var emptySum = journal.Sum(nil)

// Options say what a Core protects and where it keeps its state.
type Options struct {
	// Backing is the protected directory.
	Backing string
	// State is the state directory: the in-flight table and the
	// directory replacement inodes are made in live there.
	State string
	// Exclude lists globs of path components that are not protected
	// (nil: none; callers pass statedir.DefaultExcludes).
	Exclude []string
	// Hidden lists directories (the state directory, cmroot) that are not
	// part of the tree even when they lie inside Backing.
	Hidden []string

	// Reconcile makes Open compare the whole tree with the journal, after
	// the in-flight table's changes are journaled, and journal what
	// differs (reconcile.go): the previous mount did not stop cleanly and
	// the machine has booted since (statedir.Record.LostWrites), so a
	// power loss may have taken back events and intents.
	Reconcile bool
	// Since is when that mount started (zero: unknown): a file no event
	// names with an older ctime predates it.
	Since time.Time
	// ReconcileMargin is DefaultReconcileMargin when 0.
	ReconcileMargin time.Duration
	// Tail is what the journal's tail check found as it opened
	// (TailCheck), nil if none ran. Open reports it, and reconciles when
	// the check dropped events or found the tree moved on: the disk lost
	// writes, whatever the mount record says.
	Tail *TailReport
}

// Core is the protection of one backing directory: each of its operations
// takes paths relative to the backing directory, decides what must be
// preserved, preserves it, applies the change, journals it and, where a
// step fails, undoes what the earlier steps did. It knows nothing of FUSE:
// the adapter in package fusefs calls it, and tests call it directly.
type Core struct {
	backing string
	// fs makes every call on the backing tree relative to its root's
	// descriptor (package at): no backing path is ever longer than the
	// mount's own.
	fs      *at.Tree
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
	// leftovers unlinks the old inodes' names that replacements by
	// exchange leave in tmpDir, off the operations' path.
	leftovers *reaper

	// Gate orders inode replacement against releases: a release holds it
	// shared until the adapter has dropped the file's passthrough backing
	// file, and a change that may replace the inode reads the file's use
	// holding it exclusively (Prepared.Use), so a new open can never
	// inherit a backing file that now belongs to cmroot. The adapter reads
	// the use with the file's lock held, under which no handle is counted
	// in, and a release counts its handle out without that lock: every
	// release that began has ended when the use is read, and when it shows
	// no handle open, none can begin until the lock is let go of. The Gate
	// is held for that read alone: never while a release or a replacement
	// waits for a file's lock or an event to be durable.
	Gate sync.RWMutex

	sums sumCache
	// hashed counts the bytes checksummed from files so far: what tests
	// of the checksum's cost look at; rehashed, the bytes of files
	// checksummed without a read, from block sums cached (rehash).
	hashed, rehashed atomic.Int64

	// inflight records changes under way (see inflight.go); nil in tests
	// that build a Core by hand.
	inflight *inflight

	// links knows every tree name of multiply-linked files (links.go);
	// nil in tests that build a Core by hand.
	links *linkIndex

	// pending are changes that took effect without their event (keep);
	// pendN is len(pending), read without the lock on every emit.
	pendMu  sync.Mutex
	pending []kept
	pendN   atomic.Int32
}

// Recovery is what Open found a process that died had left.
type Recovery struct {
	// Journaled is how many changes it journaled for them.
	Journaled int
	// Damaged is how many records of the in-flight table could not be
	// read: changes made then may be missing from the journal.
	Damaged int

	// TailDropped is how many events of the journal's unverified tail its
	// check dropped (Options.Tail), TailWhy what the disk lacked for the
	// first of them.
	TailDropped int
	TailWhy     string

	// Reconciled says Open compared the tree with the journal
	// (Options.Reconcile); the counts are what it journaled: files
	// whose content was not their last word (Changed), files and
	// symlinks no event named (Added), paths whose last word the tree
	// lacked (Removed), and of the files changed or removed, those whose
	// last content is neither in cmroot nor anywhere in the tree (Lost).
	// Walked files and symlinks were stat'ed, Hashed of them read.
	Reconciled                    bool
	Changed, Added, Removed, Lost int
	Walked, Hashed                int
}

// Findings is the line an operator is shown, "" when there is nothing.
func (r Recovery) Findings(state string) string {
	var parts []string
	if r.Journaled > 0 {
		parts = append(parts, fmt.Sprintf("journaled %d change(s) a dead mount left without their events", r.Journaled))
	}
	if r.Damaged > 0 {
		parts = append(parts, fmt.Sprintf("in-flight table %s: %d damaged record(s) ignored: changes a dead mount made then may be missing from the journal", filepath.Join(state, statedir.InflightFile), r.Damaged))
	}
	if r.TailDropped > 0 {
		parts = append(parts, fmt.Sprintf("journal: dropped the last %d event(s), whose group flush never finished and whose content the disk lacks (%s)", r.TailDropped, r.TailWhy))
	}
	if r.Changed+r.Added+r.Removed > 0 {
		parts = append(parts, fmt.Sprintf("after an unclean shutdown and a reboot the tree differed from the journal: journaled %d changed, %d new and %d removed path(s)", r.Changed, r.Added, r.Removed))
	}
	if r.Lost > 0 {
		parts = append(parts, fmt.Sprintf("content lost: %d file(s) whose last journaled content is neither in cmroot nor in the tree", r.Lost))
	}
	return strings.Join(parts, "; ")
}

// Open returns the protection of opts.Backing, journaling into j and
// preserving into store (both the caller's, open until after Close). It
// first journals the changes a process that died left without their
// events (the in-flight table), and says what it found.
func Open(ctx context.Context, opts Options, j *journal.Log, store *cmroot.Store) (*Core, Recovery, error) {
	backing, err := filepath.Abs(opts.Backing)
	if err != nil {
		return nil, Recovery{}, err
	}
	c := &Core{backing: backing, cm: store, log: j, exclude: opts.Exclude, hidden: map[string]bool{}}
	var bst, cst syscall.Stat_t
	if err := syscall.Stat(backing, &bst); err != nil {
		return nil, Recovery{}, fmt.Errorf("backing %s: %w", backing, err)
	}
	if c.fs, err = at.Open(backing); err != nil {
		return nil, Recovery{}, fmt.Errorf("backing: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			c.leftovers.close()
			c.fs.Close()
		}
	}()
	for _, d := range opts.Hidden {
		abs, err := filepath.Abs(d)
		if err != nil {
			return nil, Recovery{}, err
		}
		if rel, err := filepath.Rel(backing, abs); err == nil && rel != "." && !strings.HasPrefix(rel, "..") {
			c.hidden[filepath.ToSlash(rel)] = true
		}
	}
	if err := syscall.Stat(store.Dir(), &cst); err != nil {
		return nil, Recovery{}, fmt.Errorf("cmroot %s: %w", store.Dir(), err)
	}
	c.cmSameDev = cst.Dev == bst.Dev
	c.links = newLinkIndex(c.fs, func(rel string) bool { return c.isHidden(rel) || c.excluded(rel) }, c.treeLinks)
	// Replacement inodes are made in the state directory when it shares
	// the backing filesystem; elsewhere O_TRUNC copies the original.
	tmp := filepath.Join(opts.State, statedir.TmpDir)
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return nil, Recovery{}, err
	}
	var tst syscall.Stat_t
	if syscall.Stat(tmp, &tst) == nil && tst.Dev == bst.Dev {
		c.tmpDir = tmp
		cleanDir(tmp)
		c.leftovers = newReaper()
	}
	t, left, damaged, err := openInflight(filepath.Join(opts.State, statedir.InflightFile))
	if err != nil {
		return nil, Recovery{}, fmt.Errorf("in-flight table: %w", err)
	}
	c.inflight = t
	// The newest event that survived, before recovery adds any.
	var newest time.Time
	if last := j.Last(); last > 0 {
		e, err := j.Get(last)
		if err != nil {
			t.close()
			return nil, Recovery{}, err
		}
		newest = e.Time
	}
	recovered, err := c.recover(ctx, left)
	if err != nil {
		t.close()
		return nil, Recovery{}, fmt.Errorf("recover changes a dead mount left unjournaled: %w", err)
	}
	rec := Recovery{Journaled: len(recovered), Damaged: damaged}
	if tr := opts.Tail; tr != nil {
		rec.TailDropped, rec.TailWhy = tr.Dropped(), tr.Why
	}
	if opts.Reconcile || rec.TailDropped > 0 || (opts.Tail != nil && opts.Tail.Moved > 0) {
		r, err := c.reconcile(ctx, recovered, newest, opts.Since, opts.ReconcileMargin)
		if err != nil {
			t.close()
			return nil, rec, fmt.Errorf("reconcile the tree with the journal: %w", err)
		}
		rec.Reconciled = true
		rec.Changed, rec.Added, rec.Removed, rec.Lost = r.changed, r.added, r.removed, r.lost
		rec.Walked, rec.Hashed = r.walked, r.hashed
	}
	ok = true
	return c, rec, nil
}

// Close closes the in-flight table and the backing tree, once the
// replacements' leftovers are unlinked. Every handle must be released.
func (c *Core) Close() error {
	c.leftovers.close()
	return errors.Join(c.inflight.close(), c.fs.Close())
}

// cleanDir removes what a previous mount left in its temporary directory.
func cleanDir(dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		os.RemoveAll(filepath.Join(dir, e.Name()))
	}
}

// Checksummed returns how many bytes of file content the mount has
// checksummed so far by reading them, and how many it took from the
// block sums of earlier checksums instead (a close after a write into
// part of a large file, on a filesystem with reflinks).
func (c *Core) Checksummed() (read, kept int64) { return c.hashed.Load(), c.rehashed.Load() }

// InFlight returns how many intents the in-flight table holds now:
// changes under way, write handles open (each holds its intent until its
// release) and changes kept for a later event (0 for a Core built by
// hand).
func (c *Core) InFlight() int {
	if c.inflight == nil {
		return 0
	}
	return c.inflight.inUse()
}

// Backing returns the protected directory's absolute path.
func (c *Core) Backing() string { return c.backing }

// Tree returns the backing directory, held open: the adapter makes its
// own calls on the tree through it too.
func (c *Core) Tree() *at.Tree { return c.fs }

// excluded says whether rel lies in engine scratch space.
func (c *Core) excluded(rel string) bool {
	return rel != "" && (restoring(rel) || statedir.Excluded(c.exclude, rel))
}

// restoring says whether rel lies in a restore's staging directory.
func restoring(rel string) bool {
	for comp := range strings.SplitSeq(rel, "/") {
		if strings.HasPrefix(comp, statedir.RestoreStagingPrefix) {
			return true
		}
	}
	return false
}

// journalable refuses, with EILSEQ, a change the journal could not record:
// events carry names as UTF-8 text, and a replica needs the exact name.
// Scratch space is not journaled and takes any name. As on filesystems that
// enforce UTF-8 names, the refusal comes before anything changes.
func (c *Core) journalable(paths ...string) error {
	for _, p := range paths {
		if !utf8.ValidString(p) && !c.excluded(p) {
			return syscall.EILSEQ
		}
	}
	return nil
}

// isHidden says whether rel is the state directory or cmroot.
func (c *Core) isHidden(rel string) bool { return c.hidden[rel] }

// admit checks an operation on the single name rel before it starts: a
// hidden name is refused with hidden (EPERM where the operation would
// make the name, ENOENT where it would remove it), a name the journal
// cannot carry with EILSEQ. It returns rel's backing path and whether rel
// lies in scratch space, where the operation runs unprotected.
func (c *Core) admit(rel string, hidden syscall.Errno) (excluded bool, err error) {
	if c.isHidden(rel) {
		return false, hidden
	}
	if err := c.journalable(rel); err != nil {
		return false, err
	}
	return c.excluded(rel), nil
}

// Hidden says whether rel is the state directory or cmroot, which the
// mount does not show.
func (c *Core) Hidden(rel string) bool { return c.hidden[rel] }

// HidesIn says whether the directory dir holds a hidden entry, so its
// listing must be filtered.
func (c *Core) HidesIn(dir string) bool {
	for h := range c.hidden {
		if path.Dir(h) == dir || (dir == "" && path.Dir(h) == ".") {
			return true
		}
	}
	return false
}

// emit journals events; it returns once they, and everything they name,
// are durable (see flush.go).
func (c *Core) emit(ctx context.Context, events ...*journal.Event) error {
	var kind journal.Type // of the caller's change, for its failpoints
	if len(events) > 0 {
		kind = generic(events[0].Type)
	}
	var ks []kept
	if c.pendN.Load() > 0 {
		// Changes that are still to be journaled come first.
		var pre []*journal.Event
		pre, ks = c.takePending()
		events = append(pre, events...)
	}
	if len(events) == 0 {
		return nil
	}
	hit(kind, stepApplied)
	// What the events name is flushed by the journal's writer, at the
	// same time as its own sync and in the same group: one wait for both.
	// Should it fail, the events are not journaled.
	var pins *pinned
	flushNamed := func() error { return nil }
	switch c.log.FlushTiming() {
	case journal.FlushBeforeReturn:
		named := c.named(events)
		flushNamed = func() error { return c.flush(named) }
	case journal.FlushLater:
		// Held open now: the flush reaches what the events name wherever
		// later changes move it before the flush runs.
		pins = c.named(events).pin()
		flushNamed = pins.flush
	}
	flush := func() (err error) {
		if err = flushNamed(); err != nil {
			return err
		}
		// A test's crash at "flushed" panics here, in the journal's
		// writer: it dies in the caller, below, its events taken back.
		defer func() {
			if r := recover(); r != nil {
				err = &crashedAt{r}
			}
		}()
		hit(kind, stepFlushed)
		return nil
	}
	if err := c.log.AppendFlush(context.WithoutCancel(ctx), flush, events...); err != nil {
		if pins != nil {
			pins.close() // never queued: a failed append runs no flush later
		}
		if cr, ok := errors.AsType[*crashedAt](err); ok {
			panic(cr.v)
		}
		c.settle(ks, false)
		return fmt.Errorf("journal: %w", err)
	}
	hit(kind, stepJournaled)
	c.settle(ks, true)
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
// deleting a file written through the mount costs no read of its data;
// and, for a file longer than one block, the sums of its blocks, so that
// the close after a write into part of it rehashes only the blocks the
// write changed (Handle.Flush, rehash).
type sumCache struct {
	mu     sync.Mutex
	m      map[uint64]cachedSum
	blocks int // block sums held, in all entries
}

type cachedSum struct {
	st     state
	sum    string
	blocks []uint64 // the blocks' sums (checksum.Digest.Blocks); nil: not kept
}

const sumCacheMax = 1 << 20

// blocksMax bounds the block sums the cache holds: 8 MiB of them, for
// 256 GiB of files. Past it, the block sums go first.
const blocksMax = 1 << 20

func (c *sumCache) get(st state) (string, bool) {
	sum, _, ok := c.getBlocks(st)
	return sum, ok
}

// getBlocks is get, with the block sums if they were kept. The slice is
// shared: read it, never change it.
func (c *sumCache) getBlocks(st state) (string, []uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[st.ino]
	if !ok || e.st != st {
		return "", nil, false
	}
	return e.sum, e.blocks, true
}

// blocksFor returns the block sums kept for the content of inode ino if
// that content has checksum sum and size bytes (nil otherwise), whatever
// its state: a clone taken of it may have touched its ctime.
func (c *sumCache) blocksFor(ino uint64, sum string, size int64) []uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[ino]
	if !ok || e.sum != sum || e.st.size != uint64(size) {
		return nil
	}
	return e.blocks
}

// put remembers sum, and blocks (nil: none) for content in state st.
// The cache keeps blocks: the caller must not change them.
func (c *sumCache) put(st state, sum string, blocks []uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= sumCacheMax {
		c.m, c.blocks = make(map[uint64]cachedSum), 0
	}
	c.blocks -= len(c.m[st.ino].blocks)
	if c.blocks+len(blocks) > blocksMax {
		for ino, e := range c.m {
			e.blocks = nil
			c.m[ino] = e
		}
		c.blocks = 0
		if len(blocks) > blocksMax {
			blocks = nil
		}
	}
	c.blocks += len(blocks)
	c.m[st.ino] = cachedSum{st, sum, blocks}
}

// sumFile returns the checksum and size of the open file f, from the cache
// when its state is unchanged since it was last hashed. A file that changes
// while it is hashed is hashed again.
func (c *Core) sumFile(f *os.File) (string, *syscall.Stat_t, error) {
	return c.sumFileFrom(f, nil)
}

// sumFileFrom is sumFile for a caller that has just fstat-ed f (or
// another descriptor of its inode) as st, which serves as the state
// before the first hash (nil: f is fstat-ed).
func (c *Core) sumFileFrom(f *os.File, st *syscall.Stat_t) (string, *syscall.Stat_t, error) {
	for try := 0; ; try++ {
		var before syscall.Stat_t
		if try == 0 && st != nil {
			before = *st
		} else if err := syscall.Fstat(int(f.Fd()), &before); err != nil {
			return "", nil, err
		}
		if sum, ok := c.sums.get(statState(&before)); ok {
			return sum, &before, nil
		}
		sum, blocks, err := c.hash(f, before.Size, nil)
		if err != nil {
			return "", nil, err
		}
		var after syscall.Stat_t
		if err := syscall.Fstat(int(f.Fd()), &after); err != nil {
			return "", nil, err
		}
		if statState(&before) == statState(&after) || try == 2 {
			c.sums.put(statState(&after), sum, blocks)
			return sum, &after, nil
		}
	}
}

// sumFileUntil puts the checksum of the open file f into the cache, once,
// unless stop closes first or the file changes while it is hashed. It
// says whether the cache holds the checksum of the content f had when it
// returned, and that content's state.
func (c *Core) sumFileUntil(f *os.File, stop <-chan struct{}) (state, bool) {
	var before, after syscall.Stat_t
	if syscall.Fstat(int(f.Fd()), &before) != nil {
		return state{}, false
	}
	if _, ok := c.sums.get(statState(&before)); ok {
		return statState(&before), true
	}
	sum, blocks, err := c.hash(f, before.Size, stop)
	if err != nil || syscall.Fstat(int(f.Fd()), &after) != nil || statState(&before) != statState(&after) {
		return statState(&before), false
	}
	c.sums.put(statState(&after), sum, blocks)
	return statState(&after), true
}

// hash is hashReaderAt, counted.
func (c *Core) hash(f *os.File, size int64, stop <-chan struct{}) (string, []uint64, error) {
	sum, blocks, n, err := hashReaderAt(f, size, stop)
	c.hashed.Add(n)
	return sum, blocks, err
}

// sumPath is sumFile for the tree's file rel.
func (c *Core) sumPath(rel string) (string, *syscall.Stat_t, error) {
	var st syscall.Stat_t
	if err := c.fs.Lstat(rel, &st); err != nil {
		return "", nil, err
	}
	return c.sumStat(rel, &st)
}

// sumStat is sumPath for a file the caller has just lstat-ed as st and
// that nothing writes to meanwhile (no handle open for writing): a
// checksum cached for that state is taken without another lstat.
func (c *Core) sumStat(rel string, st *syscall.Stat_t) (string, *syscall.Stat_t, error) {
	if sum, ok := c.sums.get(statState(st)); ok {
		return sum, st, nil
	}
	f, err := openNoAtime(c.fs, rel)
	if err != nil {
		return "", nil, err
	}
	defer f.Close()
	return c.sumFile(f)
}

// openNoAtime opens rel in t for reading, not following a final symlink,
// and, where this process may (O_NOATIME needs ownership or CAP_FOWNER),
// without updating its access time: preserving or checksumming a file
// must not change what a stat of it shows.
func openNoAtime(t *at.Tree, rel string) (*os.File, error) {
	return openNoAtimeWith(func(flags int) (*os.File, error) { return t.Open(rel, flags, 0) })
}

// openNoAtimeWith is openNoAtime through open, which opens with flags.
func openNoAtimeWith(open func(flags int) (*os.File, error)) (*os.File, error) {
	f, err := open(os.O_RDONLY | syscall.O_NOFOLLOW | syscall.O_NOATIME)
	if errors.Is(err, syscall.EPERM) {
		f, err = open(os.O_RDONLY | syscall.O_NOFOLLOW)
	}
	return f, err
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 1<<20); return &b }}

// mmapMin is the size from which a file is hashed through a memory
// mapping: it saves copying every page into a buffer first.
const mmapMin = 4 << 20

// hashChunk is how much of a mapped file is hashed between two looks at
// whether the checksum is still wanted.
const hashChunk = 16 << 20

// errStopped is what a checksum given up before its end returns.
var errStopped = errors.New("checksum given up")

// hashReaderAt hashes the first size bytes of f without moving its offset,
// and says how many bytes it hashed. A file longer than one block has
// its block sums returned too (nil otherwise). Once stop (nil: never) is
// closed it gives up with errStopped.
func hashReaderAt(f *os.File, size int64, stop <-chan struct{}) (string, []uint64, int64, error) {
	// The checksum leaves the file's page cache as it found it.
	defer pagecache.Note(f, size).Drop()
	newDigest := checksum.New
	if size > checksum.BlockSize {
		newDigest = checksum.NewKeeping
	}
	d := newDigest()
	var mapped int64
	if size >= mmapMin && int64(int(size)) == size {
		if data, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED); err == nil {
			defer unix.Munmap(data)
			unix.Madvise(data, unix.MADV_SEQUENTIAL)
			n, err := hashMapped(data, d, stop)
			if err == nil {
				return checksum.Format(d.Sum64()), d.Blocks(), n, nil
			}
			if errors.Is(err, errStopped) {
				return "", nil, n, err
			}
			// Truncated under us: hash what is there now by reading.
			mapped = n
			d.Reset()
		}
	}
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	n, err := io.CopyBuffer(d, stopReader{io.NewSectionReader(f, 0, size), stop}, *bp)
	if err != nil {
		return "", nil, mapped + n, err
	}
	return checksum.Format(d.Sum64()), d.Blocks(), mapped + n, nil
}

// errFault is a mapped file that shrank while it was hashed.
var errFault = errors.New("mapped file truncated")

// hashMapped writes mapped file data to d and says how many bytes it
// hashed. A file truncated by another writer while it is hashed faults
// (SIGBUS) and is errFault instead of a crash of the mount.
func hashMapped(data []byte, d *checksum.Digest, stop <-chan struct{}) (n int64, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if recover() != nil {
			err = errFault
		}
	}()
	for off := 0; off < len(data); off += hashChunk {
		if stopped(stop) {
			return n, errStopped
		}
		end := min(off+hashChunk, len(data))
		d.Write(data[off:end])
		n = int64(end)
	}
	return n, nil
}

// stopReader is a reader that fails with errStopped once stop is closed.
type stopReader struct {
	r    io.Reader
	stop <-chan struct{}
}

func (s stopReader) Read(p []byte) (int, error) {
	if stopped(s.stop) {
		return 0, errStopped
	}
	return s.r.Read(p)
}

// stopped says whether stop is closed; a nil stop never is.
func stopped(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}
