package repl

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/internal/statedir"
	"github.com/cmfs-project/cmfs/journal"
)

// sliceEvents is an Events over a slice; failAfter > 0 makes Range fail
// after that many events (a source that dies mid-dump).
type sliceEvents struct {
	events    []*journal.Event
	failAfter int
}

var errSourceDied = errors.New("source died")

func (s *sliceEvents) Last(ctx context.Context) (uint64, error) { return uint64(len(s.events)), nil }

func (s *sliceEvents) Range(ctx context.Context, from, to uint64, fn func(*journal.Event) error) error {
	n := 0
	for id := from; id <= to && id <= uint64(len(s.events)); id++ {
		if s.failAfter > 0 && n == s.failAfter {
			return errSourceDied
		}
		n++
		if err := fn(s.events[id-1]); err != nil {
			return err
		}
	}
	return nil
}

// source simulates a cmfs-protected warehouse: a live tree, a cmroot laid
// out as cmroot.Store lays it out, and the events cmfs would journal.
type source struct {
	t      testing.TB
	root   string
	cm     string
	ev     sliceEvents
	states []map[string]string // states[i] is the tree after event i (states[0]: empty)
}

func newSource(t testing.TB) *source {
	t.Helper()
	d := t.TempDir()
	s := &source{t: t, root: filepath.Join(d, "warehouse"), cm: filepath.Join(d, "warehouse", ".cmfs", "cmroot")}
	for _, p := range []string{s.root, s.cm} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	s.states = []map[string]string{{}}
	return s
}

func (s *source) fetcher() *LocalFetcher {
	return &LocalFetcher{Root: s.root, CMRoot: s.cm, Events: &s.ev}
}

func (s *source) abs(rel string) string { return filepath.Join(s.root, filepath.FromSlash(rel)) }

func (s *source) emit(e *journal.Event) *journal.Event {
	s.t.Helper()
	e.ID = uint64(len(s.ev.events) + 1)
	e.Time = time.Unix(1700000000, int64(e.ID)).UTC()
	if e.DB == "" && e.Table == "" {
		loc := journal.Locate(e.Path)
		e.DB, e.Table, e.Partition = loc.DB, loc.Table, loc.Partition
	}
	s.ev.events = append(s.ev.events, e)
	s.states = append(s.states, snapshot(s.t, s.root))
	return e
}

// preserve copies the file at rel into cmroot and returns its File.
func (s *source) preserve(rel string) journal.File {
	s.t.Helper()
	b, err := os.ReadFile(s.abs(rel))
	if err != nil {
		s.t.Fatal(err)
	}
	f := journal.File{Path: rel, Size: int64(len(b)), XXH64: journal.Sum(b)}
	f.CM = CMName(f)
	putCM(s.t, s.cm, b)
	return f
}

// putCM stores content in a cmroot directory under its entry name.
func putCM(t testing.TB, cm string, b []byte) {
	t.Helper()
	name := CMName(journal.File{Size: int64(len(b)), XXH64: journal.Sum(b)})
	dir := filepath.Join(cm, name[:2])
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func dirType(mk bool, rel string) journal.Type {
	t := map[journal.Level][2]journal.Type{
		journal.Database:  {journal.CreateDatabase, journal.DropDatabase},
		journal.Table:     {journal.CreateTable, journal.DropTable},
		journal.Partition: {journal.AddPartition, journal.DropPartition},
	}[journal.Locate(rel).Level]
	if t[0] == "" {
		t = [2]journal.Type{journal.Mkdir, journal.Rmdir}
	}
	if mk {
		return t[0]
	}
	return t[1]
}

func fileType(t journal.Type, rel string) journal.Type {
	if t == journal.Write && journal.Locate(path.Dir(rel)).Table != "" {
		return journal.Insert
	}
	return t
}

func (s *source) mkdir(rel string) *journal.Event {
	s.t.Helper()
	if err := os.Mkdir(s.abs(rel), 0o755); err != nil {
		s.t.Fatal(err)
	}
	return s.emit(&journal.Event{Type: dirType(true, rel), Path: rel})
}

// write replaces the content of rel, preserving a non-empty original.
func (s *source) write(rel, content string) *journal.Event {
	s.t.Helper()
	var files []journal.File
	b := []byte(content)
	files = append(files, journal.File{Path: rel, Size: int64(len(b)), XXH64: journal.Sum(b)})
	if fi, err := os.Stat(s.abs(rel)); err == nil && fi.Size() > 0 {
		files = append(files, s.preserve(rel))
	}
	if err := os.WriteFile(s.abs(rel), b, 0o644); err != nil {
		s.t.Fatal(err)
	}
	return s.emit(&journal.Event{Type: fileType(journal.Write, rel), Path: rel, Files: files})
}

func (s *source) truncate(rel string) *journal.Event {
	s.t.Helper()
	orig := s.preserve(rel)
	if err := os.Truncate(s.abs(rel), 0); err != nil {
		s.t.Fatal(err)
	}
	return s.emit(&journal.Event{Type: journal.Truncate, Path: rel, Files: []journal.File{{Path: rel, Size: 0, XXH64: journal.Sum(nil)}, orig}})
}

func (s *source) del(rel string) *journal.Event {
	s.t.Helper()
	orig := s.preserve(rel)
	if err := os.Remove(s.abs(rel)); err != nil {
		s.t.Fatal(err)
	}
	return s.emit(&journal.Event{Type: journal.Delete, Path: rel, Files: []journal.File{orig}})
}

// rename moves a file, preserving a replaced target.
func (s *source) rename(from, to string) *journal.Event {
	s.t.Helper()
	var files []journal.File
	b, err := os.ReadFile(s.abs(from))
	if err != nil {
		s.t.Fatal(err)
	}
	files = append(files, journal.File{Path: to, Size: int64(len(b)), XXH64: journal.Sum(b)})
	if _, err := os.Stat(s.abs(to)); err == nil {
		files = append(files, s.preserve(to))
	}
	if err := os.Rename(s.abs(from), s.abs(to)); err != nil {
		s.t.Fatal(err)
	}
	loc := journal.Locate(path.Dir(from))
	return s.emit(&journal.Event{Type: journal.Rename, Path: from, NewPath: to, DB: loc.DB, Table: loc.Table, Partition: loc.Partition, Files: files})
}

// symlink makes rel a symlink to target.
func (s *source) symlink(rel, target string) *journal.Event {
	s.t.Helper()
	if err := os.Symlink(target, s.abs(rel)); err != nil {
		s.t.Fatal(err)
	}
	return s.emit(&journal.Event{Type: journal.Symlink, Path: rel, Target: target})
}

// renameOver renames what is not a regular file (a symlink) over to,
// preserving to if it is one.
func (s *source) renameOver(from, to string) *journal.Event {
	s.t.Helper()
	var files []journal.File
	if fi, err := os.Lstat(s.abs(to)); err == nil && fi.Mode().IsRegular() {
		files = append(files, s.preserve(to))
	}
	if err := os.Rename(s.abs(from), s.abs(to)); err != nil {
		s.t.Fatal(err)
	}
	return s.emit(&journal.Event{Type: journal.Rename, Path: from, NewPath: to, Files: files})
}

// renameDir renames a directory (a table or partition rename).
func (s *source) renameDir(from, to string, t journal.Type) *journal.Event {
	s.t.Helper()
	if err := os.Rename(s.abs(from), s.abs(to)); err != nil {
		s.t.Fatal(err)
	}
	return s.emit(&journal.Event{Type: t, Path: from, NewPath: to})
}

// rmrf removes a directory tree as rm -r through cmfs does: a DELETE per
// file, then one event per directory, deepest first.
func (s *source) rmrf(rel string) {
	s.t.Helper()
	var files, dirs []string
	filepath.WalkDir(s.abs(rel), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			s.t.Fatal(err)
		}
		r, _ := filepath.Rel(s.root, p)
		if d.IsDir() {
			dirs = append(dirs, filepath.ToSlash(r))
		} else {
			files = append(files, filepath.ToSlash(r))
		}
		return nil
	})
	for _, f := range files {
		s.del(f)
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := os.Remove(s.abs(dirs[i])); err != nil {
			s.t.Fatal(err)
		}
		s.emit(&journal.Event{Type: dirType(false, dirs[i]), Path: dirs[i]})
	}
}

// snapshot maps every path below root to "dir", "file:<content>" or
// "link:<target>", leaving out the state cmfs and repl keep at the root.
func snapshot(t testing.TB, root string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == root {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if rel == statedir.Name || rel == stateFile || rel == stagingDir || rel == lockFile {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		switch {
		case d.IsDir():
			m[rel] = "dir"
		case d.Type()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			m[rel] = "link:" + target
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			m[rel] = "file:" + string(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func diffTrees(got, want map[string]string) string {
	if maps.Equal(got, want) {
		return ""
	}
	keys := map[string]bool{}
	for k := range got {
		keys[k] = true
	}
	for k := range want {
		keys[k] = true
	}
	var sorted []string
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	var b strings.Builder
	for _, k := range sorted {
		g, gok := got[k]
		w, wok := want[k]
		if g != w || gok != wok {
			fmt.Fprintf(&b, "  %s: got %q (%v), want %q (%v)\n", k, g, gok, w, wok)
		}
	}
	return b.String()
}

// mustDump dumps [from, to] of s into a new directory.
func mustDump(t testing.TB, s *source, from, to uint64) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), fmt.Sprintf("dump-%d-%d", from, to))
	res, err := Dump(context.Background(), &s.ev, out, DumpOptions{From: from, To: to, Source: "src", Tree: LocalTree{Root: s.root}})
	if err != nil {
		t.Fatal(err)
	}
	if from > 0 && (res.From != from || res.To != to) {
		t.Fatalf("dump range: got %d..%d, want %d..%d", res.From, res.To, from, to)
	}
	return out
}

func mustLoad(t testing.TB, dump, target string, f Fetcher) LoadResult {
	t.Helper()
	res, err := Load(context.Background(), dump, target, f, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func lastID(t testing.TB, target string) uint64 {
	t.Helper()
	st, _, err := ReadState(target)
	if err != nil {
		t.Fatal(err)
	}
	return st.LastReplID
}

// checkTarget compares a target with the source's state after event id.
func checkTarget(t testing.TB, s *source, target string, id uint64) {
	t.Helper()
	if d := diffTrees(snapshot(t, target), s.states[id]); d != "" {
		t.Fatalf("target after event %d differs from the source:\n%s", id, d)
	}
	if got := lastID(t, target); got != id {
		t.Fatalf("last_repl_id: got %d, want %d", got, id)
	}
	if _, err := os.Stat(filepath.Join(target, stagingDir)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("staging directory left behind: %v", err)
	}
}
