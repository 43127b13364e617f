package cmroot

import (
	"github.com/cmfs-project/cmfs/internal/boltcheck"
	"github.com/cmfs-project/cmfs/internal/durable"

	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
	"golang.org/x/sys/unix"
)

// The index: bucket "entries" maps an entry name to its record; bucket
// "meta" holds the clean-shutdown marker.
var (
	entriesBucket = []byte("entries")
	metaBucket    = []byte("meta")
	cleanKey      = []byte("clean")
)

const (
	recordVersion = 1
	recordLen     = 1 + 1 + 8*4
	flagShared    = 1 // the entry's inode is (or was) an original's inode
)

// record is what the index knows about one entry. The checksum is in the key.
type record struct {
	size      int64
	ino       uint64
	shared    bool
	preserved int64 // unix nanoseconds
	refreshed int64
}

func (r record) encode() []byte {
	b := make([]byte, recordLen)
	b[0] = recordVersion
	if r.shared {
		b[1] = flagShared
	}
	binary.BigEndian.PutUint64(b[2:], uint64(r.size))
	binary.BigEndian.PutUint64(b[10:], r.ino)
	binary.BigEndian.PutUint64(b[18:], uint64(r.preserved))
	binary.BigEndian.PutUint64(b[26:], uint64(r.refreshed))
	return b
}

func decodeRecord(b []byte) (record, error) {
	if len(b) != recordLen || b[0] != recordVersion {
		return record{}, fmt.Errorf("bad index record (%d bytes)", len(b))
	}
	return record{
		shared:    b[1]&flagShared != 0,
		size:      int64(binary.BigEndian.Uint64(b[2:])),
		ino:       binary.BigEndian.Uint64(b[10:]),
		preserved: int64(binary.BigEndian.Uint64(b[18:])),
		refreshed: int64(binary.BigEndian.Uint64(b[26:])),
	}, nil
}

func (r record) entry(name string) Entry {
	return Entry{
		Name:      name,
		XXH64:     name[:min(16, len(name))],
		Size:      r.size,
		Ino:       r.ino,
		Preserved: time.Unix(0, r.preserved),
		Refreshed: time.Unix(0, r.refreshed),
	}
}

// statRecord makes a record for an entry file found in the directory. The
// file's ctime is when the rename or link that preserved it happened (entry
// files are never chmod'ed or touched afterwards), so it stands in for the
// lost preservation time.
func statRecord(fi os.FileInfo) record {
	st := fi.Sys().(*syscall.Stat_t)
	ctime := time.Unix(int64(st.Ctim.Sec), int64(st.Ctim.Nsec)).UnixNano()
	return record{
		size:      fi.Size(),
		ino:       st.Ino,
		shared:    st.Nlink > 1,
		preserved: ctime,
		refreshed: ctime,
	}
}

func boltOptions() *bolt.Options {
	return &bolt.Options{
		// The index is a cache of the directory, rebuilt after any unclean
		// shutdown, so commits on the delete path need not wait for the disk.
		NoSync:         true,
		NoFreelistSync: true,
		FreelistType:   bolt.FreelistMapType,
		Timeout:        time.Second,
	}
}

// openBolt opens the index file, turning a damaged file into an error
// wrapping bolterrors.ErrInvalid: the pages are checked first (bbolt's
// freelist rebuild panics in a goroutine of its own on a damaged one,
// which nothing could recover), and bbolt's panics are recovered.
func openBolt(path string) (db *bolt.DB, err error) {
	if fi, err := os.Stat(path); err == nil && fi.Size() > 0 {
		if err := boltcheck.Check(path); err != nil {
			return nil, fmt.Errorf("%w: %v", bolterrors.ErrInvalid, err)
		}
	}
	err = boltcheck.Guard(func() (err error) {
		db, err = bolt.Open(path, 0o600, boltOptions())
		return err
	})
	var p *boltcheck.Panic
	if errors.As(err, &p) {
		return nil, fmt.Errorf("%w: %v", bolterrors.ErrInvalid, p)
	}
	return db, err
}

// guard runs fn, a read or write of the open index, and turns bbolt's
// panics on a page damaged since Open into ErrCorrupt naming the file.
func (s *Store) guard(fn func() error) error {
	err := boltcheck.Guard(fn)
	var p *boltcheck.Panic
	if errors.As(err, &p) {
		return fmt.Errorf("index %s: %v: %w", filepath.Join(s.dir, indexFile), p, ErrCorrupt)
	}
	return err
}

func corruptIndex(err error) bool {
	return errors.Is(err, bolterrors.ErrInvalid) || errors.Is(err, bolterrors.ErrChecksum) ||
		errors.Is(err, bolterrors.ErrVersionMismatch)
}

// openIndex opens the index, rebuilding it from the directory unless the
// previous Close left it clean, and loads the in-memory mirror. When the
// file system has no room for a rebuilt index, or for the commit that
// consumes the clean marker, the index is built in memory instead (see
// memBolt): it is a cache, and a full disk must not stop a mount.
func (s *Store) openIndex() error {
	path := filepath.Join(s.dir, indexFile)
	db, old, err := s.openDiskIndex(path)
	if noSpace(err) {
		if db, err = s.buildMemIndex(old); err == nil {
			s.memIndex = true
		}
	}
	if err != nil {
		return fmt.Errorf("index: %w", err)
	}
	s.db = db
	return s.loadMem()
}

// openDiskIndex opens the index file, rebuilding it first if it was not
// closed cleanly, and durably consumes its clean marker. On failure it
// returns the records it could read, and leaves no clean marker on disk.
func (s *Store) openDiskIndex(path string) (*bolt.DB, map[string]record, error) {
	db, err := openBolt(path)
	if err != nil && !corruptIndex(err) {
		return nil, nil, err
	}
	clean := false
	if db != nil {
		clean, err = readClean(db)
		if err != nil {
			clean = false
		}
	}
	if !clean {
		old := readRecords(db)
		if db != nil {
			db.Close()
		}
		if err := s.rebuildIndex(path, old); err != nil {
			return nil, old, fmt.Errorf("rebuild: %w", err)
		}
		if db, err = openBolt(path); err != nil {
			return nil, old, err
		}
	}
	// Consume the marker durably before any unsynced commit can happen: a
	// crash from here on must be seen as unclean by the next Open.
	db.NoSync = false
	err = db.Update(func(tx *bolt.Tx) error {
		if _, err := tx.CreateBucketIfNotExists(entriesBucket); err != nil {
			return err
		}
		m, err := tx.CreateBucketIfNotExists(metaBucket)
		if err != nil {
			return err
		}
		return m.Delete(cleanKey)
	})
	db.NoSync = true
	if err == nil {
		return db, nil, nil
	}
	old := readRecords(db)
	db.Close()
	if clean {
		// The marker is still there, and this store will not keep the
		// file up to date: it must not be trusted again.
		if rerr := s.removeIndex(path); rerr != nil {
			return nil, old, errors.Join(err, rerr)
		}
	}
	return nil, old, err
}

// removeIndex removes the index file for good; the next Open rebuilds.
func (s *Store) removeIndex(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if s.sync {
		return durable.SyncDir(s.dir)
	}
	return nil
}

// buildMemIndex builds the index from the directory, with the times of
// old records, in memory.
func (s *Store) buildMemIndex(old map[string]record) (*bolt.DB, error) {
	files, err := s.scanEntries()
	if err != nil {
		return nil, err
	}
	db, err := memBolt(nil)
	if err != nil {
		return nil, err
	}
	if err := fillIndex(db, files, old); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// memBolt opens a bbolt database on an anonymous memory file (memfd),
// holding a copy of src's content if src is not nil. It is where the index
// lives while the file system has no room for it: bbolt needs a file to
// map, and a memfd is one that takes no disk space.
func memBolt(src *bolt.DB) (*bolt.DB, error) {
	fd, err := unix.MemfdCreate("cmroot-index", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("memfd_create: %w", err)
	}
	f := os.NewFile(uintptr(fd), "memfd:cmroot-index")
	if src != nil {
		if err := writeIndex(src, f); err != nil {
			f.Close()
			return nil, fmt.Errorf("copy index to memory: %w", err)
		}
	}
	opts := boltOptions()
	opts.OpenFile = func(string, int, os.FileMode) (*os.File, error) { return f, nil }
	db, err := bolt.Open(f.Name(), 0o600, opts)
	if err != nil {
		f.Close()
		return nil, err
	}
	return db, nil
}

// toMemory moves the open index to memory, after a commit found no room
// on disk. The file keeps what it had, with no clean marker (Open consumed
// it), so a crash from here on rebuilds from the directory as before.
func (s *Store) toMemory() error {
	s.dbMu.Lock()
	defer s.dbMu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if s.memIndex {
		return nil
	}
	db, err := memBolt(s.db)
	if err != nil {
		return err
	}
	s.db.Close()
	s.db, s.memIndex = db, true
	return nil
}

// IndexInMemory says whether the index is kept in memory because the file
// system had no room for it (see the package doc).
func (s *Store) IndexInMemory() bool {
	s.dbMu.RLock()
	defer s.dbMu.RUnlock()
	return s.memIndex
}

// saveIndex writes the index in memory, which Close has marked clean, over
// the index file.
func (s *Store) saveIndex() error {
	path := filepath.Join(s.dir, indexFile)
	tmp := path + ".new"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	err = writeIndex(s.db, f)
	if err == nil && s.sync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	if s.sync {
		return durable.SyncDir(s.dir)
	}
	return nil
}

// writeIndex writes a consistent copy of db to w.
func writeIndex(db *bolt.DB, w io.Writer) error {
	ew := &errWriter{w: w}
	err := boltcheck.Guard(func() error {
		return db.View(func(tx *bolt.Tx) error {
			_, err := tx.WriteTo(ew)
			return err
		})
	})
	if ew.err != nil {
		return ew.err
	}
	return err
}

// errWriter keeps the first error of its writer, which bbolt's WriteTo
// passes on only as text.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	n, err := e.w.Write(p)
	if err != nil && e.err == nil {
		e.err = err
	}
	return n, err
}

// noSpace says whether err is the file system's having no room (or no
// quota) left.
func noSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

func readClean(db *bolt.DB) (clean bool, err error) {
	defer func() {
		if p := recover(); p != nil {
			clean, err = false, fmt.Errorf("%w: %v", bolterrors.ErrInvalid, p)
		}
	}()
	err = db.View(func(tx *bolt.Tx) error {
		m := tx.Bucket(metaBucket)
		clean = m != nil && m.Get(cleanKey) != nil && tx.Bucket(entriesBucket) != nil
		return nil
	})
	return clean, err
}

// readRecords salvages what it can of an index that was not closed
// cleanly: the records' times are the only facts the directory cannot give
// back.
func readRecords(db *bolt.DB) map[string]record {
	out := make(map[string]record)
	if db == nil {
		return out
	}
	defer func() { recover() }()
	db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(entriesBucket)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			if r, err := decodeRecord(v); err == nil {
				out[string(k)] = r
			}
			return nil
		})
	})
	return out
}

// rebuildIndex writes a new index from the directory, keeping the times of
// old records whose file still exists, and renames it over path.
func (s *Store) rebuildIndex(path string, old map[string]record) error {
	files, err := s.scanEntries()
	if err != nil {
		return err
	}
	tmp := path + ".new"
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	db, err := bolt.Open(tmp, 0o600, boltOptions())
	if err != nil {
		return err
	}
	defer os.Remove(tmp) // a no-op once renamed
	if err := fillIndex(db, files, old); err != nil {
		db.Close()
		return err
	}
	if s.sync {
		if err := db.Sync(); err != nil {
			db.Close()
			return err
		}
	}
	if err := db.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	if s.sync {
		return durable.SyncDir(s.dir)
	}
	return nil
}

// fillIndex puts a record for each entry file into db, keeping the times
// of old records whose file still exists.
func fillIndex(db *bolt.DB, files map[string]os.FileInfo, old map[string]record) error {
	put := func(batch map[string]record) error {
		return db.Update(func(tx *bolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists(entriesBucket)
			if err != nil {
				return err
			}
			if _, err := tx.CreateBucketIfNotExists(metaBucket); err != nil {
				return err
			}
			for name, r := range batch {
				if err := b.Put([]byte(name), r.encode()); err != nil {
					return err
				}
			}
			return nil
		})
	}
	batch := make(map[string]record)
	for name, fi := range files {
		r := statRecord(fi)
		if o, ok := old[name]; ok {
			r.preserved, r.refreshed, r.shared = o.preserved, o.refreshed, o.shared || r.shared
		}
		batch[name] = r
		if len(batch) == 10000 {
			if err := put(batch); err != nil {
				return err
			}
			clear(batch)
		}
	}
	return put(batch)
}

// scanEntries lists the entry files in the fan-out directories. Files that
// are not entries (bad names, wrong directory, not regular) are left out;
// Fsck reports them.
func (s *Store) scanEntries() (map[string]os.FileInfo, error) {
	out := make(map[string]os.FileInfo)
	err := s.walk(func(path, name string, fi os.FileInfo) error {
		if _, _, ok := ParseName(name); ok && fi.Mode().IsRegular() && path == s.Path(name) {
			out[name] = fi
		}
		return nil
	})
	return out, err
}

// walk calls fn for every file in the fan-out directories, with its path,
// name and lstat.
func (s *Store) walk(fn func(path, name string, fi os.FileInfo) error) error {
	for i := 0; i < 256; i++ {
		sub := filepath.Join(s.dir, fmt.Sprintf("%02x", i))
		des, err := os.ReadDir(sub)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		for _, de := range des {
			fi, err := de.Info()
			if errors.Is(err, os.ErrNotExist) {
				continue // removed since ReadDir
			}
			if err != nil {
				return err
			}
			if err := fn(filepath.Join(sub, de.Name()), de.Name(), fi); err != nil {
				return err
			}
		}
	}
	return nil
}

// loadMem fills the in-memory mirror from the index.
func (s *Store) loadMem() error {
	return s.view(func(b *bolt.Bucket) error {
		return b.ForEach(func(k, v []byte) error {
			r, err := decodeRecord(v)
			if err != nil {
				return fmt.Errorf("index record %s: %w", k, err)
			}
			s.account(&r, 1)
			return nil
		})
	})
}

// markClean durably records a clean shutdown, after everything committed
// without fsync is on disk, so that a marker on disk implies a complete index.
func (s *Store) markClean() error {
	if err := s.db.Sync(); err != nil {
		return err
	}
	s.db.NoSync = false
	return s.db.Update(func(tx *bolt.Tx) error {
		m, err := tx.CreateBucketIfNotExists(metaBucket)
		if err != nil {
			return err
		}
		return m.Put(cleanKey, []byte(time.Now().UTC().Format(time.RFC3339Nano)))
	})
}

// view runs fn in a read transaction on the entries bucket.
func (s *Store) view(fn func(b *bolt.Bucket) error) error {
	s.dbMu.RLock()
	defer s.dbMu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	return s.guard(func() error {
		return s.db.View(func(tx *bolt.Tx) error { return fn(tx.Bucket(entriesBucket)) })
	})
}

// The index is written behind: put records a change in memory (pend),
// which get consults first, and a batch of changes is committed in one
// bbolt transaction once flushAt of them are pending or flushDelay after
// the first, so a delete pays a map insert instead of a commit. Changes not
// yet committed at a crash are what Open's rebuild recovers from the
// directory anyway.
const (
	flushAt    = 512
	maxPending = 64 << 10 // beyond this, a failing index fails Preserve
	flushDelay = 100 * time.Millisecond
)

// get returns the record of name, or nil.
func (s *Store) get(name string) (*record, error) {
	s.pmu.Lock()
	r, ok := s.pend[name]
	if !ok {
		r, ok = s.flushing[name]
	}
	s.pmu.Unlock()
	if ok {
		if r == nil {
			return nil, nil
		}
		c := *r
		return &c, nil
	}
	var out *record
	err := s.view(func(b *bolt.Bucket) error {
		v := b.Get([]byte(name))
		if v == nil {
			return nil
		}
		r, err := decodeRecord(v)
		if err != nil {
			return fmt.Errorf("index record %s: %w", name, err)
		}
		out = &r
		return nil
	})
	return out, err
}

// put replaces the record of name with r (nil deletes it) and keeps the
// in-memory mirror in step. Callers hold name's stripe.
func (s *Store) put(name string, r *record) error {
	if s.isClosed() {
		return ErrClosed
	}
	old, err := s.get(name)
	if err != nil {
		return err
	}
	if s.pending() >= flushAt {
		if err := s.flush(); err != nil && s.pending() >= maxPending {
			return err
		}
	}
	if r != nil {
		c := *r
		r = &c
	}
	s.pmu.Lock()
	s.pend[name] = r
	if !s.armed {
		s.armed = true
		if s.timer == nil {
			s.timer = time.AfterFunc(flushDelay, s.flushLater)
		} else {
			s.timer.Reset(flushDelay)
		}
	}
	s.pmu.Unlock()
	s.account(old, -1)
	s.account(r, 1)
	return nil
}

func (s *Store) pending() int {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	return len(s.pend)
}

// flushLater is the timer's flush. An error leaves the changes pending:
// the next flush retries them, and Close reports the error if it persists.
func (s *Store) flushLater() {
	s.pmu.Lock()
	s.armed = false
	s.pmu.Unlock()
	s.flush()
}

// flush commits the pending changes to the index in one transaction. On
// error they stay pending (behind any newer change to the same entry).
func (s *Store) flush() error {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	s.pmu.Lock()
	batch := s.pend
	s.pend = make(map[string]*record)
	s.flushing = batch
	s.pmu.Unlock()
	if len(batch) == 0 {
		s.pmu.Lock()
		s.flushing = nil
		s.pmu.Unlock()
		return nil
	}
	err := s.commit(batch)
	if noSpace(err) {
		if merr := s.toMemory(); merr != nil {
			err = errors.Join(err, merr)
		} else {
			err = s.commit(batch)
		}
	}
	s.pmu.Lock()
	if err != nil {
		for k, v := range batch {
			if _, newer := s.pend[k]; !newer {
				s.pend[k] = v
			}
		}
	}
	s.flushing = nil
	s.pmu.Unlock()
	if err != nil {
		return fmt.Errorf("index: %w", err)
	}
	return nil
}

func (s *Store) commit(batch map[string]*record) error {
	s.dbMu.RLock()
	defer s.dbMu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	return s.guard(func() error { return s.commitTx(batch) })
}

func (s *Store) commitTx(batch map[string]*record) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(entriesBucket)
		// In key order: each Put's descent starts where the last one's
		// ended, on nodes the transaction has already loaded.
		for _, name := range slices.Sorted(maps.Keys(batch)) {
			r := batch[name]
			var err error
			if r == nil {
				err = b.Delete([]byte(name))
			} else {
				err = b.Put([]byte(name), r.encode())
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
}

func (s *Store) isClosed() bool {
	s.dbMu.RLock()
	defer s.dbMu.RUnlock()
	return s.closed
}

func (s *Store) account(r *record, d int) {
	if r == nil {
		return
	}
	s.mem.Lock()
	defer s.mem.Unlock()
	s.entries += d
	s.bytes += int64(d) * r.size
	if r.shared {
		n := int64(s.links[r.ino]) + int64(d)
		if n <= 0 {
			delete(s.links, r.ino)
		} else {
			s.links[r.ino] = uint32(n)
		}
	}
}
