package repl

import (
	"github.com/cmfs-project/cmfs/internal/durable"

	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cmfs-project/cmfs/journal"
)

// Kind says what a dump holds.
type Kind string

// Dump kinds.
const (
	Bootstrap   Kind = "BOOTSTRAP"
	Incremental Kind = "INCREMENTAL"
)

// FormatVersion is the version of the dump layout this package writes and
// reads. Version 1 listed a file longer than checksum.BlockSize by the
// xxh64 of its whole content, version 2 by its block checksum.
const FormatVersion = 2

// Names inside a dump directory.
const (
	metadataFile = "_dumpmetadata"
	finishedFile = "_finished_dump"
	progressFile = "_progress"
	eventMeta    = "_metadata"
	filesFile    = "_files"
	dirsFile     = "_dirs"
	outsideDir   = "_outside"
	tmpPrefix    = ".tmp-"
	idWidth      = 20
)

// Metadata is the content of <dump>/_dumpmetadata.
type Metadata struct {
	Kind    Kind      `json:"kind"`
	From    uint64    `json:"from"`
	To      uint64    `json:"to"`
	Source  string    `json:"source"`
	Created time.Time `json:"created"`
	Version int       `json:"version"`
	DB      string    `json:"db,omitempty"`
	Table   string    `json:"table,omitempty"`
}

// Finished is the content of <dump>/_finished_dump.
type Finished struct {
	To uint64 `json:"to"`
	// WalkEnd (BOOTSTRAP only) is the newest event id when the tree walk
	// ended. Events in (To, WalkEnd] may have raced with the walk; a
	// target loads them tolerantly (see Load).
	WalkEnd uint64 `json:"walk_end,omitempty"`
}

// DumpOptions select what Dump writes.
type DumpOptions struct {
	// From is the first event of an INCREMENTAL dump; 0 makes a BOOTSTRAP.
	From uint64
	// To is the last event; 0 means the newest when the dump starts.
	// BOOTSTRAP ignores it: it is pinned to the newest event before the walk.
	To uint64
	// DB and Table keep only events (or bootstrap units) of that database
	// and table. A filtered dump still covers [From, To] for the target.
	DB, Table string
	// Source identifies the source warehouse; Load refuses to mix sources.
	Source string
	// Tree is the current tree, required for a BOOTSTRAP (with a
	// Catalog: the first time it is brought up to date).
	Tree Tree
	// Catalog, if set, is what a BOOTSTRAP lists: brought up to the
	// newest event first, it is the tree exactly as of that event, and
	// the dump is pinned there with no events racing it.
	Catalog *Catalog
	// FilterCatalog, for a filtered dump, is the filter's own catalog
	// (FilterCatalogFile), which only that filter's dumps advance: an
	// INCREMENTAL replays it in step with the events it writes, to know
	// what moves into the filter (see filter.go); a BOOTSTRAP from
	// Catalog seeds it when it is not at or before the dump's event.
	FilterCatalog *Catalog
}

// DumpResult says what Dump wrote.
type DumpResult struct {
	Dir      string
	Kind     Kind
	From, To uint64
	Events   int // event directories written by this call (INCREMENTAL)
	Files    int // files listed (BOOTSTRAP)
}

// checkpointEvery is how many events an incremental dump writes between
// durable progress checkpoints.
const checkpointEvery = 16384

// Dump writes a dump of events into the directory out (created if
// missing): an INCREMENTAL of events [opts.From, opts.To] when From > 0,
// built from the events alone; else a BOOTSTRAP of opts.Tree pinned to
// the newest event before the walk. Rerun with the same out and options,
// an interrupted INCREMENTAL resumes after its last durable event
// directory, an interrupted BOOTSTRAP starts over, and a finished dump is
// returned as it is.
//
// Errors: ErrNoEvents (From past the newest event), ErrMismatch (out holds
// another dump or other files), ErrFormat (a mangled _dumpmetadata), the
// Events' errors, I/O errors.
func Dump(ctx context.Context, events Events, out string, opts DumpOptions) (DumpResult, error) {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return DumpResult{}, fmt.Errorf("dump: %w", err)
	}
	var res DumpResult
	var err error
	if opts.From == 0 {
		res, err = dumpBootstrap(ctx, events, out, opts)
	} else {
		res, err = dumpIncremental(ctx, events, out, opts)
	}
	if err != nil {
		return res, fmt.Errorf("dump %s: %w", out, err)
	}
	return res, nil
}

// ReadMetadata reads a dump's _dumpmetadata.
func ReadMetadata(dir string) (Metadata, error) {
	var md Metadata
	b, err := os.ReadFile(filepath.Join(dir, metadataFile))
	if err != nil {
		return md, err
	}
	if err := json.Unmarshal(b, &md); err != nil {
		return md, fmt.Errorf("%s: %v: %w", filepath.Join(dir, metadataFile), err, ErrFormat)
	}
	if md.Version != FormatVersion {
		return md, fmt.Errorf("%s: version %d, this build reads %d: %w", filepath.Join(dir, metadataFile), md.Version, FormatVersion, ErrFormat)
	}
	if md.Kind != Bootstrap && md.Kind != Incremental {
		return md, fmt.Errorf("%s: kind %q: %w", filepath.Join(dir, metadataFile), md.Kind, ErrFormat)
	}
	return md, nil
}

// ReadFinished reads a dump's _finished_dump; a missing one is
// ErrIncomplete.
func ReadFinished(dir string) (Finished, error) {
	var fin Finished
	b, err := os.ReadFile(filepath.Join(dir, finishedFile))
	if errors.Is(err, os.ErrNotExist) {
		return fin, fmt.Errorf("dump %s is incomplete (no %s): %w", dir, finishedFile, ErrIncomplete)
	}
	if err != nil {
		return fin, err
	}
	if err := json.Unmarshal(b, &fin); err != nil {
		return fin, fmt.Errorf("%s: %v: %w", filepath.Join(dir, finishedFile), err, ErrFormat)
	}
	return fin, nil
}

func writeJSON(dir, name string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return durable.WriteFile(filepath.Join(dir, name), append(b, '\n'), 0o644)
}

// EventDirName is the name of an event's directory in an INCREMENTAL dump:
// its id, zero-padded to 20 digits, so that names sort in id order.
func EventDirName(id uint64) string {
	var b [idWidth]byte
	s := strconv.FormatUint(id, 10)
	for i := range b[:idWidth-len(s)] {
		b[i] = '0'
	}
	copy(b[idWidth-len(s):], s)
	return string(b[:])
}

// parseEventDir returns the id an event directory name spells.
func parseEventDir(name string) (uint64, bool) {
	if len(name) != idWidth || strings.Trim(name, "0123456789") != "" {
		return 0, false
	}
	id, err := strconv.ParseUint(name, 10, 64)
	return id, err == nil
}

// start opens or creates the dump in out: it returns the metadata to
// write (or found), whether the dump is already finished, and an error if
// out holds something else.
func prepare(out string, want Metadata, check func(found Metadata) error) (Metadata, bool, error) {
	found, err := ReadMetadata(out)
	if err == nil {
		if err := check(found); err != nil {
			return found, false, err
		}
		if _, err := ReadFinished(out); err == nil {
			return found, true, nil
		} else if !errors.Is(err, ErrIncomplete) {
			return found, false, err
		}
		return found, false, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return found, false, err
	}
	ents, err := os.ReadDir(out)
	if err != nil {
		return want, false, err
	}
	if len(ents) > 0 {
		return want, false, fmt.Errorf("%s holds %s but no %s: not a dump directory: %w", out, ents[0].Name(), metadataFile, ErrMismatch)
	}
	return want, false, writeJSON(out, metadataFile, want)
}

func dumpIncremental(ctx context.Context, events Events, out string, opts DumpOptions) (DumpResult, error) {
	res := DumpResult{Dir: out, Kind: Incremental, From: opts.From}
	md, err := ReadMetadata(out)
	fresh := errors.Is(err, os.ErrNotExist)
	if err != nil && !fresh {
		return res, err
	}
	if fresh {
		last, err := events.Last(ctx)
		if err != nil {
			return res, err
		}
		to := opts.To
		if opts.From > last {
			return res, fmt.Errorf("from %d: the journal ends at %d: %w", opts.From, last, ErrNoEvents)
		}
		if to == 0 {
			to = last
		}
		if to > last {
			return res, fmt.Errorf("to %d: the journal ends at %d: %w", to, last, ErrNoEvents)
		}
		if to < opts.From {
			return res, fmt.Errorf("to %d is before from %d", to, opts.From)
		}
		md = Metadata{Kind: Incremental, From: opts.From, To: to, Source: opts.Source, Created: time.Now().UTC(), Version: FormatVersion, DB: opts.DB, Table: opts.Table}
	}
	md, done, err := prepare(out, md, func(found Metadata) error {
		if found.Kind != Incremental || found.From != opts.From || (opts.To != 0 && found.To != opts.To) ||
			found.Source != opts.Source || found.DB != opts.DB || found.Table != opts.Table {
			return fmt.Errorf("it holds the %s dump from %d to %d (source %q, db %q, table %q), not the one asked for: %w",
				found.Kind, found.From, found.To, found.Source, found.DB, found.Table, ErrMismatch)
		}
		return nil
	})
	res.To = md.To
	if err != nil || done {
		return res, err
	}

	next, err := resumePoint(out, md)
	if err != nil {
		return res, err
	}
	fl := filter{db: md.DB, table: md.Table}
	want, written := next, 0
	// write writes one event, as the filter sees it; v is the tree as of
	// the event before it, nil if unknown.
	write := func(e *journal.Event, v treeView) error {
		if e.ID != want {
			return fmt.Errorf("source sent event %d, want %d: %w", e.ID, want, ErrFormat)
		}
		want++
		r := &rewritten{e: e}
		if fl.on() {
			var err error
			if r, err = fl.rewrite(e, v); err != nil {
				return fmt.Errorf("event %d (%s %s -> %s), filtered to %s: %w", e.ID, e.Type, e.Path, e.NewPath, fl, err)
			}
			if r == nil {
				return nil
			}
		}
		if err := writeEvent(out, r.e, r.dirs, r.links); err != nil {
			return err
		}
		written++
		return nil
	}
	if next <= md.To {
		var err error
		var cat *Catalog
		if fl.on() {
			// A catalog, advanced in step, shows what moves into the
			// filter.
			cat, err = filterCatalog(ctx, opts, next)
		}
		if cat != nil {
			err = cat.replay(ctx, events, next, md.To, write, func(id uint64) error { return checkpoint(out, id) })
		}
		if !fl.on() || cat == nil || errors.Is(err, errCatalogPast) {
			past := err
			err = events.Range(ctx, next, md.To, func(e *journal.Event) error {
				if err := write(e, nil); err != nil {
					if errors.Is(err, errNoView) {
						err = fmt.Errorf("%w: a filtered dump knows it from a catalog at or before event %d (%v); dump the filtered BOOTSTRAP again to start from", err, next-1, past)
					}
					return err
				}
				if (e.ID-next+1)%checkpointEvery == 0 {
					return checkpoint(out, e.ID)
				}
				return nil
			})
		}
		if err != nil {
			return res, err
		}
		if want != md.To+1 {
			return res, fmt.Errorf("source ended at event %d, before %d: %w", want-1, md.To, ErrFormat)
		}
	}
	res.Events = written
	if err := durable.SyncFS(out); err != nil {
		return res, err
	}
	return res, writeJSON(out, finishedFile, Finished{To: md.To})
}

// filterCatalog returns the catalog a filtered INCREMENTAL that writes
// from event next on replays: one at or before next-1. The filter's own,
// if it is; else it is seeded from the shared one, if that is, or, for a
// dump from event 1, with the empty tree before it, where its target
// starts. Without one, it returns nil and an error wrapping
// errCatalogPast that says why.
func filterCatalog(ctx context.Context, opts DumpOptions, next uint64) (*Catalog, error) {
	usable := func(c *Catalog) (bool, string, error) {
		at, built, err := c.At()
		return err == nil && built && at < next, fmt.Sprintf("%s at event %d (built: %v)", filepath.Base(c.db.Path()), at, built), err
	}
	fc := opts.FilterCatalog
	if fc == nil {
		// Only the shared catalog: it is advanced itself.
		if opts.Catalog == nil {
			return nil, fmt.Errorf("no catalog: %w", errCatalogPast)
		}
		ok, why, err := usable(opts.Catalog)
		if err != nil || ok {
			return opts.Catalog, err
		}
		return nil, fmt.Errorf("%s: %w", why, errCatalogPast)
	}
	ok, why, err := usable(fc)
	if err != nil || ok {
		return fc, err
	}
	if opts.Catalog != nil {
		ok, whyShared, err := usable(opts.Catalog)
		if err != nil {
			return nil, err
		}
		if ok {
			return fc, fc.seedFrom(ctx, opts.Catalog)
		}
		why += ", " + whyShared
	}
	if next == 1 {
		return fc, fc.seedEmpty()
	}
	return nil, fmt.Errorf("%s, dump from %d: %w", why, next, errCatalogPast)
}

// writeEvent writes one event directory: built under a temp name and
// renamed, so that a directory with an event's name is always whole
// (durability comes from the checkpoints' syncfs). An arrival (dirs not
// nil) lists its directories in _dirs and its symlinks, if any, in
// _symlinks.
func writeEvent(out string, e *journal.Event, dirs []string, links []Entry) error {
	meta, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("event %d: %w", e.ID, err)
	}
	var files []byte
	for _, f := range e.Files {
		if f.CM == "" {
			files = AppendFile(files, f)
		}
	}
	name := EventDirName(e.ID)
	tmp := filepath.Join(out, tmpPrefix+name)
	if err := os.Mkdir(tmp, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	if err := os.WriteFile(filepath.Join(tmp, eventMeta), append(meta, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tmp, filesFile), files, 0o644); err != nil {
		return err
	}
	if dirs != nil {
		var b []byte
		for _, d := range dirs {
			b = append(append(b, Escape(d)...), '\n')
		}
		if err := os.WriteFile(filepath.Join(tmp, dirsFile), b, 0o644); err != nil {
			return err
		}
	}
	if len(links) > 0 {
		var b []byte
		for _, l := range links {
			b = AppendSymlink(b, l.Path, l.Target)
		}
		if err := os.WriteFile(filepath.Join(tmp, symlinksFile), b, 0o644); err != nil {
			return err
		}
	}
	return os.Rename(tmp, filepath.Join(out, name))
}

// checkpoint makes everything written so far durable and records id as
// the last event a resume may trust.
func checkpoint(out string, id uint64) error {
	if err := durable.SyncFS(out); err != nil {
		return err
	}
	return durable.WriteFile(filepath.Join(out, progressFile), []byte(strconv.FormatUint(id, 10)+"\n"), 0o644)
}

// resumePoint returns the first event an interrupted incremental dump
// must (re)write, and removes every event directory from it on. Event
// directories up to the last checkpoint are durable. Above it, after a
// syncfs that makes a killed process's writes durable, an unfiltered dump
// keeps the run of whole directories that follows the checkpoint without a
// hole; a filtered dump, whose holes are expected, cannot tell a hole left
// by a power loss from a skipped event, and rewrites everything above the
// checkpoint.
func resumePoint(out string, md Metadata) (uint64, error) {
	if err := durable.SyncFS(out); err != nil {
		return 0, err
	}
	next := md.From
	if b, err := os.ReadFile(filepath.Join(out, progressFile)); err == nil {
		id, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		if err != nil || id < md.From || id > md.To {
			return 0, fmt.Errorf("%s: bad checkpoint %q: %w", filepath.Join(out, progressFile), b, ErrFormat)
		}
		next = id + 1
	} else if !errors.Is(err, os.ErrNotExist) {
		return 0, err
	}
	ents, err := os.ReadDir(out)
	if err != nil {
		return 0, err
	}
	var ids []uint64
	for _, ent := range ents {
		if strings.HasPrefix(ent.Name(), tmpPrefix) {
			if err := os.RemoveAll(filepath.Join(out, ent.Name())); err != nil {
				return 0, err
			}
			continue
		}
		if id, ok := parseEventDir(ent.Name()); ok && id >= next {
			ids = append(ids, id)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	if md.DB == "" && md.Table == "" {
		for _, id := range ids {
			if id != next || validEventDir(filepath.Join(out, EventDirName(id)), id) != nil {
				break
			}
			next++
		}
	}
	for _, id := range ids {
		if id >= next {
			if err := os.RemoveAll(filepath.Join(out, EventDirName(id))); err != nil {
				return 0, err
			}
		}
	}
	return next, nil
}

// validEventDir checks that an event directory is whole.
func validEventDir(dir string, id uint64) error {
	e, err := readEvent(dir)
	if err != nil {
		return err
	}
	if e.ID != id {
		return fmt.Errorf("%s holds event %d: %w", dir, e.ID, ErrFormat)
	}
	_, err = ReadFiles(filepath.Join(dir, filesFile))
	return err
}

// readEvent reads an event directory's _metadata.
func readEvent(dir string) (*journal.Event, error) {
	b, err := os.ReadFile(filepath.Join(dir, eventMeta))
	if err != nil {
		return nil, err
	}
	e := new(journal.Event)
	if err := json.Unmarshal(b, e); err != nil {
		return nil, fmt.Errorf("%s: %v: %w", filepath.Join(dir, eventMeta), err, ErrFormat)
	}
	return e, nil
}
