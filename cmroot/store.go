package cmroot

import (
	"errors"
	"os"
	"time"
)

// Errors returned by Store.
var (
	// ErrNotFound is returned when no entry has the requested name or checksum.
	ErrNotFound = errors.New("cmroot: no such entry")
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

// Store is a content-addressed preservation store.
type Store struct{}

// Name returns the entry name for content with this checksum and size.
func Name(xxh64 string, size int64) string { return "" }

// Open opens or creates the store in dir.
func Open(dir string, opts Options) (*Store, error) { return nil, errors.New("unimplemented") }

// Dir returns the store's directory.
func (s *Store) Dir() string { return "" }

// Preserve keeps the file at path, whose content has the given checksum and
// size, as an entry. With move it renames path into the store (same
// filesystem) or copies and fsyncs it and then removes path (another
// filesystem); without move it hard-links path into the store when that
// works, and copies otherwise, leaving path in place. If an entry with
// that name exists, Preserve only refreshes its retention (and, with move,
// removes path). created says whether a new entry was made. On error path
// is untouched and nothing is left in the store.
func (s *Store) Preserve(path, xxh64 string, size int64, move bool) (name string, created bool, err error) {
	return "", false, errors.New("unimplemented")
}

// PreserveCopy copies the open file f into the store, computing its
// checksum on the way, fsyncs the copy and returns the entry's name,
// checksum and size. Used before an in-place change of f.
func (s *Store) PreserveCopy(f *os.File) (name, xxh64 string, size int64, created bool, err error) {
	return "", "", 0, false, errors.New("unimplemented")
}

// Drop removes an entry made by a Preserve that is being undone.
func (s *Store) Drop(name string) error { return errors.New("unimplemented") }

// Lookup returns the entry with this name.
func (s *Store) Lookup(name string) (Entry, error) { return Entry{}, errors.New("unimplemented") }

// Path returns the filesystem path of the named entry.
func (s *Store) Path(name string) string { return "" }

// Links returns how many hard links to inode ino the store holds, so the
// filesystem can report them as absent.
func (s *Store) Links(ino uint64) uint32 { return 0 }

// Close closes the index.
func (s *Store) Close() error { return nil }
