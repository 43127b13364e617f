package repl

import (
	"github.com/cmfs-project/cmfs/internal/durable"

	"context"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/cmfs-project/cmfs/journal"
)

// unit is one directory of a BOOTSTRAP dump: a database, a table, a
// partition, or everything outside the warehouse layout.
type unit struct {
	db, table, part string
	outside         bool
	partitioned     bool // a table with partition directories
	files           []journal.File
	dirs            []string
	symlinks        []Entry
}

// UnitMetadata is the _metadata of a database, table or partition
// directory in a BOOTSTRAP dump.
type UnitMetadata struct {
	DB          string `json:"db"`
	Table       string `json:"table,omitempty"`
	Partition   string `json:"partition,omitempty"`
	Partitioned bool   `json:"partitioned,omitempty"`
}

// dir is the unit's directory inside the dump.
func (u *unit) dir() string {
	if u.outside {
		return outsideDir
	}
	parts := []string{escName(u.db)}
	if u.table != "" {
		parts = append(parts, escName(u.table))
	}
	if u.part != "" {
		for _, c := range strings.Split(u.part, "/") {
			parts = append(parts, escName(c))
		}
	}
	return filepath.Join(parts...)
}

// escName escapes a database, table or partition name for use as a
// directory name in a dump: as Escape, and a leading '_' as %5F, so that
// no name collides with the dump's own files (_files, _metadata, ...).
func escName(s string) string {
	e := Escape(s)
	if strings.HasPrefix(e, "_") {
		e = "%5F" + e[1:]
	}
	return e
}

type units map[string]*unit

func (us units) get(loc journal.Location, outside bool) *unit {
	if outside || loc.Level == journal.Outside {
		loc = journal.Location{}
		outside = true
	}
	key := loc.DB + "\x00" + loc.Table + "\x00" + loc.Partition
	if outside {
		key = "\x01"
	}
	u := us[key]
	if u == nil {
		u = &unit{db: loc.DB, table: loc.Table, part: loc.Partition, outside: outside}
		us[key] = u
	}
	return u
}

func (opts *DumpOptions) keeps(db, table string) bool {
	return (opts.DB == "" || opts.DB == db) && (opts.Table == "" || opts.Table == table)
}

func dumpBootstrap(ctx context.Context, events Events, out string, opts DumpOptions) (DumpResult, error) {
	res := DumpResult{Dir: out, Kind: Bootstrap}
	if opts.Tree == nil && opts.Catalog == nil {
		return res, fmt.Errorf("a BOOTSTRAP dump needs the source tree or a catalog")
	}
	if md, err := ReadMetadata(out); err == nil {
		if md.Kind != Bootstrap || md.Source != opts.Source || md.DB != opts.DB || md.Table != opts.Table {
			return res, fmt.Errorf("it holds the %s dump from %d to %d (source %q, db %q, table %q), not the one asked for: %w",
				md.Kind, md.From, md.To, md.Source, md.DB, md.Table, ErrMismatch)
		}
		if _, err := ReadFinished(out); err == nil {
			res.To = md.To
			return res, nil
		}
		// Interrupted: the walk is redone from scratch.
		if err := durable.ClearDir(out); err != nil {
			return res, err
		}
	}
	tree := opts.Tree
	var to uint64
	var err error
	if opts.Catalog != nil {
		to, err = opts.Catalog.Update(ctx, events, opts.Tree)
		tree = opts.Catalog
		if err == nil && opts.FilterCatalog != nil {
			err = seedFilterCatalog(ctx, opts.FilterCatalog, opts.Catalog, to)
		}
	} else {
		to, err = events.Last(ctx)
	}
	if err != nil {
		return res, err
	}
	res.To = to
	md := Metadata{Kind: Bootstrap, From: 0, To: to, Source: opts.Source, Created: time.Now().UTC(), Version: FormatVersion, DB: opts.DB, Table: opts.Table}
	if _, _, err := prepare(out, md, func(Metadata) error { return nil }); err != nil {
		return res, err
	}

	us := units{}
	// Files come directory by directory: their unit is looked up once per
	// directory, not per file.
	var lastDir string
	var lastUnit *unit // nil: the directory's files are filtered out
	err = tree.Walk(ctx, func(e Entry) error {
		p := e.Path
		if err := checkRel(p); err != nil {
			return err
		}
		if e.Kind == EntryDir {
			loc := journal.Locate(p)
			if !opts.keeps(loc.DB, loc.Table) || loc.Level == journal.Outside && opts.DB != "" {
				return nil
			}
			if loc.Level == journal.Partition {
				us.get(journal.Location{Level: journal.Table, DB: loc.DB, Table: loc.Table}, false).partitioned = true
			}
			u := us.get(loc, false)
			u.dirs = append(u.dirs, p)
			return nil
		}
		if dir := path.Dir(p); dir != lastDir || lastDir == "" {
			lastDir, lastUnit = dir, nil
			loc := journal.Locate(dir)
			if opts.keeps(loc.DB, loc.Table) && (loc.Level != journal.Outside || opts.DB == "") {
				lastUnit = us.get(loc, false)
			}
		}
		if lastUnit == nil {
			return nil
		}
		u := lastUnit
		if e.Kind == EntrySymlink {
			u.symlinks = append(u.symlinks, e)
			return nil
		}
		u.files = append(u.files, journal.File{Path: p, Size: e.Size, XXH64: e.XXH64})
		res.Files++
		return nil
	})
	if err != nil {
		return res, err
	}
	walkEnd := to // a catalog is the tree as of to, exactly
	if opts.Catalog == nil {
		if walkEnd, err = events.Last(ctx); err != nil {
			return res, err
		}
	}
	keys := make([]string, 0, len(us))
	for k := range us {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := writeUnit(out, us[k]); err != nil {
			return res, err
		}
	}
	if err := durable.SyncFS(out); err != nil {
		return res, err
	}
	return res, writeJSON(out, finishedFile, Finished{To: to, WalkEnd: walkEnd})
}

func writeUnit(out string, u *unit) error {
	dir := filepath.Join(out, u.dir())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if !u.outside {
		md := UnitMetadata{DB: u.db, Table: u.table, Partition: u.part, Partitioned: u.partitioned}
		b, err := json.Marshal(md)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, eventMeta), append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	sort.Strings(u.dirs)
	sort.Slice(u.files, func(i, j int) bool { return u.files[i].Path < u.files[j].Path })
	var b []byte
	for _, d := range u.dirs {
		b = append(append(b, Escape(d)...), '\n')
	}
	if err := os.WriteFile(filepath.Join(dir, dirsFile), b, 0o644); err != nil {
		return err
	}
	b = b[:0]
	for _, f := range u.files {
		b = AppendFile(b, f)
	}
	if err := os.WriteFile(filepath.Join(dir, filesFile), b, 0o644); err != nil {
		return err
	}
	sort.Slice(u.symlinks, func(i, j int) bool { return u.symlinks[i].Path < u.symlinks[j].Path })
	b = b[:0]
	for _, l := range u.symlinks {
		b = AppendSymlink(b, l.Path, l.Target)
	}
	return os.WriteFile(filepath.Join(dir, symlinksFile), b, 0o644)
}

// seedFilterCatalog leaves a filter's own catalog at or before to, where
// the filtered INCREMENTAL after a filtered BOOTSTRAP at to starts: as it
// is if it is, else a copy of the shared catalog, at to.
func seedFilterCatalog(ctx context.Context, fc, shared *Catalog, to uint64) error {
	at, built, err := fc.At()
	if err != nil || built && at <= to {
		return err
	}
	return fc.seedFrom(ctx, shared)
}
