package repl

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/cmfs-project/cmfs/journal"
)

// A Catalog is the source tree as of one journal event: every directory,
// regular file and symlink below the warehouse root, a file with its size
// and xxh64, a symlink with its target. It plays the part Hive's metastore plays in a bootstrap: the
// names and checksums come from it, not from reading the warehouse, so a
// BOOTSTRAP costs a scan of the catalog instead of reading and hashing
// every file, and it is exact: the tree as it stood right after the
// event the dump is pinned to, with nothing racing it.
//
// The catalog is built once by walking the tree (and hashing every
// file), then kept current by applying the journal's events to it, as a
// load applies them to a target; each Update applies what was journaled
// since the last. The events that raced with the first walk are applied
// as a load applies those that raced with a BOOTSTRAP: idempotently,
// keeping the newer state where both are seen.
//
// It is a bbolt file, catalog.db in the mount's state directory by
// default; one process holds it at a time.
type Catalog struct {
	db *bolt.DB
	// walkBatch overrides catalogWalkBatch (tests).
	walkBatch int
}

// CatalogFile is the catalog's file name in a mount's state directory.
const CatalogFile = "catalog.db"

var (
	catTree = []byte("tree") // path → entry
	catMeta = []byte("meta") // metaAt, metaFuzzy, metaSeeded, metaOrigin, metaVersion
)

var (
	metaAt      = []byte("at")      // the event id the tree is at
	metaFuzzy   = []byte("fuzzy")   // the walk's end: until there, events apply idempotently
	metaSeeded  = []byte("seeded")  // present once the first walk is in
	metaOrigin  = []byte("origin")  // the journal's first event: time, type, path
	metaVersion = []byte("version") // format version
)

// catalogVersion is the catalog's format. Version 1 left symlinks out;
// a catalog of an older version is emptied when opened and built again
// by the next Update.
const catalogVersion = "2"

// catalogBatch is how many events one Update transaction applies.
const catalogBatch = 10_000

// OpenCatalog opens or creates the catalog at path. It waits up to 10 s
// for another process holding it.
func OpenCatalog(path string) (*Catalog, error) {
	// The freelist is kept in the file: without it, every open would read
	// the whole file to rebuild it, and a BOOTSTRAP opens the catalog cold.
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 10 * time.Second})
	if errors.Is(err, bolt.ErrTimeout) {
		return nil, fmt.Errorf("catalog %s: held by another process", path)
	}
	if err != nil {
		return nil, fmt.Errorf("catalog %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{catTree, catMeta} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		m := tx.Bucket(catMeta)
		switch v := m.Get(metaVersion); {
		case v == nil:
			return m.Put(metaVersion, []byte(catalogVersion))
		case string(v) == "1":
			return resetCatalog(tx)
		case string(v) != catalogVersion:
			return fmt.Errorf("format version %q, this replicad reads %q", v, catalogVersion)
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("catalog %s: %w", path, err)
	}
	return &Catalog{db: db}, nil
}

// resetCatalog empties a catalog of an older format, so that the next
// Update builds it again; the origin is kept, it checks the same journal.
func resetCatalog(tx *bolt.Tx) error {
	if err := tx.DeleteBucket(catTree); err != nil {
		return err
	}
	if _, err := tx.CreateBucket(catTree); err != nil {
		return err
	}
	m := tx.Bucket(catMeta)
	for _, k := range [][]byte{metaAt, metaFuzzy, metaSeeded} {
		if err := m.Delete(k); err != nil {
			return err
		}
	}
	return m.Put(metaVersion, []byte(catalogVersion))
}

// Close closes the catalog.
func (c *Catalog) Close() error { return c.db.Close() }

// At returns the event the catalog is at, and whether it was built.
func (c *Catalog) At() (id uint64, built bool, err error) {
	err = c.db.View(func(tx *bolt.Tx) error {
		m := tx.Bucket(catMeta)
		id, built = getUint(m, metaAt), m.Get(metaSeeded) != nil
		return nil
	})
	return id, built, err
}

// Update brings the catalog to the newest event of events: the first time
// by walking tree, after by applying the events since. It returns the
// event the catalog is at.
func (c *Catalog) Update(ctx context.Context, events Events, tree Tree) (uint64, error) {
	at, built, err := c.At()
	if err != nil {
		return 0, err
	}
	if !built {
		if tree == nil {
			return 0, errors.New("catalog: the first update needs the tree to walk")
		}
		if at, err = c.build(ctx, events, tree); err != nil {
			return 0, fmt.Errorf("catalog: first walk: %w", err)
		}
	}
	last, err := events.Last(ctx)
	if err != nil {
		return 0, err
	}
	if last < at {
		return 0, fmt.Errorf("catalog is at event %d, the journal ends at %d: another journal? (delete %s to rebuild it) %w", at, last, c.db.Path(), ErrMismatch)
	}
	if err := c.checkOrigin(ctx, events, last); err != nil {
		return 0, err
	}
	for at < last {
		to := min(last, at+catalogBatch)
		err := c.db.Update(func(tx *bolt.Tx) error {
			m := tx.Bucket(catMeta)
			a := catApplier{b: tx.Bucket(catTree), fuzzyUntil: getUint(m, metaFuzzy)}
			err := events.Range(ctx, at+1, to, func(e *journal.Event) error {
				return a.apply(e)
			})
			if err != nil {
				return err
			}
			return putUint(m, metaAt, to)
		})
		if err != nil {
			return 0, fmt.Errorf("catalog: apply events %d..%d: %w", at+1, to, err)
		}
		at = to
	}
	return at, nil
}

// checkOrigin makes sure the catalog and events are one journal: the
// catalog keeps the first event's time, type and path, and a journal whose
// first event differs (the state directory made anew, say) is refused
// rather than applied on top of another journal's tree.
func (c *Catalog) checkOrigin(ctx context.Context, events Events, last uint64) error {
	if last == 0 {
		return nil
	}
	var origin []byte
	err := events.Range(ctx, 1, 1, func(e *journal.Event) error {
		origin = fmt.Appendf(nil, "%d %s %s", e.Time.UnixNano(), e.Type, e.Path)
		return nil
	})
	if err != nil || origin == nil {
		return err // a journal without its first event: nothing to compare
	}
	return c.db.Update(func(tx *bolt.Tx) error {
		m := tx.Bucket(catMeta)
		switch v := m.Get(metaOrigin); {
		case v == nil:
			return m.Put(metaOrigin, origin)
		case !bytes.Equal(v, origin):
			return fmt.Errorf("catalog %s was built from another journal (its first event: %q; this journal's: %q); delete it to rebuild it: %w",
				c.db.Path(), v, origin, ErrMismatch)
		}
		return nil
	})
}

// build walks tree into an empty catalog, pinned to the newest event
// before the walk; the events up to the walk's end apply idempotently.
func (c *Catalog) build(ctx context.Context, events Events, tree Tree) (uint64, error) {
	pin, err := events.Last(ctx)
	if err != nil {
		return 0, err
	}
	if err := c.walkInto(ctx, tree); err != nil {
		return 0, err
	}
	walkEnd, err := events.Last(ctx)
	if err != nil {
		return 0, err
	}
	err = c.db.Update(func(tx *bolt.Tx) error {
		m := tx.Bucket(catMeta)
		if err := putUint(m, metaAt, pin); err != nil {
			return err
		}
		if err := putUint(m, metaFuzzy, walkEnd); err != nil {
			return err
		}
		return m.Put(metaSeeded, []byte{1})
	})
	return pin, err
}

// catalogWalkBatch is how many entries of the first walk one transaction
// writes, so that a tree of millions of files is not held in memory as one
// transaction's dirty pages.
const catalogWalkBatch = 100_000

// walkInto replaces the catalog's tree with what tree.Walk yields. The
// catalog says it is built only after (metaSeeded), so a build cut short
// is started again from scratch.
func (c *Catalog) walkInto(ctx context.Context, tree Tree) error {
	tx, err := c.db.Begin(true)
	if err != nil {
		return err
	}
	defer func() {
		if tx != nil {
			tx.Rollback() // a no-op after a commit
		}
	}()
	if err := tx.DeleteBucket(catTree); err != nil {
		return err
	}
	b, err := tx.CreateBucket(catTree)
	if err != nil {
		return err
	}
	batch := c.walkBatch
	if batch <= 0 {
		batch = catalogWalkBatch
	}
	n := 0
	err = tree.Walk(ctx, func(e Entry) error {
		if err := checkRel(e.Path); err != nil {
			return err
		}
		v, err := entryValue(e)
		if err != nil {
			return fmt.Errorf("%s: %w", e.Path, err)
		}
		b.FillPercent = 0.9 // the walk yields paths nearly in order
		if err := b.Put([]byte(e.Path), v); err != nil {
			return err
		}
		if n++; n%batch == 0 {
			if err := tx.Commit(); err != nil {
				return err
			}
			if tx, err = c.db.Begin(true); err != nil {
				return err
			}
			b = tx.Bucket(catTree)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tx.Commit()
}

// Walk implements Tree: the catalog's tree at At, in byte order of the
// paths, from one read transaction (an Update waits for it).
func (c *Catalog) Walk(ctx context.Context, fn func(Entry) error) error {
	return c.db.View(func(tx *bolt.Tx) error {
		cur := tx.Bucket(catTree).Cursor()
		n := 0
		for k, v := cur.First(); k != nil; k, v = cur.Next() {
			if n++; n%4096 == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			e, err := parseEntry(v)
			if err != nil {
				return fmt.Errorf("catalog entry %q: %w", k, err)
			}
			e.Path = string(k)
			if err := fn(e); err != nil {
				return err
			}
		}
		return nil
	})
}

var _ Tree = (*Catalog)(nil)

// Entries: "d" for a directory, "f" + size + xxh64 (big endian) for a
// file, "l" + target for a symlink.
var dirEntry = []byte{'d'}

// entryValue is e's catalog entry.
func entryValue(e Entry) ([]byte, error) {
	switch e.Kind {
	case EntryDir:
		return dirEntry, nil
	case EntryFile:
		return fileEntry(e.Size, e.XXH64)
	case EntrySymlink:
		return symlinkEntry(e.Target)
	}
	return nil, fmt.Errorf("entry kind %d: %w", e.Kind, ErrFormat)
}

func symlinkEntry(target string) ([]byte, error) {
	if target == "" {
		return nil, fmt.Errorf("symlink without a target: %w", ErrFormat)
	}
	return append([]byte{'l'}, target...), nil
}

func fileEntry(size int64, sum string) ([]byte, error) {
	s, err := strconv.ParseUint(sum, 16, 64)
	if err != nil || len(sum) != 16 || size < 0 {
		return nil, fmt.Errorf("bad size %d or xxh64 %q: %w", size, sum, ErrFormat)
	}
	v := make([]byte, 17)
	v[0] = 'f'
	binary.BigEndian.PutUint64(v[1:], uint64(size))
	binary.BigEndian.PutUint64(v[9:], s)
	return v, nil
}

// parseEntry parses a catalog entry; the path is the caller's.
func parseEntry(v []byte) (Entry, error) {
	switch {
	case len(v) == 1 && v[0] == 'd':
		return Entry{Kind: EntryDir}, nil
	case len(v) == 17 && v[0] == 'f':
		return Entry{Kind: EntryFile, Size: int64(binary.BigEndian.Uint64(v[1:])), XXH64: journal.FormatSum(binary.BigEndian.Uint64(v[9:]))}, nil
	case len(v) > 1 && v[0] == 'l':
		return Entry{Kind: EntrySymlink, Target: string(v[1:])}, nil
	}
	return Entry{}, fmt.Errorf("mangled (%d bytes): %w", len(v), ErrFormat)
}

func getUint(b *bolt.Bucket, k []byte) uint64 {
	if v := b.Get(k); len(v) == 8 {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

func putUint(b *bolt.Bucket, k []byte, n uint64) error {
	return b.Put(k, binary.BigEndian.AppendUint64(nil, n))
}

// catApplier applies events to a catalog's tree as a load applies them
// to a target directory (apply.go): the same event, the same outcome.
type catApplier struct {
	b          *bolt.Bucket
	fuzzyUntil uint64
}

func (a catApplier) apply(e *journal.Event) error {
	fuzzy := e.ID <= a.fuzzyUntil
	var err error
	switch e.Type {
	case journal.CreateDatabase, journal.CreateTable, journal.AddPartition, journal.Mkdir:
		err = a.mkdirs(e.Path)
	case journal.DropDatabase, journal.DropTable, journal.DropPartition, journal.Rmdir, journal.Delete:
		err = a.removeAll(e.Path)
	case journal.Write, journal.Insert, journal.Truncate, journal.Restore:
	case journal.Rename, journal.RenameDatabase, journal.RenameTable, journal.RenamePartition:
		err = a.rename(e, fuzzy)
	case journal.Link:
		if v := a.b.Get([]byte(e.Path)); v != nil && a.b.Get([]byte(e.NewPath)) == nil {
			if err = a.mkdirs(path.Dir(e.NewPath)); err == nil {
				err = a.b.Put([]byte(e.NewPath), v)
			}
		}
	case journal.Symlink:
		err = a.symlink(e.Path, e.Target)
	default:
		err = fmt.Errorf("unknown event type %q: %w", e.Type, ErrFormat)
	}
	if err != nil {
		return fmt.Errorf("event %d (%s %s): %w", e.ID, e.Type, e.Path, err)
	}
	for _, f := range e.Files {
		if f.CM != "" {
			continue // a preserved original
		}
		if err := a.mkdirs(path.Dir(f.Path)); err != nil {
			return err
		}
		v, err := fileEntry(f.Size, f.XXH64)
		if err != nil {
			return fmt.Errorf("event %d: %s: %w", e.ID, f.Path, err)
		}
		if err := a.removeAll(f.Path); err != nil { // a directory in the way, in a raced tree
			return err
		}
		if err := a.b.Put([]byte(f.Path), v); err != nil {
			return err
		}
	}
	return nil
}

// symlink records rel as a symlink to target, in place of whatever was
// there (in a raced tree).
func (a catApplier) symlink(rel, target string) error {
	v, err := symlinkEntry(target)
	if err != nil {
		return err
	}
	if err := a.mkdirs(path.Dir(rel)); err != nil {
		return err
	}
	if err := a.removeAll(rel); err != nil {
		return err
	}
	return a.b.Put([]byte(rel), v)
}

// mkdirs records rel and the directories above it.
func (a catApplier) mkdirs(rel string) error {
	if rel == "." || rel == "" {
		return nil
	}
	if err := checkRel(rel); err != nil {
		return err
	}
	for i := 0; i <= len(rel); i++ {
		if i < len(rel) && rel[i] != '/' {
			continue
		}
		k := []byte(rel[:i])
		if v := a.b.Get(k); v == nil || !bytes.Equal(v, dirEntry) {
			if err := a.b.Put(k, dirEntry); err != nil {
				return err
			}
		}
	}
	return nil
}

// removeAll removes rel and everything below it.
func (a catApplier) removeAll(rel string) error {
	if err := checkRel(rel); err != nil {
		return err
	}
	if err := a.b.Delete([]byte(rel)); err != nil {
		return err
	}
	prefix := []byte(rel + "/")
	cur := a.b.Cursor()
	for k, _ := cur.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = cur.Seek(prefix) {
		if err := cur.Delete(); err != nil {
			return err
		}
	}
	return nil
}

// subtree returns rel's entry and those below it, keyed by their path
// relative to rel ("" for rel itself).
func (a catApplier) subtree(rel string) map[string][]byte {
	v := a.b.Get([]byte(rel))
	if v == nil {
		return nil
	}
	m := map[string][]byte{"": bytes.Clone(v)}
	prefix := []byte(rel + "/")
	cur := a.b.Cursor()
	for k, v := cur.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = cur.Next() {
		m[string(k[len(rel):])] = bytes.Clone(v)
	}
	return m
}

func (a catApplier) putSubtree(rel string, m map[string][]byte) error {
	if err := a.mkdirs(path.Dir(rel)); err != nil {
		return err
	}
	for suffix, v := range m {
		if err := a.b.Put([]byte(rel+suffix), v); err != nil {
			return err
		}
	}
	return nil
}

// rename moves (or exchanges) what Path names to NewPath, replacing what
// NewPath names, as rename(2) does (an empty directory included). Inside
// the window that raced with the first walk, where both ends may show,
// the destination holds the newer state: a directory that is there
// already stays, and the source goes (as in a load).
func (a catApplier) rename(e *journal.Event, fuzzy bool) error {
	if err := checkRel(e.NewPath); err != nil {
		return err
	}
	src, dst := a.subtree(e.Path), a.subtree(e.NewPath)
	switch {
	case src == nil:
		return nil // done already, or raced away; the event's files bring content
	case e.Target == "exchange":
		if dst == nil {
			return nil
		}
		for _, f := range e.Files {
			if f.CM == "" {
				if holdsFile(a.b.Get([]byte(f.Path)), f) {
					return nil // exchanged already
				}
				break
			}
		}
		for _, p := range []string{e.Path, e.NewPath} {
			if err := a.removeAll(p); err != nil {
				return err
			}
		}
		if err := a.putSubtree(e.NewPath, src); err != nil {
			return err
		}
		return a.putSubtree(e.Path, dst)
	case fuzzy && dst != nil && isDirEntry(dst[""]):
		return a.removeAll(e.Path)
	}
	for _, p := range []string{e.NewPath, e.Path} {
		if err := a.removeAll(p); err != nil {
			return err
		}
	}
	return a.putSubtree(e.NewPath, src)
}

func isDirEntry(v []byte) bool { return bytes.Equal(v, dirEntry) }

func holdsFile(v []byte, f journal.File) bool {
	e, err := parseEntry(v)
	return err == nil && e.Kind == EntryFile && e.Size == f.Size && e.XXH64 == f.XXH64
}

// FilterCatalogFile is the file name, in a mount's state directory, of
// the catalog a --db/--table filter keeps for itself: a filtered
// INCREMENTAL needs the tree as of the event before its first (what a
// directory moving in held), and advances a catalog from there in step
// with the events it writes. The shared catalog (CatalogFile) moves with
// every BOOTSTRAP; a filter's own moves only with that filter's dumps.
// The names are escaped as in _files lines, '-' too, so that two filters
// never share a file.
func FilterCatalogFile(db, table string) string {
	q := func(s string) string { return strings.ReplaceAll(Escape(s), "-", "%2D") }
	return "catalog-db=" + q(db) + "-table=" + q(table) + ".db"
}

// seedFrom makes c a copy of src (which must be built), at src's event.
// c says it is built only once the copy is whole.
func (c *Catalog) seedFrom(ctx context.Context, src *Catalog) error {
	var at, fuzzy uint64
	var origin []byte
	built := false
	err := src.db.View(func(tx *bolt.Tx) error {
		m := tx.Bucket(catMeta)
		at, fuzzy, built = getUint(m, metaAt), getUint(m, metaFuzzy), m.Get(metaSeeded) != nil
		origin = bytes.Clone(m.Get(metaOrigin))
		return nil
	})
	if err != nil {
		return err
	}
	if !built {
		return fmt.Errorf("catalog %s: not built", src.db.Path())
	}
	if err := c.unseed(); err != nil {
		return err
	}
	if err := c.walkInto(ctx, src); err != nil {
		return fmt.Errorf("catalog %s: copy of %s: %w", c.db.Path(), src.db.Path(), err)
	}
	return c.seed(at, fuzzy, origin)
}

// seedEmpty makes c the empty tree before event 1: where an INCREMENTAL
// from event 1 starts, as its target does.
func (c *Catalog) seedEmpty() error {
	if err := c.unseed(); err != nil {
		return err
	}
	err := c.db.Update(func(tx *bolt.Tx) error {
		if err := tx.DeleteBucket(catTree); err != nil {
			return err
		}
		_, err := tx.CreateBucket(catTree)
		return err
	})
	if err != nil {
		return err
	}
	return c.seed(0, 0, nil)
}

// unseed marks c as not built, before its tree is replaced.
func (c *Catalog) unseed() error {
	return c.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(catMeta).Delete(metaSeeded) })
}

// seed marks c as built at event at, from the journal whose first event
// is origin (nil: the next journal it reads).
func (c *Catalog) seed(at, fuzzy uint64, origin []byte) error {
	return c.db.Update(func(tx *bolt.Tx) error {
		m := tx.Bucket(catMeta)
		if err := putUint(m, metaAt, at); err != nil {
			return err
		}
		if err := putUint(m, metaFuzzy, fuzzy); err != nil {
			return err
		}
		var err error
		if origin != nil {
			err = m.Put(metaOrigin, origin)
		} else {
			err = m.Delete(metaOrigin)
		}
		if err != nil {
			return err
		}
		return m.Put(metaSeeded, []byte{1})
	})
}
