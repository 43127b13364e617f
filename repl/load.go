package repl

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/cmfs-project/cmfs/journal"
)

// Progress receives a load's progress; the core never imports a UI.
type Progress interface {
	// Event is called after event id is fully applied.
	Event(id uint64)
	// Bytes is called as n more bytes of content are staged, from the
	// goroutines that fetch: concurrently.
	Bytes(n int64)
}

// LoadOptions tune Load. The zero value is the default.
type LoadOptions struct {
	// Progress, if not nil, is told about every event and every chunk of
	// content.
	Progress Progress
	// Fetchers is how many files are fetched at once, ahead of the event
	// being applied; 0 means DefaultFetchers. The fetcher must be safe for
	// concurrent use.
	Fetchers int
	// Lock, if not nil, is the caller's hold on the target (a follow
	// holds it for all its rounds); else Load takes the target for
	// itself and refuses it if another loader holds it.
	Lock *Lock
}

// LoadResult says what Load did.
type LoadResult struct {
	From, To uint64 // the dump's range
	Applied  int    // events applied by this call (not skipped as already loaded)
	Files    int    // files fetched and placed
	Bytes    int64  // bytes of content placed
	// Missing counts files that could not be fetched inside the window of
	// events that raced with a BOOTSTRAP, where a later event is expected
	// to put the right content in place.
	Missing int
}

// Load applies the dump in dumpDir to the warehouse directory target,
// fetching content through fetch.
//
// An INCREMENTAL dump is applied event by event in id order. Events the
// target already holds are skipped, so loading a dump twice is a no-op.
// Every file is staged in <target>/.repl-staging, verified against its size
// and xxh64 while it streams, and renamed into place only then; after each
// event, <target>/.replstate records it durably, so that a failure leaves
// the target at the last fully applied event and a rerun continues.
// Every step is idempotent: a directory that exists, a file already gone,
// content already in place (which is then not fetched) are fine.
//
// A BOOTSTRAP dump loads only into an empty target (or continues its own
// interrupted load); the target is then at the dump's "to".
//
// Errors: ErrIncomplete (no _finished_dump), ErrGap (the dump starts after
// the event following the target's last one), ErrMismatch (another
// source, a BOOTSTRAP into a non-empty target), ErrFormat (a mangled dump),
// ErrNoCopy and ErrChecksum wrapped with the event id, path and checksum,
// ErrUnsafePath (a path leading out of the target), *BusyError
// (ErrTargetBusy: another loader holds the target), the fetcher's and I/O
// errors.
func Load(ctx context.Context, dumpDir, target string, fetch Fetcher, opts LoadOptions) (LoadResult, error) {
	switch {
	case opts.Lock == nil:
		// Before anything in the target is touched: two loaders would
		// empty each other's staging and interleave their events.
		lk, err := LockTarget(ctx, target, LockOptions{})
		if err != nil {
			return LoadResult{}, err
		}
		defer lk.Unlock()
	case !opts.Lock.holds(target):
		return LoadResult{}, fmt.Errorf("load %s into %s: the lock given holds %s", dumpDir, target, opts.Lock.Target())
	}
	res, err := load(ctx, dumpDir, target, fetch, opts)
	if err != nil {
		return res, fmt.Errorf("load %s into %s: %w", dumpDir, target, err)
	}
	return res, nil
}

func load(ctx context.Context, dumpDir, target string, fetch Fetcher, opts LoadOptions) (LoadResult, error) {
	var res LoadResult
	md, err := ReadMetadata(dumpDir)
	if errors.Is(err, os.ErrNotExist) {
		return res, fmt.Errorf("%s has no %s: not a dump: %w", dumpDir, metadataFile, ErrFormat)
	}
	if err != nil {
		return res, err
	}
	res.From, res.To = md.From, md.To
	fin, err := ReadFinished(dumpDir)
	if err != nil {
		return res, err
	}
	if fin.To != md.To {
		return res, fmt.Errorf("%s says %d, %s says %d: %w", finishedFile, fin.To, metadataFile, md.To, ErrFormat)
	}
	if err := os.MkdirAll(target, 0o755); err != nil {
		return res, err
	}
	st, found, err := ReadState(target)
	if err != nil {
		return res, err
	}
	if st.Source != "" && md.Source != "" && st.Source != md.Source {
		return res, fmt.Errorf("target holds source %q, dump is of source %q: %w", st.Source, md.Source, ErrMismatch)
	}
	if md.Source != "" {
		st.Source = md.Source
	}
	l := &loader{ctx: ctx, target: target, fetch: fetch, prog: opts.Progress, res: &res, staging: filepath.Join(target, stagingDir)}
	if md.Kind == Bootstrap {
		return res, l.bootstrap(dumpDir, md, fin, st, found, opts.Fetchers)
	}
	if st.Bootstrapping != "" {
		return res, fmt.Errorf("target is in the middle of loading the BOOTSTRAP %s; rerun that load first: %w", st.Dump, ErrMismatch)
	}
	if md.From > st.LastReplID+1 {
		missing := fmt.Sprintf("event %d is missing", st.LastReplID+1)
		if md.From-1 > st.LastReplID+1 {
			missing = fmt.Sprintf("events %d–%d are missing", st.LastReplID+1, md.From-1)
		}
		return res, fmt.Errorf("target is at event %d; dump starts at %d: %s: %w", st.LastReplID, md.From, missing, ErrGap)
	}
	if md.To <= st.LastReplID {
		return res, nil
	}
	if err := l.resetStaging(); err != nil {
		return res, err
	}
	defer os.RemoveAll(l.staging)
	ids, err := eventDirs(dumpDir, md)
	if err != nil {
		return res, err
	}
	// The state advances durably once per stretch of events (syncBytes,
	// syncEvery), and always before returning: a failure leaves it at the
	// last event applied in full, and a rerun re-applies what came after,
	// idempotently.
	applied, since, lastSync := st.LastReplID, res.Bytes, time.Now()
	record := func() error {
		if applied == st.LastReplID {
			return nil
		}
		st.LastReplID, st.Dump = applied, dumpDir
		since, lastSync = res.Bytes, time.Now()
		return writeState(target, st)
	}
	steps := func(yield func(step) bool) {
		for _, id := range ids {
			if id <= st.LastReplID {
				continue
			}
			e, adds, ar, err := readEventDir(filepath.Join(dumpDir, EventDirName(id)), id)
			if !yield(step{id: id, e: e, adds: adds, dirs: ar.dirs, links: ar.links, err: err}) || err != nil {
				return
			}
		}
	}
	l.ahead = l.startAhead(steps, opts.Fetchers)
	defer l.ahead.stop()
	for s := range l.ahead.out {
		err := s.err
		if err == nil {
			err = ctx.Err()
		}
		if err == nil {
			l.fuzzy, l.event = s.id <= st.FuzzyUntil, s.id
			if s.dirs != nil {
				err = l.arrive(s.e.Path, s.dirs)
			}
			if err == nil {
				err = l.apply(s.e, s.adds, s.jobs)
			}
			for _, ln := range s.links {
				if err == nil {
					err = l.symlink(ln.Path, ln.Target)
				}
			}
			if err != nil {
				err = fmt.Errorf("event %d (%s %s): %w", s.id, s.e.Type, s.e.Path, err)
			}
		}
		if err != nil {
			return res, errors.Join(err, record())
		}
		applied = s.id
		res.Applied++
		if l.prog != nil {
			l.prog.Event(s.id)
		}
		if res.Bytes-since >= syncBytes || time.Since(lastSync) >= syncEvery {
			if err := record(); err != nil {
				return res, err
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return res, errors.Join(err, record())
	}
	if err := record(); err != nil {
		return res, err
	}
	if st.LastReplID < md.To {
		// Filtered events, or none at the end of the range: the target
		// holds everything the dump covers.
		st.LastReplID, st.Dump = md.To, dumpDir
		if err := writeState(target, st); err != nil {
			return res, err
		}
	}
	return res, nil
}

// A load makes what it applied durable, and advances the target's state,
// at least every syncBytes of content and every syncEvery.
const (
	syncBytes = 256 << 20
	syncEvery = time.Second
)

// eventDirs lists the event directories of an INCREMENTAL dump in id
// order, refusing anything else.
func eventDirs(dumpDir string, md Metadata) ([]uint64, error) {
	ents, err := os.ReadDir(dumpDir)
	if err != nil {
		return nil, err
	}
	var ids []uint64
	for _, ent := range ents {
		switch name := ent.Name(); {
		case name == metadataFile || name == finishedFile || name == progressFile:
		case strings.HasPrefix(name, "."):
			// temp files of durable writes, temp event dirs of an
			// interrupted run: never part of a finished dump's content.
		default:
			id, ok := parseEventDir(name)
			if !ok || !ent.IsDir() {
				return nil, fmt.Errorf("%s: unexpected entry %q: %w", dumpDir, name, ErrFormat)
			}
			if id < md.From || id > md.To {
				return nil, fmt.Errorf("%s: event %d outside the dump's range %d..%d: %w", dumpDir, id, md.From, md.To, ErrFormat)
			}
			ids = append(ids, id)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids, nil
}

// arrival is what an arrival in a filtered dump makes besides its
// event's files: its directories (nil if it is no arrival) and symlinks.
type arrival struct {
	dirs  []string
	links []Entry
}

// readEventDir reads the event, the new content it lists and, for an
// arrival in a filtered dump, the directories and symlinks it makes from
// one event directory of an INCREMENTAL dump.
func readEventDir(dir string, id uint64) (*journal.Event, []journal.File, arrival, error) {
	var none arrival
	e, err := readEvent(dir)
	if err != nil {
		return nil, nil, none, fmt.Errorf("event %d: %w", id, err)
	}
	if e.ID != id {
		return nil, nil, none, fmt.Errorf("%s holds event %d: %w", dir, e.ID, ErrFormat)
	}
	adds, err := ReadFiles(filepath.Join(dir, filesFile))
	if err != nil {
		return nil, nil, none, fmt.Errorf("event %d: %w", id, err)
	}
	var want []journal.File
	for _, f := range e.Files {
		if f.CM == "" {
			want = append(want, f)
		}
	}
	if !sameFiles(adds, want) {
		return nil, nil, none, fmt.Errorf("event %d: %s does not list the new content %s names: %w", id, filesFile, eventMeta, ErrFormat)
	}
	dirs, err := readDirs(filepath.Join(dir, dirsFile))
	switch {
	case errors.Is(err, os.ErrNotExist):
		if _, err := os.Lstat(filepath.Join(dir, symlinksFile)); err == nil {
			return nil, nil, none, fmt.Errorf("event %d: %s without %s: %w", id, symlinksFile, dirsFile, ErrFormat)
		}
		return e, adds, none, nil
	case err != nil:
		return nil, nil, none, fmt.Errorf("event %d: %w", id, err)
	}
	links, err := readSymlinks(filepath.Join(dir, symlinksFile))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, nil, none, fmt.Errorf("event %d: %w", id, err)
	}
	below := func(p string) bool { return p == e.Path || strings.HasPrefix(p, e.Path+"/") }
	for _, d := range dirs {
		if !below(d) {
			return nil, nil, none, fmt.Errorf("event %d: %s lists %s, not below %s: %w", id, dirsFile, d, e.Path, ErrFormat)
		}
	}
	for _, f := range adds {
		if !below(f.Path) {
			return nil, nil, none, fmt.Errorf("event %d: %s lists %s, not below %s: %w", id, filesFile, f.Path, e.Path, ErrFormat)
		}
	}
	for _, ln := range links {
		if !below(ln.Path) || ln.Path == e.Path {
			return nil, nil, none, fmt.Errorf("event %d: %s lists %s, not below %s: %w", id, symlinksFile, ln.Path, e.Path, ErrFormat)
		}
	}
	if dirs == nil {
		dirs = []string{}
	}
	return e, adds, arrival{dirs: dirs, links: links}, nil
}

func sameFiles(a, b []journal.File) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// bootstrap loads a BOOTSTRAP dump: every directory, file and symlink it
// lists.
func (l *loader) bootstrap(dumpDir string, md Metadata, fin Finished, st State, found bool, fetchers int) error {
	ident := md.Created.Format(time.RFC3339Nano) + "/" + md.Source + "/" + fmt.Sprint(md.To)
	switch {
	case found && st.Bootstrapping == "" && st.LastReplID >= md.To:
		return nil // loaded already
	case found && st.Bootstrapping == "":
		return fmt.Errorf("target already holds events up to %d; a BOOTSTRAP loads only into an empty target: %w", st.LastReplID, ErrMismatch)
	case found && st.Bootstrapping != ident:
		return fmt.Errorf("target is in the middle of loading another BOOTSTRAP (%s): %w", st.Dump, ErrMismatch)
	case !found:
		ents, err := os.ReadDir(l.target)
		if err != nil {
			return err
		}
		for _, ent := range ents {
			if ent.Name() != stagingDir && ent.Name() != lockFile && !strings.HasPrefix(ent.Name(), "."+stateFile) {
				return fmt.Errorf("target is not empty (it holds %s) and has no %s: %w", ent.Name(), stateFile, ErrMismatch)
			}
		}
		st = State{Dump: dumpDir, Source: md.Source, Bootstrapping: ident}
		if err := writeState(l.target, st); err != nil {
			return err
		}
	}
	if err := l.resetStaging(); err != nil {
		return err
	}
	defer os.RemoveAll(l.staging)
	var dirs []string
	var files []journal.File
	var links []Entry
	err := filepath.WalkDir(dumpDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch d.Name() {
		case dirsFile:
			ds, err := readDirs(p)
			dirs = append(dirs, ds...)
			return err
		case filesFile:
			fs, err := ReadFiles(p)
			files = append(files, fs...)
			return err
		case symlinksFile:
			ls, err := readSymlinks(p)
			links = append(links, ls...)
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	// Every file listed was seen during the walk; one that has moved since
	// (renamed, so not preserved) comes back with the events that follow.
	l.fuzzy, l.event = true, md.To
	sort.Strings(dirs)
	for _, d := range dirs {
		if err := l.ctx.Err(); err != nil {
			return err
		}
		if err := l.mkdirs(d); err != nil {
			return err
		}
	}
	steps := func(yield func(step) bool) {
		for _, f := range files {
			if !yield(step{adds: []journal.File{f}}) {
				return
			}
		}
	}
	l.ahead = l.startAhead(steps, fetchers)
	defer l.ahead.stop()
	for s := range l.ahead.out {
		if err := l.ctx.Err(); err != nil {
			return err
		}
		if err := l.put(s.adds[0], s.jobs[0]); err != nil {
			return err
		}
	}
	for _, e := range links {
		if err := l.symlink(e.Path, e.Target); err != nil {
			return err
		}
	}
	if err := l.ctx.Err(); err != nil {
		return err
	}
	st.LastReplID, st.Dump, st.Bootstrapping = md.To, dumpDir, ""
	st.FuzzyUntil = max(fin.WalkEnd, md.To)
	return writeState(l.target, st)
}

func (l *loader) resetStaging() error {
	if err := os.RemoveAll(l.staging); err != nil {
		return err
	}
	return os.Mkdir(l.staging, 0o700)
}
