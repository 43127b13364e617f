package repl

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	bolt "go.etcd.io/bbolt"

	"github.com/cmfs-project/cmfs/journal"
)

// A filtered dump (--db, --table) is the source restricted to the filter
// at every event. Events inside the filter are dumped as they are; events
// outside it are left out; a move across the filter's edge is rewritten,
// under its own id, as what it is seen from inside the filter:
//
//   - a rename or link from outside to inside is an arrival: for a file,
//     an INSERT (WRITE outside a table) of its content, which replaces
//     what the target held there; for a symlink, a SYMLINK event; for a
//     directory, a CREATE_* / MKDIR of it whose _files list every file
//     below it (content as of the event, fetched like any new content: at
//     its path, else in cmroot by checksum, else where later renames
//     moved it), whose _dirs list every directory of it, itself included,
//     and whose _symlinks its symlinks — the load replaces what the
//     target held at that path with exactly that tree;
//   - a rename from inside to outside is a removal of the whole subtree
//     (DELETE for a file, DROP_* / RMDIR for a directory);
//   - a rename that moves a filtered table along with its database (the
//     database renamed, a --table filter) is narrowed to the table.
//
// What a directory held before it moved in (and whether a name was a
// symlink) comes from a catalog the dump advances in step with the events
// it writes, from the event before the first one it writes: the filter's
// own (FilterCatalogFile), which only that filter's dumps move, so that
// another filter's chain or a BOOTSTRAP (which moves the shared one)
// cannot take it past a chain's next dump. When it is not at or before
// that event (the chain's first dump, or a second chain of the same
// filter behind the first), it is seeded (filterCatalog): from the shared
// catalog if that is, else, for a dump from event 1, with the empty tree
// before it — where a chain from event 1 starts its target too. A
// filtered BOOTSTRAP leaves it at or before its to. Without such a
// catalog, a dump that meets a directory moving in fails with errNoView;
// files, removals and everything inside the filter need no catalog.

// filter is a --db / --table filter; the zero value keeps everything.
type filter struct{ db, table string }

func (f filter) on() bool { return f.db != "" || f.table != "" }

func (f filter) String() string {
	switch {
	case f.db != "" && f.table != "":
		return "table " + f.db + "." + f.table
	case f.db != "":
		return "database " + f.db
	}
	return "table " + f.table + " (of every database)"
}

// keeps says whether the path p (a directory if dir) is inside the
// filter: a directory by its own place in the layout, anything else by
// its directory's, as a BOOTSTRAP keeps them.
func (f filter) keeps(p string, dir bool) bool {
	loc := journal.Locate(p)
	if !dir {
		loc = journal.Locate(path.Dir(p))
	}
	if loc.Level == journal.Outside {
		return false
	}
	return (f.db == "" || loc.DB == f.db) && (f.table == "" || loc.Table == f.table)
}

// root returns the suffix s such that p+s is the topmost path inside the
// filter that moves with p: "" when p is inside, "/<table>" for the
// database directory of a --table filter, and ok false when nothing in
// the filter is at or below p.
func (f filter) root(p string, dir bool) (suffix string, ok bool) {
	if f.keeps(p, dir) {
		return "", true
	}
	if loc := journal.Locate(p); dir && f.table != "" && loc.Level == journal.Database && (f.db == "" || loc.DB == f.db) {
		return "/" + f.table, true
	}
	return "", false
}

// entry is what the source tree holds at a path: a directory, a regular
// file (size, xxh64) or a symlink (target).
type entry struct {
	dir    bool
	size   int64
	xxh64  string
	link   bool
	target string
}

// treeView is the source tree as of the event before the one being
// rewritten: its directories, regular files and symlinks.
type treeView interface {
	// stat returns what is at p, ok false for nothing.
	stat(p string) (e entry, ok bool, err error)
	// walk calls fn for p and everything below it, p first, with the
	// path relative to p ("" for p itself).
	walk(p string, fn func(rel string, e entry) error) error
}

// errNoView: rewriting an event needs the source tree as of the event
// before it, and there is no catalog at that event.
var errNoView = errors.New("the tree it held is not known")

// rewritten is an event as a filtered dump writes it.
type rewritten struct {
	e     *journal.Event
	dirs  []string // non-nil: an arrival of a directory tree at e.Path
	links []Entry  // the symlinks of that tree
}

// rewrite returns e as the filter sees it: nil to leave it out, e itself
// when it is inside, or an event that stands for it. v is the source
// tree as of the event before e, nil if unknown.
func (f filter) rewrite(e *journal.Event, v treeView) (*rewritten, error) {
	switch e.Type {
	case journal.Rename, journal.RenameDatabase, journal.RenameTable, journal.RenamePartition:
		if e.Target == "exchange" {
			return f.exchange(e, v)
		}
		return f.rename(e, v)
	case journal.Link:
		// A new name: arriving content if the name is inside.
		switch in, from := f.keeps(e.NewPath, false), f.keeps(e.Path, false); {
		case in && from:
			return &rewritten{e: e}, nil
		case in:
			if !carries(e, e.NewPath) && v != nil {
				// No content: a link to a symlink, which the tree knows.
				if en, ok, err := v.stat(e.Path); err != nil || ok && en.link {
					return &rewritten{e: symlinkArrival(e, e.NewPath, en.target)}, err
				}
			}
			return &rewritten{e: fileArrival(e, e.NewPath, e.Files)}, nil
		}
		return nil, nil
	case journal.CreateDatabase, journal.CreateTable, journal.AddPartition, journal.Mkdir,
		journal.DropDatabase, journal.DropTable, journal.DropPartition, journal.Rmdir:
		if f.keeps(e.Path, true) {
			return &rewritten{e: e}, nil
		}
		return nil, nil
	}
	if f.keeps(e.Path, false) {
		return &rewritten{e: e}, nil
	}
	return nil, nil
}

// carries says whether e carries new content at p.
func carries(e *journal.Event, p string) bool {
	for _, fl := range e.Files {
		if fl.CM == "" && fl.Path == p {
			return true
		}
	}
	return false
}

// moved says what a rename moved: a file if it carries the moved file's
// content, a directory if typed as a database, table or partition rename,
// else what the tree says (nothing there: a special file, ok false).
// Without a tree, a rename without content is taken for a directory's.
func moved(e *journal.Event, v treeView) (en entry, ok bool, err error) {
	if carries(e, e.NewPath) {
		return entry{}, true, nil
	}
	if e.Type != journal.Rename || v == nil {
		return entry{dir: true}, true, nil
	}
	return v.stat(e.Path)
}

func (f filter) rename(e *journal.Event, v treeView) (*rewritten, error) {
	en, known, err := moved(e, v)
	if err != nil {
		return nil, err
	}
	dir := en.dir // a symlink (or a special file) is placed as a file is
	srcSfx, fromIn := f.root(e.Path, dir)
	dstSfx, toIn := f.root(e.NewPath, dir)
	leaves := fromIn && !f.keeps(e.NewPath+srcSfx, dir || srcSfx != "")
	arrives := toIn && !f.keeps(e.Path+dstSfx, dir || dstSfx != "")
	switch {
	case fromIn && !leaves:
		if srcSfx == "" {
			return &rewritten{e: e}, nil
		}
		// The database renamed under a --table filter: the table moves.
		from, to := e.Path+srcSfx, e.NewPath+srcSfx
		if v == nil {
			return nil, fmt.Errorf("%s moves with %s: whether it exists: %w", from, e.Path, errNoView)
		}
		if _, ok, err := v.stat(from); err != nil || !ok {
			return nil, err
		}
		n := stamp(&journal.Event{ID: e.ID, Time: e.Time, Type: journal.RenameTable, Path: from, NewPath: to}, true)
		return &rewritten{e: n}, nil
	case leaves && arrives:
		return nil, fmt.Errorf("%s leaves the filter and %s enters it: one event cannot say both", e.Path+srcSfx, e.NewPath+dstSfx)
	case leaves:
		gone := e.Path + srcSfx
		isd := dir || srcSfx != ""
		return &rewritten{e: stamp(&journal.Event{ID: e.ID, Time: e.Time, Type: removalType(gone, isd), Path: gone}, isd)}, nil
	case arrives:
		to := e.NewPath + dstSfx
		if !dir {
			switch {
			case en.link:
				return &rewritten{e: symlinkArrival(e, to, en.target)}, nil
			case !known && v != nil:
				return nil, fmt.Errorf("%s moves into the filter as %s: a special file, which the catalog does not list: not replicated", e.Path, to)
			}
			return &rewritten{e: fileArrival(e, to, e.Files)}, nil
		}
		return treeArrival(e, e.Path+dstSfx, to, v)
	}
	return nil, nil
}

// exchange rewrites a RENAME_EXCHANGE: each end gets what the other held.
func (f filter) exchange(e *journal.Event, v treeView) (*rewritten, error) {
	// Both ends exist; what they are, only the tree knows.
	kind := func(p string) (bool, error) {
		if v == nil {
			return false, fmt.Errorf("%s: %w", p, errNoView)
		}
		en, ok, err := v.stat(p)
		if err == nil && !ok {
			err = fmt.Errorf("%s is a special file, which the catalog does not list: not replicated", p)
		}
		return en.dir, err
	}
	aIn, bIn := f.keeps(e.Path, true) || f.keeps(e.Path, false), f.keeps(e.NewPath, true) || f.keeps(e.NewPath, false)
	if aIn && bIn {
		return &rewritten{e: e}, nil
	}
	if !aIn && !bIn {
		if _, ok := f.root(e.Path, true); ok {
			return nil, fmt.Errorf("exchange of %s and %s, above the filter: not replicated", e.Path, e.NewPath)
		}
		if _, ok := f.root(e.NewPath, true); ok {
			return nil, fmt.Errorf("exchange of %s and %s, above the filter: not replicated", e.Path, e.NewPath)
		}
		return nil, nil
	}
	at, from := e.Path, e.NewPath // at: the end inside, which gets what from held
	if bIn {
		at, from = from, at
	}
	dir, err := kind(from)
	if err != nil {
		return nil, err
	}
	if atDir, err := kind(at); err != nil {
		return nil, err
	} else if f.keeps(at, dir) != f.keeps(at, atDir) {
		return nil, fmt.Errorf("exchange of %s and %s across the filter's edge: not replicated", e.Path, e.NewPath)
	}
	if !f.keeps(at, dir) {
		return nil, nil
	}
	r, err := treeArrival(e, from, at, v)
	if r != nil && r.dirs == nil {
		r.dirs = []string{} // replaces whatever the target holds at the end
	}
	return r, err
}

// fileArrival is a file's content arriving at p: an INSERT (a WRITE
// outside a table) with the event's files at p (the new content, and the
// original it replaced, preserved).
func fileArrival(e *journal.Event, p string, files []journal.File) *journal.Event {
	n := &journal.Event{ID: e.ID, Time: e.Time, Type: journal.Write, Path: p}
	if journal.Locate(path.Dir(p)).Table != "" {
		n.Type = journal.Insert
	}
	for _, fl := range files {
		if fl.Path == p {
			n.Files = append(n.Files, fl)
		}
	}
	return stamp(n, false)
}

// symlinkArrival is a symlink arriving at p: a SYMLINK event, which
// replaces what the target held there.
func symlinkArrival(e *journal.Event, p, target string) *journal.Event {
	return stamp(&journal.Event{ID: e.ID, Time: e.Time, Type: journal.Symlink, Path: p, Target: target}, false)
}

// treeArrival is what the tree held at from, as of the event before e,
// arriving at to.
func treeArrival(e *journal.Event, from, to string, v treeView) (*rewritten, error) {
	if v == nil {
		return nil, fmt.Errorf("%s moves into the filter as %s: what it holds: %w", from, to, errNoView)
	}
	var files []journal.File
	var dirs []string
	var links []Entry
	var top *entry
	err := v.walk(from, func(rel string, en entry) error {
		p := to + rel
		if rel == "" {
			top = &en
		}
		switch {
		case en.dir:
			dirs = append(dirs, p)
		case en.link:
			links = append(links, Entry{Path: p, Kind: EntrySymlink, Target: en.target})
		default:
			files = append(files, journal.File{Path: p, Size: en.size, XXH64: en.xxh64})
		}
		return nil
	})
	switch {
	case err != nil || top == nil:
		return nil, err // nothing there: nothing arrives
	case top.link:
		return &rewritten{e: symlinkArrival(e, to, top.target)}, nil
	case !top.dir:
		return &rewritten{e: fileArrival(e, to, files)}, nil
	}
	sort.Strings(dirs)
	sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	sort.Slice(links, func(i, j int) bool { return links[i].Path < links[j].Path })
	n := stamp(&journal.Event{ID: e.ID, Time: e.Time, Type: levelType(true, to), Path: to, Files: files}, true)
	return &rewritten{e: n, dirs: dirs, links: links}, nil
}

// levelType is the type of the event that makes (mk) or removes the
// directory p, by its level in the warehouse layout, as cmfs types them.
func levelType(mk bool, p string) journal.Type {
	t := map[journal.Level][2]journal.Type{
		journal.Database:  {journal.CreateDatabase, journal.DropDatabase},
		journal.Table:     {journal.CreateTable, journal.DropTable},
		journal.Partition: {journal.AddPartition, journal.DropPartition},
	}[journal.Locate(p).Level]
	if t[0] == "" {
		t = [2]journal.Type{journal.Mkdir, journal.Rmdir}
	}
	if mk {
		return t[0]
	}
	return t[1]
}

func removalType(p string, dir bool) journal.Type {
	if dir {
		return levelType(false, p)
	}
	return journal.Delete
}

// stamp fills an event's warehouse fields as cmfs does: a directory's
// from its own path, anything else's from its directory.
func stamp(e *journal.Event, dir bool) *journal.Event {
	loc := journal.Locate(e.Path)
	if !dir {
		loc = journal.Locate(path.Dir(e.Path))
	}
	e.DB, e.Table, e.Partition = loc.DB, loc.Table, loc.Partition
	return e
}

// catView is a catalog's tree inside one of its transactions: as of the
// last event applied in it.
type catView struct{ a catApplier }

func (c catView) stat(p string) (entry, bool, error) {
	v := c.a.b.Get([]byte(p))
	if v == nil {
		return entry{}, false, nil
	}
	en, err := viewEntry(v)
	if err != nil {
		return entry{}, false, fmt.Errorf("catalog entry %q: %w", p, err)
	}
	return en, true, nil
}

func viewEntry(v []byte) (entry, error) {
	en, err := parseEntry(v)
	return entry{dir: en.Kind == EntryDir, size: en.Size, xxh64: en.XXH64, link: en.Kind == EntrySymlink, target: en.Target}, err
}

func (c catView) walk(p string, fn func(rel string, e entry) error) error {
	en, ok, err := c.stat(p)
	if err != nil || !ok {
		return err
	}
	if err := fn("", en); err != nil || !en.dir {
		return err
	}
	prefix := []byte(p + "/")
	cur := c.a.b.Cursor()
	for k, v := cur.Seek(prefix); k != nil && strings.HasPrefix(string(k), string(prefix)); k, v = cur.Next() {
		en, err := viewEntry(v)
		if err != nil {
			return fmt.Errorf("catalog entry %q: %w", k, err)
		}
		if err := fn(string(k[len(p):]), en); err != nil {
			return err
		}
	}
	return nil
}

// errCatalogPast: the catalog is not at or before the event a filtered
// dump needs it at.
var errCatalogPast = errors.New("catalog past the dump's start")

// replay advances the catalog, which must be built and at or before
// from-1, to to: up to from-1 as Update does, then through [from, to]
// calling fn with each event and a view of the tree as of the event
// before it. Before a transaction that applied events from from on
// commits, checkpoint is called with the last of them, so that what fn
// wrote is durable before the catalog says it is past it.
func (c *Catalog) replay(ctx context.Context, events Events, from, to uint64, fn func(e *journal.Event, v treeView) error, checkpoint func(id uint64) error) error {
	at, built, err := c.At()
	if err != nil {
		return err
	}
	if !built || at >= from {
		return fmt.Errorf("catalog at event %d (built: %v), dump from %d: %w", at, built, from, errCatalogPast)
	}
	if err := c.checkOrigin(ctx, events, to); err != nil {
		return err
	}
	for at < to {
		end := min(to, at+catalogBatch)
		if at < from-1 {
			end = min(end, from-1)
		}
		err := c.db.Update(func(tx *bolt.Tx) error {
			m := tx.Bucket(catMeta)
			a := catApplier{b: tx.Bucket(catTree), fuzzyUntil: getUint(m, metaFuzzy)}
			err := events.Range(ctx, at+1, end, func(e *journal.Event) error {
				if e.ID >= from {
					if err := fn(e, catView{a}); err != nil {
						return err
					}
				}
				return a.apply(e)
			})
			if err != nil {
				return err
			}
			if end >= from {
				if err := checkpoint(end); err != nil {
					return err
				}
			}
			return putUint(m, metaAt, end)
		})
		if err != nil {
			return err
		}
		at = end
	}
	return nil
}

// arrive makes the target's rel hold the directories of an arrival (see
// rewrite) and nothing else; the event's files are placed after, as any
// new content. Done again after a crash, it ends in the same state.
func (l *loader) arrive(rel string, dirs []string) error {
	if err := l.remove(rel); err != nil {
		return err
	}
	for _, d := range dirs {
		if err := l.mkdirs(d); err != nil {
			return err
		}
	}
	return nil
}

// ParseFilter reads the --db and --table flags. --db takes a database's
// name or its directory's (sales or sales.db: one ".db" is taken off, so a
// database whose name ends in ".db" is spelled with its directory's name,
// x.db.db). --table takes a table's name (of every database, unless --db
// is given), or, without --db, names its database too: DB.TABLE (Hive's
// spelling, split at the first dot) or DB.db/TABLE (the directory's);
// with --db, --table is the table's name as it is. It refuses a name that
// cannot be a database's or table's.
func ParseFilter(db, table string) (string, string, error) {
	if db != "" {
		db = strings.TrimSuffix(db, ".db")
		if err := filterName(db); err != nil {
			return "", "", fmt.Errorf("--db %q: %w", db, err)
		}
	}
	if table == "" {
		return db, "", nil
	}
	t := table
	if d, rest, ok := strings.Cut(t, "/"); ok {
		q, ok := strings.CutSuffix(d, ".db")
		if !ok || db != "" && q != db {
			return "", "", fmt.Errorf("--table %q: a table's directory is DB.db/TABLE (of --db's database, if given)", table)
		}
		db, t = q, rest
	} else if d, rest, ok := strings.Cut(t, "."); ok && db == "" {
		if d == "" {
			return "", "", fmt.Errorf("--table %q: database %q: empty name", table, d)
		}
		db, t = d, rest
	}
	if err := filterName(db); err != nil && db != "" {
		return "", "", fmt.Errorf("--table %q: database %q: %w", table, db, err)
	}
	if err := filterName(t); err != nil {
		return "", "", fmt.Errorf("--table %q: %w", table, err)
	}
	return db, t, nil
}

func filterName(n string) error {
	switch {
	case n == "":
		return errors.New("empty name")
	case n == "." || n == ".." || strings.ContainsAny(n, "/\x00"):
		return errors.New("not a name")
	}
	return nil
}

// FilterSeen says whether the filter names anything the warehouse holds
// at root now or any event up to to named: a directory of the database
// (or table) or a path inside it. It looks at the tree first, and reads
// the journal only when the tree has nothing.
func FilterSeen(ctx context.Context, events Events, root, db, table string, to uint64) (bool, error) {
	f := filter{db: db, table: table}
	pattern := "*.db"
	if db != "" {
		pattern = globEscape(db) + ".db"
	}
	if table != "" {
		pattern += "/" + globEscape(table)
	}
	m, err := filepath.Glob(filepath.Join(root, pattern))
	if err != nil {
		return false, err
	}
	for _, p := range m {
		if fi, err := os.Stat(p); err == nil && fi.IsDir() {
			return true, nil
		}
	}
	errSeen := errors.New("seen")
	err = events.Range(ctx, 1, to, func(e *journal.Event) error {
		for _, p := range []string{e.Path, e.NewPath} {
			if p != "" && (f.keeps(p, true) || f.keeps(p, false)) {
				return errSeen
			}
		}
		return nil
	})
	if errors.Is(err, errSeen) {
		return true, nil
	}
	return false, err
}

// globEscape quotes the characters filepath.Match treats specially.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
