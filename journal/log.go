package journal

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/cmfs-project/cmfs/internal/boltcheck"
)

// Errors returned by Log.
var (
	// ErrClosed is returned by calls on a closed Log.
	ErrClosed = errors.New("journal: closed")
	// ErrReadOnly is returned by Append on a Log opened read-only.
	ErrReadOnly = errors.New("journal: read-only")
	// ErrCorrupt is wrapped by Open, Verify and the readers when the file
	// is damaged: a stored event fails its checksum, the ids are not
	// dense, a bbolt page is damaged (the error names the page: "page N:
	// …") or neither meta page is valid. bbolt's panics on a damaged file
	// are recovered and reported as ErrCorrupt too. The error names the
	// file.
	ErrCorrupt = errors.New("journal: corrupt")
	// ErrLocked is returned by Open when another process holds the journal
	// for writing (a live mount).
	ErrLocked = errors.New("journal: locked by another process")
	// ErrNotFound is wrapped by Get when the log holds no event with the
	// id asked for.
	ErrNotFound = errors.New("journal: no such event")
	// ErrInvalid is wrapped by Append when an event could not pass Verify
	// once stored: empty type or path, a malformed xxh64, a negative size,
	// a name that is not valid UTF-8.
	ErrInvalid = errors.New("journal: invalid event")
)

// Options tune Open. The zero value is the safe default.
type Options struct {
	// ReadOnly opens the journal for reading only (a shared lock), as
	// readers do while nothing is mounted.
	ReadOnly bool
	// NoSync skips fsync on commit. Only for tests and benchmarks that
	// measure something else; it gives up durability against power loss.
	NoSync bool
	// LockTimeout bounds the wait for the file lock; 0 means fail at once.
	LockTimeout time.Duration
	// MaxBatch bounds how many appends share one commit; 0 means 1024.
	MaxBatch int
	// Reserve is the space kept allocated beyond the journal's data, so
	// that commits never meet a full file system (see Admit); 0 means
	// DefaultReserve, less than 128 KiB means 128 KiB.
	Reserve int64

	// Sync says when an Append's events are durable: SyncAlways (the
	// zero value) or SyncInterval, flushed within Interval (0 means
	// DefaultInterval).
	Sync     SyncMode
	Interval time.Duration
	// WALSegment is the size of each of the WAL's two segments when Open
	// creates it; 0 means DefaultWALSegment. An existing WAL keeps its own.
	WALSegment int64
	// FlushAll, when set, makes durable everything that any event
	// written so far names (a syncfs of the file systems they live on).
	// A SyncInterval flush runs it instead of the requests' own flushes:
	// one flush of the file system per interval rather than one per file.
	FlushAll func() error
	// CheckTail is called by a writable Open when the WAL holds events
	// whose group's flush was never confirmed — at most the last group
	// under SyncAlways, the last interval's under SyncInterval — so
	// that what they name may not have reached the disk before a power
	// loss. tail holds those events in id order, bounds[i] is where
	// group i ends in tail (the last is len(tail)); it returns how many
	// to keep, 0 or one of bounds, and the rest are dropped as if never
	// written (none was ever shown to a reader). nil keeps them all.
	CheckTail func(tail []*Event, bounds []int) int

	// fallocate replaces the system call, for tests.
	fallocate func(fd int, mode uint32, off, size int64) error
}

// defaultMaxBatch is the MaxBatch of the zero Options.
const defaultMaxBatch = 1024

// rangeChunk is how many events Range decodes per read transaction. fn is
// called outside any transaction, so that it may take its time or call
// Append without holding up the writer (a growing file needs a remap, and
// a remap waits for every open read transaction).
const rangeChunk = 1024

// pollInterval is how often Wait re-reads a read-only journal.
const pollInterval = 50 * time.Millisecond

// Log is the durable, ordered, checksummed event log: a bbolt database with
// one writer. Appends from many goroutines are group-committed: callers that
// arrive while a commit is in flight share the next one, and every Append
// returns only after its event is fsynced.
type Log struct {
	path string
	opts Options
	db   *bolt.DB // nil when read-only: each call opens its own handle

	last    atomic.Uint64 // newest durable id, what readers see (read-only: newest seen)
	first   uint64        // last at Open
	commits atomic.Uint64 // flushes that made events durable, since Open

	// The WAL (wal.go) and what lies behind it (apply.go, sync.go).
	wal       *wal
	written   atomic.Uint64 // newest id written to the WAL
	applied   atomic.Uint64 // newest id bbolt holds
	mem       memTail       // events written, not yet in bbolt
	groupSeg  int           // where the group being written began (writer)
	groupOff  int64
	failed    atomic.Pointer[error] // a background flush failed
	applyErr  atomic.Pointer[error] // the applier's last failure
	applyCh   chan struct{}         // wakes the applier
	applyNow  chan struct{}         // ends its pause to gather groups
	applyMu   sync.Mutex            // held by the applier in a transaction (tests stop it)
	stopApply chan struct{}
	applyDone chan struct{}
	appliedMu sync.Mutex
	appliedCh chan struct{} // closed and replaced when applied moves

	syncMu      sync.Mutex // one background flush at a time
	pendMu      sync.Mutex
	pendFns     []func() error // SyncInterval: flushes not yet run
	dirty       chan struct{}  // wakes the flusher
	stopFlush   chan struct{}
	flusherDone chan struct{}

	groups, walSyncs, applies atomic.Uint64
	flushTime                 latency

	// mu orders Close after every Append under way, so that nothing is
	// queued once Close has begun.
	mu       sync.RWMutex
	closed   bool
	isClosed atomic.Bool
	done     chan struct{} // closed by Close

	inflight atomic.Int64 // Append calls between queueing and their answer
	qmu      sync.Mutex
	queue    []*request // waiting for the next group (writer.go)
	leading  bool       // a caller is committing a group

	notifyMu sync.Mutex
	notify   chan struct{} // closed and replaced after every commit

	w writer // owned by the leader of the group being committed

	recovered WALRecovery

	// A read-only Log's view of the WAL (loadWAL).
	walMu   sync.Mutex
	walKey  string
	walLast uint64

	res      *reserve
	hwm      atomic.Int64 // bbolt's high-water mark after the last commit
	pageSize int
}

// Open opens or creates the journal at path. The directory must exist.
// Open takes the file lock (exclusive, or shared when opts.ReadOnly) and
// checks that the newest event is readable; it does not run Verify.
//
// Errors: ErrLocked when the lock is not free within opts.LockTimeout; an
// error wrapping fs.ErrNotExist when the directory is missing, or when the
// file is missing and opts.ReadOnly; ErrCorrupt when the newest event
// does not read back.
func Open(path string, opts Options) (*Log, error) {
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = defaultMaxBatch
	}
	dir := filepath.Dir(path)
	if fi, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("open journal %s: state directory: %w", path, err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("open journal %s: %s is not a directory", path, dir)
	}
	l := &Log{
		path:   path,
		opts:   opts,
		done:   make(chan struct{}),
		notify: make(chan struct{}),
	}
	if opts.ReadOnly {
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("open journal: %w", err)
		}
		if _, err := l.readLast(); err != nil {
			return nil, fmt.Errorf("open journal %s: %w", path, err)
		}
		return l, nil
	}

	// bbolt rebuilds the freelist of a writable open by walking every
	// page, and panics in a goroutine of its own (which nothing can
	// recover) at the first damaged one: check the pages first.
	if fi, err := os.Stat(path); err == nil && fi.Size() > 0 {
		if err := boltcheck.Check(path); err != nil {
			return nil, fmt.Errorf("open journal %s: %w", path, asCorrupt(err))
		}
	}
	var db *bolt.DB
	err := boltcheck.Guard(func() (err error) {
		db, err = bolt.Open(path, 0o600, &bolt.Options{
			Timeout: lockTimeout(opts.LockTimeout),
			NoSync:  opts.NoSync,
			// The freelist of an append-only log is tiny; rebuilding it at
			// open is cheaper than writing it at every commit.
			NoFreelistSync: true,
			FreelistType:   bolt.FreelistMapType,
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("open journal %s: %w", path, asCorrupt(lockErr(err)))
	}
	if err := boltcheck.Guard(func() error { return initDB(db) }); err != nil {
		db.Close()
		return nil, fmt.Errorf("open journal %s: %w", path, asCorrupt(err))
	}
	var last uint64
	err = boltcheck.Guard(func() error {
		return db.View(func(tx *bolt.Tx) error {
			var err error
			last, err = lastID(tx)
			return err
		})
	})
	if err != nil {
		err = asCorrupt(err)
		db.Close()
		return nil, fmt.Errorf("open journal %s: %w", path, err)
	}
	var hwm int64
	db.View(func(tx *bolt.Tx) error { hwm = tx.Size(); return nil })
	if opts.Reserve == 0 {
		opts.Reserve = DefaultReserve
	}
	res, err := newReserve(path, opts.Reserve, hwm, opts.fallocate)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("open journal %s: %w", path, err)
	}
	l.res = res
	l.hwm.Store(hwm)
	l.pageSize = db.Info().PageSize
	l.db = db
	if opts.WALSegment <= 0 {
		opts.WALSegment = DefaultWALSegment
	}
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	l.opts = opts
	if last, err = l.recoverWAL(last); err != nil {
		res.close()
		db.Close()
		return nil, fmt.Errorf("open journal %s: %w", path, err)
	}
	l.last.Store(last)
	l.written.Store(last)
	l.applied.Store(last)
	l.first = last
	l.applyCh = make(chan struct{}, 1)
	l.applyNow = make(chan struct{}, 1)
	l.stopApply = make(chan struct{})
	l.applyDone = make(chan struct{})
	l.appliedCh = make(chan struct{})
	go l.applyLoop()
	if opts.Sync == SyncInterval {
		l.dirty = make(chan struct{}, 1)
		l.stopFlush = make(chan struct{})
		l.flusherDone = make(chan struct{})
		go l.flushLoop()
	}
	return l, nil
}

// recoverWAL opens the WAL (creating it if missing), puts the events it
// holds beyond bbolt's newest id, base, into bbolt — after CheckTail has
// judged those whose flush was never confirmed — and empties it. It
// returns the newest id.
func (l *Log) recoverWAL(base uint64) (uint64, error) {
	w, durable, err := openWAL(walPath(l.path), l.opts.WALSegment, false)
	if err != nil {
		return 0, fmt.Errorf("WAL: %w", err)
	}
	l.wal = w
	recs, err := w.scan(base)
	if err != nil {
		w.close()
		return 0, err
	}
	var events [][]byte
	var bounds []int
	first := base + 1
	for _, r := range recs {
		durable = max(durable, r.durable)
		events = append(events, r.events...)
		bounds = append(bounds, len(events))
	}
	// Events through durable had their flush confirmed; the rest are the
	// unverified tail.
	keep := len(events)
	if durable < base+uint64(len(events)) && l.opts.CheckTail != nil {
		skip := 0
		if durable > base {
			skip = int(durable - base)
		}
		var tail []*Event
		for i, v := range events[skip:] {
			e, err := decodeRecord(first+uint64(skip+i), v)
			if err != nil {
				w.close()
				return 0, fmt.Errorf("WAL: %w", err)
			}
			tail = append(tail, e)
		}
		var tb []int
		for _, b := range bounds {
			if b > skip {
				tb = append(tb, b-skip)
			}
		}
		k := l.opts.CheckTail(tail, tb)
		if k != 0 && !slices.Contains(tb, k) {
			k = len(tail) // not a group's end: keep all rather than guess
		}
		keep = skip + k
	}
	for i, v := range events[:keep] {
		if _, err := decodeRecord(first+uint64(i), v); err != nil {
			w.close()
			return 0, fmt.Errorf("WAL: %w", err)
		}
	}
	last := base
	if keep > 0 {
		l.applied.Store(base)
		l.pageSize = l.db.Info().PageSize
		for i := 0; i < keep; i += applyChunk {
			if err := l.put(first+uint64(i), events[i:min(keep, i+applyChunk)]); err != nil {
				w.close()
				return 0, fmt.Errorf("apply the WAL: %w", err)
			}
		}
		last = base + uint64(keep)
		var hwm int64
		l.db.View(func(tx *bolt.Tx) error { hwm = tx.Size(); return nil })
		l.hwm.Store(hwm)
		l.res.refill(hwm)
	}
	l.recovered = WALRecovery{Replayed: keep, Dropped: len(events) - keep}
	if err := w.reset(last); err != nil {
		w.close()
		return 0, fmt.Errorf("WAL: reset: %w", err)
	}
	return last, nil
}

// WALRecovery is what a writable Open found in the WAL.
type WALRecovery struct {
	Replayed int // events put into bbolt
	Dropped  int // events of the unverified tail CheckTail dropped
}

// Recovered says what Open found in the WAL.
func (l *Log) Recovered() WALRecovery { return l.recovered }

// lockTimeout translates Options.LockTimeout to bbolt, where 0 means wait
// forever and any positive timeout still tries the lock once.
func lockTimeout(d time.Duration) time.Duration {
	if d <= 0 {
		return time.Nanosecond
	}
	return d
}

func lockErr(err error) error {
	if errors.Is(err, bolt.ErrTimeout) {
		return ErrLocked
	}
	return err
}

// asCorrupt makes what says the file is damaged — a recovered bbolt panic, a
// damaged page, bbolt's own refusal of the meta pages — wrap ErrCorrupt.
func asCorrupt(err error) error {
	var p *boltcheck.Panic
	var pe *boltcheck.PageError
	switch {
	case err == nil || errors.Is(err, ErrCorrupt):
		return err
	case errors.As(err, &p), errors.As(err, &pe), errors.Is(err, boltcheck.ErrMeta),
		errors.Is(err, bolterrors.ErrInvalid), errors.Is(err, bolterrors.ErrChecksum),
		errors.Is(err, bolterrors.ErrVersionMismatch):
		return fmt.Errorf("%v: %w", err, ErrCorrupt)
	}
	return err
}

// initDB creates the buckets of a new journal, and refuses a journal of
// another format version.
func initDB(db *bolt.DB) error {
	ready := false
	err := db.View(func(tx *bolt.Tx) error {
		if err := checkVersion(tx); err != nil {
			return err
		}
		ready = tx.Bucket(eventsBucket) != nil && tx.Bucket(metaBucket) != nil
		return nil
	})
	if err != nil || ready {
		return err
	}
	return db.Update(func(tx *bolt.Tx) error {
		if _, err := tx.CreateBucketIfNotExists(eventsBucket); err != nil {
			return err
		}
		m, err := tx.CreateBucketIfNotExists(metaBucket)
		if err != nil {
			return err
		}
		if m.Get(versionKey) == nil {
			return m.Put(versionKey, []byte(formatVersion))
		}
		return nil
	})
}

func checkVersion(tx *bolt.Tx) error {
	if m := tx.Bucket(metaBucket); m != nil {
		if v := m.Get(versionKey); v != nil && string(v) != formatVersion {
			return fmt.Errorf("journal format version %q, this cmfs reads %q (version 1 spelled a file longer than 256 KiB by the xxh64 of its whole content)", v, formatVersion)
		}
	}
	return nil
}

// lastID returns the newest id, after checking that its record reads back
// and that the log starts at 1: the cheap part of Verify.
func lastID(tx *bolt.Tx) (uint64, error) {
	if err := checkVersion(tx); err != nil {
		return 0, err
	}
	b := tx.Bucket(eventsBucket)
	if b == nil {
		return 0, nil
	}
	c := b.Cursor()
	k, v := c.Last()
	if k == nil {
		return 0, nil
	}
	id, ok := keyID(k)
	if !ok {
		return 0, fmt.Errorf("key %x: %w", k, ErrCorrupt)
	}
	if _, err := decodeRecord(id, v); err != nil {
		return 0, err
	}
	if k, _ := c.First(); len(k) != keyLen || keyID1(k) != 1 {
		return 0, fmt.Errorf("first key %x, want event 1: %w", k, ErrCorrupt)
	}
	return id, nil
}

func keyID1(k []byte) uint64 { id, _ := keyID(k); return id }

// view runs fn in a read transaction. A read-only Log opens the database
// for just this call, so that the shared lock is held only while reading.
// bbolt reads pages lazily and panics on a damaged one: view recovers and
// returns ErrCorrupt (wrapped, without the file's name: callers add it).
func (l *Log) view(fn func(*bolt.Tx) error) error {
	if l.isClosed.Load() {
		return ErrClosed
	}
	if l.db != nil {
		err := boltcheck.Guard(func() error { return l.db.View(fn) })
		if errors.Is(err, bolt.ErrDatabaseNotOpen) {
			return ErrClosed
		}
		return asCorrupt(err)
	}
	var db *bolt.DB
	err := boltcheck.Guard(func() (err error) {
		db, err = bolt.Open(l.path, 0o600, &bolt.Options{
			ReadOnly: true,
			Timeout:  lockTimeout(l.opts.LockTimeout),
		})
		return err
	})
	if err != nil {
		if err = asCorrupt(lockErr(err)); errors.Is(err, ErrCorrupt) {
			// bbolt says only "checksum error": say which page.
			if cerr := boltcheck.Check(l.path); cerr != nil {
				err = asCorrupt(cerr)
			}
		}
		return err
	}
	err = boltcheck.Guard(func() error { return db.View(fn) })
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	return asCorrupt(err)
}

// named adds the file's name to an error that says it is damaged.
func (l *Log) named(err error) error {
	if errors.Is(err, ErrCorrupt) {
		return fmt.Errorf("journal %s: %w", l.path, err)
	}
	return err
}

// readLast reads the newest id from the database and caches it.
func (l *Log) readLast() (uint64, error) {
	var last uint64
	err := l.view(func(tx *bolt.Tx) error {
		var err error
		last, err = lastID(tx)
		return err
	})
	if err != nil {
		return 0, err
	}
	if n := l.loadWAL(last); n > last {
		last = n
	}
	l.last.Store(last)
	return last, nil
}

// loadWAL brings a read-only Log's copy of the WAL's events beyond base
// (bbolt's newest) up to date, and returns the newest of them whose flush
// was confirmed (base when there is none). Events a dead writer left in
// the WAL are shown once their flush was confirmed; the unverified tail
// waits for the next writable Open to judge it.
func (l *Log) loadWAL(base uint64) uint64 {
	p := walPath(l.path)
	fi, err := os.Stat(p)
	if err != nil {
		l.mem.cut(0)
		return base
	}
	key := fmt.Sprint(fi.ModTime().UnixNano(), fi.Size(), base)
	l.walMu.Lock()
	defer l.walMu.Unlock()
	if key == l.walKey {
		return l.walLast
	}
	l.walKey, l.walLast = key, base
	l.mem.cut(0)
	w, durable, err := openWAL(p, 0, true)
	if err != nil {
		return base
	}
	defer w.close()
	recs, err := w.scan(base)
	if err != nil {
		return base
	}
	for _, r := range recs {
		durable = max(durable, r.durable)
	}
	id := base
	for _, r := range recs {
		n := len(r.events)
		if r.first+uint64(n)-1 > durable {
			n = int(max(int64(durable)-int64(r.first)+1, 0))
		}
		if n == 0 {
			break
		}
		ends := make([]int, n)
		var arena []byte
		for i, v := range r.events[:n] {
			arena = append(arena, v...)
			ends[i] = len(arena)
		}
		l.mem.add(r.first, arena, ends, 0)
		id = r.first + uint64(n) - 1
	}
	l.walLast = id
	return id
}

// Append assigns the next ids and the current time (where Time is zero) to
// the events, in place, writes them in one group and returns once they are
// durable (SyncAlways) or written (SyncInterval). Events of one call get
// consecutive ids.
//
// ctx is checked once, before the events are queued: once queued, Append
// waits for their group, and committed events stay committed. On error no id is assigned (ID and a Time that Append set are
// reset to zero).
//
// Errors: ErrReadOnly, ErrClosed, ErrInvalid (wrapped), ctx.Err(),
// ErrNoSpace (wrapped; the batch did not fit in what the file system has
// left, nothing was written), or the commit's error.
func (l *Log) Append(ctx context.Context, events ...*Event) error {
	return l.AppendFlush(ctx, nil, events...)
}

// AppendFlush is Append with flush, which makes durable what the events
// name (the content they give paths, the originals they keep, the
// directories they change). The writer runs it at the same time as the
// WAL's own sync, in the same group, so that one wait covers both; under
// SyncInterval it runs with the next background flush. If flush fails
// under SyncAlways, these events are taken back (the group is written
// again without them) and AppendFlush returns its error; nothing of them
// is journaled. flush must not call the Log.
func (l *Log) AppendFlush(ctx context.Context, flush func() error, events ...*Event) error {
	if l.db == nil {
		return ErrReadOnly
	}
	for _, e := range events {
		if err := validate(e); err != nil {
			return fmt.Errorf("append %s %q: %v: %w", e.Type, e.Path, err, ErrInvalid)
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(events) == 0 {
		if l.isClosed.Load() {
			return ErrClosed
		}
		return nil
	}
	r := newRequest(events)
	r.flush = flush
	l.inflight.Add(1)
	defer l.inflight.Add(-1)
	l.mu.RLock()
	if l.closed {
		l.mu.RUnlock()
		r.free()
		return ErrClosed
	}
	err := l.submit(r)
	l.mu.RUnlock()
	r.free()
	return err
}

// FlushTiming says when AppendFlush runs its flush.
type FlushTiming int

const (
	// FlushBeforeReturn (SyncAlways): in the commit, before AppendFlush
	// returns.
	FlushBeforeReturn FlushTiming = iota
	// FlushLater (SyncInterval): with the next background flush, after
	// AppendFlush returned, when later changes may have renamed, replaced
	// or removed what the events named: the flush must reach what they
	// named when appended (hold it open), not what their paths name then.
	FlushLater
	// FlushNever (SyncInterval with Options.FlushAll): never; FlushAll
	// makes everything durable instead.
	FlushNever
)

// FlushTiming says when AppendFlush runs its flush.
func (l *Log) FlushTiming() FlushTiming {
	switch {
	case l.opts.Sync != SyncInterval:
		return FlushBeforeReturn
	case l.opts.FlushAll != nil:
		return FlushNever
	}
	return FlushLater
}

// Admit says whether the journal can take the events of a new change: it
// fails with ErrNoSpace (wrapping ENOSPC) while the reserve is short — the
// file system is full — so that the caller refuses the change before
// making it. Changes admitted while the reserve holds find room for their
// events even when the file system fills up meanwhile. It costs an atomic
// load while the reserve holds, one fallocate(2) attempt while it is
// short. A read-only Log admits nothing (ErrReadOnly).
func (l *Log) Admit() error {
	if l.db == nil {
		return ErrReadOnly
	}
	if !l.res.short.Load() {
		return nil
	}
	if !l.res.refill(l.hwm.Load()) {
		return ErrNoSpace
	}
	return nil
}

// Last returns the id of the newest event, 0 when the log is empty. A
// read-only Log re-reads it from the file, so it sees commits made by
// another process since Open; while a writer holds the file it returns the
// newest id it saw.
func (l *Log) Last() uint64 {
	if l.db == nil && !l.isClosed.Load() {
		if last, err := l.readLast(); err == nil {
			return last
		}
	}
	return l.last.Load()
}

// Written returns the id of the newest event written to the WAL, durable
// or not yet (SyncInterval; a group whose flush is under way): an event
// appended from now on gets a larger id. (Not quite always: a group whose
// flush failed is taken back and its ids are given again, to the events
// that were not at fault.) A read-only Log returns Last.
func (l *Log) Written() uint64 {
	if l.db == nil {
		return l.Last()
	}
	return max(l.written.Load(), l.last.Load())
}

// Range calls fn for every event with from <= id <= to in id order; to == 0
// means up to the newest when Range starts. fn returning an error stops the
// walk and Range returns that error. fn runs outside any transaction and
// may keep the events it is given.
//
// Errors: ErrClosed, ErrLocked (read-only, while a writer holds the file),
// ErrCorrupt (wrapped) for a record that fails its checksum or a missing
// id, or fn's error.
func (l *Log) Range(from, to uint64, fn func(*Event) error) error {
	if from == 0 {
		from = 1
	}
	// Readers see durable events only.
	if last := l.Last(); to == 0 || to > last {
		to = last
	}
	if l.isClosed.Load() {
		return ErrClosed
	}
	buf := make([]*Event, 0, rangeChunk)
	for from <= to {
		buf = buf[:0]
		err := l.view(func(tx *bolt.Tx) error {
			b := tx.Bucket(eventsBucket)
			if b == nil {
				return nil
			}
			c := b.Cursor()
			var key [keyLen]byte
			putKey(key[:], from)
			want := from
			for k, v := c.Seek(key[:]); k != nil && len(buf) < rangeChunk; k, v = c.Next() {
				id, ok := keyID(k)
				if !ok {
					return fmt.Errorf("key %x: %w", k, ErrCorrupt)
				}
				if id > to {
					break
				}
				if id != want {
					return fmt.Errorf("event %d: missing: %w", want, ErrCorrupt)
				}
				e, err := decodeRecord(id, v)
				if err != nil {
					return err
				}
				buf = append(buf, e)
				want++
			}
			return nil
		})
		if err != nil {
			return l.named(err)
		}
		if len(buf) == 0 {
			// Beyond bbolt: the events still in memory.
			recs, first := l.mem.get(from, to, rangeChunk)
			if first == 0 {
				if l.db != nil && l.applied.Load() >= from {
					continue // applied meanwhile: bbolt has it now
				}
				return l.named(fmt.Errorf("event %d: missing, the log ends at %d: %w", from, to, ErrCorrupt))
			}
			for i, v := range recs {
				e, err := decodeRecord(first+uint64(i), v)
				if err != nil {
					return l.named(err)
				}
				buf = append(buf, e)
			}
		}
		for _, e := range buf {
			if err := fn(e); err != nil {
				return err
			}
		}
		from += uint64(len(buf))
	}
	return nil
}

// Get returns one event.
//
// Errors: ErrNotFound (wrapped), ErrClosed, ErrLocked, ErrCorrupt (wrapped).
func (l *Log) Get(id uint64) (*Event, error) {
	var e *Event
	err := l.view(func(tx *bolt.Tx) error {
		var v []byte
		b := tx.Bucket(eventsBucket)
		if b != nil {
			var key [keyLen]byte
			putKey(key[:], id)
			v = b.Get(key[:])
		}
		if v == nil && id > 0 && id <= l.last.Load() {
			if recs, first := l.mem.get(id, id, 1); first == id {
				v = recs[0]
			}
		}
		if v == nil {
			// Ids are dense: one below the newest is missing only from a
			// damaged file.
			if b != nil && id > 0 {
				if k, _ := b.Cursor().Last(); keyID1(k) > id {
					return fmt.Errorf("event %d: missing, the log ends at %d: %w", id, keyID1(k), ErrCorrupt)
				}
			}
			return fmt.Errorf("get event %d: %w", id, ErrNotFound)
		}
		var err error
		e, err = decodeRecord(id, v)
		return err
	})
	return e, l.named(err)
}

// Wait blocks until the log holds an event with id > after, or ctx ends,
// and returns Last(). A writer's Wait wakes on every commit; a read-only
// Log polls the file every 50ms.
//
// Errors: ctx.Err(), ErrClosed, and for a read-only Log ErrLocked when a
// writer takes the file (follow it through the mount's control socket).
func (l *Log) Wait(ctx context.Context, after uint64) (uint64, error) {
	if l.db == nil {
		return l.poll(ctx, after)
	}
	for {
		// Take the channel before reading last: a commit in between
		// closes it, so no wake-up is lost.
		l.notifyMu.Lock()
		ch := l.notify
		l.notifyMu.Unlock()
		if last := l.last.Load(); last > after {
			return last, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return l.last.Load(), ctx.Err()
		case <-l.done:
			return l.last.Load(), ErrClosed
		}
	}
}

func (l *Log) poll(ctx context.Context, after uint64) (uint64, error) {
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		last, err := l.readLast()
		if err != nil {
			return l.last.Load(), l.named(err)
		}
		if last > after {
			return last, nil
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return last, ctx.Err()
		case <-l.done:
			return last, ErrClosed
		}
	}
}

// broadcast wakes every Wait after a commit.
func (l *Log) broadcast() {
	l.notifyMu.Lock()
	close(l.notify)
	l.notify = make(chan struct{})
	l.notifyMu.Unlock()
}

// Stats describes a writer's work since Open.
type Stats struct {
	Events  uint64 // events appended
	Commits uint64 // transactions (and fsyncs) that stored them
}

// Stats returns the writer's counters; zero for a read-only Log.
func (l *Log) Stats() Stats {
	if l.db == nil {
		return Stats{}
	}
	// Load commits first: an event counted as committed is in last.
	c := l.commits.Load()
	return Stats{Events: l.last.Load() - l.first, Commits: c}
}

// Close waits for pending appends and closes the database. Closing a
// closed Log does nothing.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.mu.Unlock()
	if l.db == nil {
		l.isClosed.Store(true)
		close(l.done)
		return nil
	}
	// Every Append has returned, and no other can start: the flusher
	// flushes what was written, the applier puts all of it into bbolt,
	// and the WAL is emptied.
	if l.stopFlush != nil {
		close(l.stopFlush)
		<-l.flusherDone
	}
	close(l.stopApply)
	<-l.applyDone
	var werr error
	if l.applied.Load() == l.written.Load() {
		hit(fpClosing)
		werr = l.wal.reset(l.applied.Load())
	}
	if err := l.wal.close(); werr == nil {
		werr = err
	}
	l.isClosed.Store(true)
	close(l.done)
	l.res.close()
	if err := l.db.Close(); err != nil {
		return fmt.Errorf("close journal %s: %w", l.path, err)
	}
	if werr != nil {
		return fmt.Errorf("close journal %s: WAL: %w", l.path, werr)
	}
	if err := l.failure(); err != nil {
		return fmt.Errorf("close journal %s: %w", l.path, err)
	}
	return nil
}
