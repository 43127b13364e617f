package journal

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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

	last    atomic.Uint64 // newest committed id (read-only: newest seen)
	first   uint64        // last at Open
	commits atomic.Uint64 // commits since Open

	// mu orders Close after every Append that is handing a request to the
	// writer, so that no request is queued after the writer stops.
	mu       sync.RWMutex
	closed   bool
	isClosed atomic.Bool
	done     chan struct{} // closed by Close

	inflight atomic.Int64 // Append calls between queueing and their answer
	reqs     chan *request
	stopped  chan struct{} // closed when the writer goroutine returns

	notifyMu sync.Mutex
	notify   chan struct{} // closed and replaced after every commit

	w writer // owned by the writer goroutine

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
	l.last.Store(last)
	l.first = last
	l.reqs = make(chan *request, opts.MaxBatch)
	l.stopped = make(chan struct{})
	go l.run()
	return l, nil
}

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
			return fmt.Errorf("journal format version %q, want %q", v, formatVersion)
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
	l.last.Store(last)
	return last, nil
}

// Append assigns the next ids and the current time (where Time is zero) to
// the events, in place, stores them in one transaction and returns once
// they are durable. Events of one call get consecutive ids.
//
// ctx bounds only the wait to be queued: once the writer has taken the
// events, Append waits for the commit, and committed events stay
// committed. On error no id is assigned (ID and a Time that Append set are
// reset to zero).
//
// Errors: ErrReadOnly, ErrClosed, ErrInvalid (wrapped), ctx.Err(),
// ErrNoSpace (wrapped; the batch did not fit in what the file system has
// left, nothing was written), or the commit's error.
func (l *Log) Append(ctx context.Context, events ...*Event) error {
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
	l.inflight.Add(1)
	defer l.inflight.Add(-1)
	l.mu.RLock()
	if l.closed {
		l.mu.RUnlock()
		r.free()
		return ErrClosed
	}
	select {
	case l.reqs <- r:
	case <-ctx.Done():
		l.mu.RUnlock()
		r.free()
		return ctx.Err()
	}
	l.mu.RUnlock()
	err := <-r.done
	r.free()
	return err
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
	buf := make([]*Event, 0, rangeChunk)
	for to == 0 || from <= to {
		buf = buf[:0]
		err := l.view(func(tx *bolt.Tx) error {
			b := tx.Bucket(eventsBucket)
			if b == nil {
				return nil
			}
			c := b.Cursor()
			if to == 0 {
				k, _ := c.Last()
				if to = keyID1(k); to == 0 {
					return nil
				}
			}
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
		for _, e := range buf {
			if err := fn(e); err != nil {
				return err
			}
		}
		if len(buf) < rangeChunk {
			return nil
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
	// No Append can queue a request now; the writer drains the queue
	// and returns.
	close(l.reqs)
	<-l.stopped
	l.isClosed.Store(true)
	close(l.done)
	l.res.close()
	if err := l.db.Close(); err != nil {
		return fmt.Errorf("close journal %s: %w", l.path, err)
	}
	return nil
}
