package cmroot

import (
	"github.com/cmfs-project/cmfs/internal/checksum"
	"github.com/cmfs-project/cmfs/internal/durable"

	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"
)

// Errors returned by Store.
var (
	// ErrNotFound is returned when no entry has the requested name or checksum.
	ErrNotFound = errors.New("cmroot: no such entry")
	// ErrChecksum is returned when content does not hash to the checksum it
	// should have: a copy made by Preserve, or an entry read by Restore.
	ErrChecksum = errors.New("cmroot: checksum mismatch")
	// ErrInUse is returned by Open when another process has the store open.
	ErrInUse = errors.New("cmroot: store is in use by another process")
	// ErrClosed is returned by operations on a closed Store.
	ErrClosed = errors.New("cmroot: store is closed")
	// ErrCorrupt is wrapped, with the index file's name, when bbolt
	// panics on a page of the index damaged since Open. (Open itself
	// rebuilds a damaged index from the directory; a corrupt entry file
	// is what Fsck reports and moves aside.)
	ErrCorrupt = errors.New("cmroot: index corrupt")
)

// Entry is one preserved original.
type Entry struct {
	Name      string    // "<xxh64>-<size>"
	XXH64     string    // 16 lowercase hex digits
	Size      int64     //
	Ino       uint64    // inode number of the entry's file
	Preserved time.Time // first preservation
	Refreshed time.Time // latest preservation of the same content: retention counts from here
}

// Options tune Open.
type Options struct {
	// Retain is how long an entry is kept after its latest preservation;
	// 0 means DefaultRetain.
	Retain time.Duration
	// NoSync skips fsync of copied entries (tests only).
	NoSync bool
}

// DefaultRetain is the default retention.
const DefaultRetain = 24 * time.Hour

// Names inside the store directory. None of them can be an entry name or a
// fan-out directory, which are hex.
const (
	indexFile   = ".index.db"
	lockFile    = ".lock"
	tmpDir      = ".tmp"
	corruptDir  = ".corrupt"
	copyBufSize = 1 << 20
	numStripes  = 256
)

// Store is a content-addressed preservation store.
type Store struct {
	dir    string
	retain time.Duration
	sync   bool
	sys    sysOps
	lock   *os.File // flock'ed for the store's lifetime
	// noClone: the store's filesystem has no reflinks; copies copy.
	noClone atomic.Bool
	// methods count the preservations by how they kept the original.
	methods [numMethods]methodCount

	// stripes serialise everything that changes one entry (its file and its
	// record) without serialising unrelated entries.
	stripes [numStripes]sync.Mutex

	dbMu   sync.RWMutex // guards db against Close
	db     *bolt.DB
	closed bool
	// memIndex: db is a copy in memory; the file on disk has no clean
	// marker, or is gone (see memBolt).
	memIndex bool

	// The index is written behind (see put).
	flushMu  sync.Mutex // one flush at a time
	pmu      sync.Mutex // guards the fields below
	pend     map[string]*record
	flushing map[string]*record // the batch flush is committing
	armed    bool
	timer    *time.Timer

	// mem mirrors the index for the calls on the filesystem's hot path.
	mem     sync.RWMutex
	links   map[uint64]uint32 // inode → entries sharing it with an original
	entries int
	bytes   int64
}

// sysOps are the system calls Preserve makes; tests replace them to inject
// faults (EXDEV, ENOSPC) without a second filesystem or a full disk.
type sysOps struct {
	// rename moves oldpath to newpath and fails with EEXIST if newpath exists.
	rename func(oldpath, newpath string) error
	link   func(oldpath, newpath string) error
	// write writes p to f (the copy path).
	write func(f *os.File, p []byte) (int, error)
	// clone makes dst share src's extents (FICLONE).
	clone func(dst, src *os.File) error
	now   func() time.Time
}

func defaultSys() sysOps {
	return sysOps{
		rename: durable.RenameNoReplace,
		link:   os.Link,
		write:  func(f *os.File, p []byte) (int, error) { return f.Write(p) },
		clone: func(dst, src *os.File) error {
			if err := unix.IoctlFileClone(int(dst.Fd()), int(src.Fd())); err != nil {
				return &os.PathError{Op: "FICLONE", Path: src.Name(), Err: err}
			}
			return nil
		},
		now: time.Now,
	}
}

// Name returns the entry name for content with this checksum and size.
func Name(xxh64 string, size int64) string {
	return xxh64 + "-" + strconv.FormatInt(size, 10)
}

// ParseName splits an entry name into its checksum and size; ok is false if
// name is not an entry name.
func ParseName(name string) (xxh64 string, size int64, ok bool) {
	if len(name) < 18 || name[16] != '-' || !checksum.Valid(name[:16]) {
		return "", 0, false
	}
	digits := name[17:]
	if len(digits) > 19 || (len(digits) > 1 && digits[0] == '0') {
		return "", 0, false
	}
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return "", 0, false
		}
	}
	size, err := strconv.ParseInt(digits, 10, 64)
	if err != nil {
		return "", 0, false
	}
	return name[:16], size, true
}

// Open opens or creates the store in dir. It fails with ErrInUse if another
// process has it open. After an unclean shutdown, or if the index is
// corrupt, it rebuilds the index from the directory (see the package doc).
func Open(dir string, opts Options) (*Store, error) {
	return open(dir, opts, defaultSys())
}

func open(dir string, opts Options, sys sysOps) (*Store, error) {
	if opts.Retain < 0 {
		return nil, fmt.Errorf("open cmroot %s: negative retention %v", dir, opts.Retain)
	}
	s := &Store{
		dir:    filepath.Clean(dir),
		retain: opts.Retain,
		sync:   !opts.NoSync,
		sys:    sys,
		links:  make(map[uint64]uint32),
		pend:   make(map[string]*record),
	}
	if s.retain == 0 {
		s.retain = DefaultRetain
	}
	if err := s.open(); err != nil {
		if s.lock != nil {
			s.lock.Close()
		}
		return nil, fmt.Errorf("open cmroot %s: %w", dir, err)
	}
	return s, nil
}

func (s *Store) open() error {
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return err
	}
	lf, err := os.OpenFile(filepath.Join(s.dir, lockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	s.lock = lf
	if err := unix.Flock(int(lf.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			return ErrInUse
		}
		return fmt.Errorf("lock: %w", err)
	}
	for _, d := range []string{tmpDir, corruptDir} {
		if err := os.MkdirAll(filepath.Join(s.dir, d), 0o700); err != nil {
			return err
		}
	}
	created := false
	for i := 0; i < 256; i++ {
		err := os.Mkdir(filepath.Join(s.dir, fmt.Sprintf("%02x", i)), 0o700)
		if err == nil {
			created = true
		} else if !errors.Is(err, os.ErrExist) {
			return err
		}
	}
	if created && s.sync {
		if err := durable.SyncDir(s.dir); err != nil {
			return err
		}
	}
	// Nobody else has the store open, so whatever is in .tmp is a copy that
	// a crash interrupted.
	if err := durable.ClearDir(filepath.Join(s.dir, tmpDir)); err != nil {
		return err
	}
	return s.openIndex()
}

// Dir returns the store's directory.
func (s *Store) Dir() string { return s.dir }

// Retain returns the store's retention (Options.Retain or DefaultRetain).
func (s *Store) Retain() time.Duration { return s.retain }

// Path returns the filesystem path of the named entry. It is the one place
// that knows the layout.
func (s *Store) Path(name string) string {
	if len(name) < 2 {
		return filepath.Join(s.dir, name)
	}
	return filepath.Join(s.dir, name[:2], name)
}

// EntryPath returns where the entry called name lives in a store at dir,
// for readers that cannot open the store (a live mount holds its lock). It
// refuses, with ErrNotFound, anything that is not an entry name, so the
// result never leaves dir.
func EntryPath(dir, name string) (string, error) {
	if _, _, ok := ParseName(name); !ok {
		return "", fmt.Errorf("%q is not a cmroot entry name: %w", name, ErrNotFound)
	}
	return filepath.Join(dir, name[:2], name), nil
}

// Links returns how many hard links to inode ino the store holds, so the
// filesystem can report them as absent. Only entries that share their inode
// with an original (made by rename or link, on the original's filesystem)
// count; a copy never does, so an inode number that happens to be equal on
// another filesystem is not affected.
func (s *Store) Links(ino uint64) uint32 {
	s.mem.RLock()
	n := s.links[ino]
	s.mem.RUnlock()
	return n
}

// Stats returns the number of entries and their total size.
func (s *Store) Stats() (entries int, bytes int64) {
	s.mem.RLock()
	defer s.mem.RUnlock()
	return s.entries, s.bytes
}

// Lookup returns the entry with this name, or ErrNotFound.
func (s *Store) Lookup(name string) (Entry, error) {
	r, err := s.get(name)
	if err != nil {
		return Entry{}, fmt.Errorf("lookup %s: %w", name, err)
	}
	if r == nil {
		return Entry{}, fmt.Errorf("lookup %s: %w", name, ErrNotFound)
	}
	return r.entry(name), nil
}

// Find returns the entries whose content has checksum xxh64 (one per size;
// normally at most one), or ErrNotFound.
func (s *Store) Find(xxh64 string) ([]Entry, error) {
	var out []Entry
	prefix := []byte(xxh64 + "-")
	if err := s.flush(); err != nil {
		return nil, fmt.Errorf("find %s: %w", xxh64, err)
	}
	err := s.view(func(b *bolt.Bucket) error {
		c := b.Cursor()
		for k, v := c.Seek(prefix); k != nil && len(k) > len(prefix) && string(k[:len(prefix)]) == string(prefix); k, v = c.Next() {
			r, err := decodeRecord(v)
			if err != nil {
				continue
			}
			out = append(out, r.entry(string(k)))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("find %s: %w", xxh64, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("find %s: %w", xxh64, ErrNotFound)
	}
	return out, nil
}

// Close writes the clean-shutdown marker and closes the index. Calls after
// the first return nil.
func (s *Store) Close() error {
	if s.isClosed() {
		return nil
	}
	s.pmu.Lock()
	if s.timer != nil {
		s.timer.Stop()
	}
	s.pmu.Unlock()
	// Without a complete index on disk, no clean marker: the next Open
	// rebuilds from the directory.
	ferr := s.flush()
	s.dbMu.Lock()
	defer s.dbMu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	err := ferr
	if err == nil {
		// No room for the marker's commit leaves the index unclean,
		// which costs the next Open a rebuild and loses nothing.
		if err = s.markClean(); noSpace(err) {
			err = nil
		}
	}
	if err == nil && s.memIndex {
		// Still no room: the file on disk stays without a clean marker
		// (or gone), and the next Open rebuilds from the directory.
		if serr := s.saveIndex(); !noSpace(serr) {
			err = serr
		}
	}
	if cerr := s.db.Close(); err == nil {
		err = cerr
	}
	if cerr := s.lock.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("close cmroot %s: %w", s.dir, err)
	}
	return nil
}

// stripe returns the mutex that serialises changes to entry name.
func (s *Store) stripe(name string) *sync.Mutex {
	return &s.stripes[xxhash.Sum64String(name)%numStripes]
}
