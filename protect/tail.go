package protect

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/cmfs-project/cmfs/cmroot"
	"github.com/cmfs-project/cmfs/internal/at"
	"github.com/cmfs-project/cmfs/journal"
)

// The journal's unverified tail. A group commit writes its events to the
// journal's write-ahead file and flushes that file at the same time as
// what the events name (flush.go), and an interval mode flushes only
// every so often: after a power loss the journal may hold events of
// groups whose flush never finished, and the content those events name
// may not have reached the disk. A writable journal.Open hands such a
// tail to TailCheck's function, which keeps the longest prefix of whole
// groups whose every claim the disk bears out, and drops the rest as if
// never written. Those events were never acknowledged as durable (in
// --sync=always the operation had not returned; in interval mode they are
// within the last interval, which a power loss may take back), so no
// guarantee is lost by dropping them; keeping one whose content is gone
// would name what nobody can fetch (I2, I3).
//
// A prefix of the tail is consistent when
//
//   - every cmroot entry its events name is in the store directory, with
//     the size and xxh64 the event gives (hashed: an entry made by linking
//     a file whose data never reached the disk has its name but not its
//     bytes);
//   - every file its events leave behind (the last word, as
//     journal.Replay folds them) holds that content in the tree — or, where
//     the tree has moved on, in cmroot under its content's name: a later
//     change whose event was lost (an operation in flight, the rest of an
//     interval) preserved or replaced it, the content the event names is
//     durable and can be fetched, and the reconciliation that follows a
//     power loss journals what the tree holds now (reconcile.go). Empty
//     content is always at hand;
//   - every symlink it leaves behind is in the tree with its target;
//   - every path it removes or renames away (DELETE, RMDIR, DROP_*, the
//     old name of a RENAME, and what was below them) has nothing at it in
//     the tree, unless a later event of the prefix made it again; a
//     directory it makes (MKDIR, CREATE_*, ADD_PARTITION) is a directory;
//     the new name of a rename has something at it.
//
// Only the paths the prefix names are looked at, never a walk of the
// tree: the state directory, cmroot and scratch space are never named by
// an event. The prefixes are judged in one pass from the front, each
// file hashed at most once, and the longest consistent one wins: a group
// that fails may be followed by one that makes the prefix consistent
// again (it rewrote what the failing group named). A missing or damaged
// cmroot entry ends the pass, since every longer prefix names it too.
// When no non-empty prefix is consistent, none of the tail is kept.
//
// Judge a tail only when the disk may have lost writes: the writer did
// not stop cleanly and the machine has booted since
// (statedir.Record.LostWrites). After a kill -9 alone the page cache kept
// all the tail names, while the tree may have moved on by changes whose
// intents the in-flight table still holds (a file renamed away, a path
// made again): judging then could drop events that were acknowledged
// (--sync=interval acknowledges before the flush) and that nothing
// took back.

// TailReport is what a tail check found, for the mount's log and for
// Open (Options.Tail), which reconciles the tree with the journal when
// the check dropped events or found the tree moved on.
type TailReport struct {
	// Events is how many events the unverified tail held; Kept how many
	// of them the check kept.
	Events, Kept int
	// Moved is how many paths of the kept prefix hold other content in the
	// tree than the prefix gives them, theirs being in cmroot: changes
	// whose events were lost.
	Moved int
	// Why says what the disk lacked for the first group dropped.
	Why string
}

// Dropped is how many events of the tail the check dropped.
func (r *TailReport) Dropped() int { return r.Events - r.Kept }

// TailCheck returns the function journal.Options.CheckTail takes for the
// journal of the protected tree opts describes, whose preserved originals
// are in the cmroot directory cmrootDir (read directly: the check runs
// while the journal opens, before the store is). It fills report, when
// not nil, with what it found.
func TailCheck(opts Options, cmrootDir string, report *TailReport) func(tail []*journal.Event, bounds []int) int {
	return func(tail []*journal.Event, bounds []int) int {
		backing, err := filepath.Abs(opts.Backing)
		if err != nil {
			backing = opts.Backing
		}
		fs, err := at.Open(backing)
		if err != nil {
			// No tree to look at: what the tail names cannot be borne
			// out, and the mount fails on the backing directory.
			fs = nil
		} else {
			defer fs.Close()
		}
		tc := &tailCheck{
			fs:      fs,
			cmroot:  cmrootDir,
			paths:   map[string]*onDisk{},
			entries: map[string]string{},
			exp:     map[string]expect{},
			below:   map[string]int{},
			bad:     map[string]string{},
			moved:   map[string]bool{},
		}
		r := tc.run(tail, bounds)
		r.Events = len(tail)
		if report != nil {
			*report = r
		}
		return r.Kept
	}
}

// expect is what a prefix says is at a path.
type expect struct {
	kind expectKind
	word journal.LastWord // of expFile, expSymlink
	by   uint64           // the event that said so
}

type expectKind int

const (
	expFile    expectKind = iota // word.Size bytes hashing to word.XXH64
	expSymlink                   // a symlink to word.Target
	expAbsent                    // nothing
	expDir                       // a directory
	expPresent                   // something (the new name of a rename)
)

// onDisk is what the tree holds at a path, looked at once.
type onDisk struct {
	st     syscall.Stat_t
	err    error  // of the lstat
	sum    string // of a regular file, once hashed
	sumErr error
	hashed bool
	target string // of a symlink
}

type tailCheck struct {
	fs      *at.Tree // the backing tree; nil when it cannot be opened
	cmroot  string
	paths   map[string]*onDisk
	entries map[string]string // cmroot entry → "" when sound, else why not

	// The fold of the prefix so far: what it says of every path it
	// names, how many named paths lie below each directory, and the
	// paths the tree (or cmroot) does not bear out, with why.
	exp   map[string]expect
	below map[string]int
	bad   map[string]string
	moved map[string]bool
}

// run judges every prefix that ends at a group boundary and returns what
// it kept.
func (tc *tailCheck) run(tail []*journal.Event, bounds []int) TailReport {
	var r TailReport
	why := ""
	i := 0
	for _, end := range bounds {
		if end > len(tail) || end < i {
			break // not a boundary of this tail: keep what was judged
		}
		for ; i < end; i++ {
			if w := tc.apply(tail[i]); w != "" {
				// A missing or damaged original: no longer prefix can
				// be consistent.
				if why == "" {
					why = w
				}
				return TailReport{Kept: r.Kept, Moved: r.Moved, Why: why}
			}
		}
		if len(tc.bad) == 0 {
			r.Kept, r.Moved, why = end, len(tc.moved), ""
			continue
		}
		if why == "" {
			why = tc.firstBad()
		}
	}
	r.Why = why
	return r
}

// firstBad is the reason of the first path (in byte order) not borne
// out.
func (tc *tailCheck) firstBad() string {
	first := ""
	for p := range tc.bad {
		if first == "" || p < first {
			first = p
		}
	}
	return tc.bad[first]
}

// apply folds e into the prefix; it returns why not when e names a cmroot
// entry the store lacks or holds with other bytes.
func (tc *tailCheck) apply(e *journal.Event) string {
	for _, f := range e.Files {
		if f.CM == "" {
			continue
		}
		if why := tc.entry(f); why != "" {
			return fmt.Sprintf("event %d %s %s: original %s: %s", e.ID, e.Type, e.Path, f.CM, why)
		}
	}
	gone := expect{kind: expAbsent, by: e.ID}
	switch e.Type {
	case journal.Delete, journal.Rmdir, journal.DropPartition, journal.DropTable, journal.DropDatabase:
		tc.take(e.Path, gone)
		return ""
	case journal.Rename, journal.RenameTable, journal.RenamePartition, journal.RenameDatabase:
		a, b := tc.take(e.Path, gone), tc.take(e.NewPath, gone)
		tc.set(e.NewPath, expect{kind: expPresent, by: e.ID})
		tc.put(e.NewPath, a)
		if e.Target == "exchange" {
			tc.set(e.Path, expect{kind: expPresent, by: e.ID})
			tc.put(e.Path, b)
		}
	case journal.Mkdir, journal.CreateDatabase, journal.CreateTable, journal.AddPartition:
		tc.set(e.Path, expect{kind: expDir, by: e.ID})
	case journal.Symlink:
		tc.set(e.Path, expect{kind: expSymlink, word: journal.LastWord{Symlink: true, Target: e.Target}, by: e.ID})
	}
	for _, f := range e.Files {
		if f.CM == "" {
			tc.set(f.Path, expect{kind: expFile, word: journal.LastWord{Size: f.Size, XXH64: f.XXH64}, by: e.ID})
		}
	}
	return ""
}

// take makes dir and every named path below it expected absent, and
// returns what was expected there before, by path relative to dir.
func (tc *tailCheck) take(dir string, gone expect) map[string]expect {
	moved := map[string]expect{}
	if x, ok := tc.exp[dir]; ok {
		moved[""] = x
	}
	if tc.below[dir] > 0 {
		for p, x := range tc.exp {
			if strings.HasPrefix(p, dir+"/") {
				moved[p[len(dir):]] = x
				tc.set(p, gone)
			}
		}
	}
	tc.set(dir, gone)
	return moved
}

func (tc *tailCheck) put(dir string, moved map[string]expect) {
	for suffix, x := range moved {
		tc.set(dir+suffix, x)
	}
}

// set records what the prefix now says of p and whether the disk bears
// it out.
func (tc *tailCheck) set(p string, x expect) {
	if _, ok := tc.exp[p]; !ok {
		for d := parentDir(p); d != ""; d = parentDir(d) {
			tc.below[d]++
		}
	}
	tc.exp[p] = x
	delete(tc.moved, p)
	why, moved := tc.holds(p, x)
	if why != "" {
		tc.bad[p] = why
		return
	}
	delete(tc.bad, p)
	if moved {
		tc.moved[p] = true
	}
}

// holds says why the disk does not bear x out at p ("" when it does),
// and whether it does so only through cmroot.
func (tc *tailCheck) holds(p string, x expect) (why string, moved bool) {
	d := tc.look(p)
	exists := d.err == nil
	kind := "nothing"
	if exists {
		kind = fileKind(&d.st)
	}
	switch x.kind {
	case expAbsent:
		if errors.Is(d.err, fs.ErrNotExist) || errors.Is(d.err, syscall.ENOTDIR) {
			return "", false
		}
		return fmt.Sprintf("%s: event %d removed it, the tree holds %s", p, x.by, kind), false
	case expDir:
		if exists && d.st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
			return "", false
		}
		return fmt.Sprintf("%s: event %d made a directory, the tree holds %s", p, x.by, kind), false
	case expPresent:
		if exists {
			return "", false
		}
		return fmt.Sprintf("%s: event %d renamed something here, the tree holds nothing", p, x.by), false
	case expSymlink:
		if exists && d.st.Mode&syscall.S_IFMT == syscall.S_IFLNK && d.target == x.word.Target {
			return "", false
		}
		return fmt.Sprintf("%s: event %d made a symlink to %q, the tree holds %s", p, x.by, x.word.Target, kind), false
	}
	w := x.word
	if exists && isReg(&d.st) && d.st.Size == w.Size {
		if tc.hash(p, d); d.sumErr == nil && d.sum == w.XXH64 {
			return "", false
		}
	}
	if w.Size == 0 {
		return "", true // empty content needs no bytes on disk
	}
	f := journal.File{Path: p, Size: w.Size, XXH64: w.XXH64, CM: cmroot.Name(w.XXH64, w.Size)}
	if tc.entry(f) == "" {
		return "", true
	}
	holds := kind
	if exists && isReg(&d.st) {
		holds = fmt.Sprintf("%d bytes", d.st.Size)
		if d.hashed && d.sumErr == nil {
			holds += " xxh64 " + d.sum
		}
	}
	return fmt.Sprintf("%s: event %d gave it %d bytes xxh64 %s, the tree holds %s and cmroot has no such entry", p, x.by, w.Size, w.XXH64, holds), false
}

// look lstats the backing path of p, once.
func (tc *tailCheck) look(p string) *onDisk {
	if d, ok := tc.paths[p]; ok {
		return d
	}
	d := &onDisk{err: syscall.ENOENT}
	if tc.fs != nil {
		d.err = tc.fs.Lstat(p, &d.st)
	}
	if d.err == nil && d.st.Mode&syscall.S_IFMT == syscall.S_IFLNK {
		d.target, _ = tc.fs.Readlink(p)
	}
	tc.paths[p] = d
	return d
}

// hash fills d's checksum, once.
func (tc *tailCheck) hash(p string, d *onDisk) {
	if d.hashed {
		return
	}
	d.hashed = true
	_, d.sum, d.sumErr = hashFile(openNoAtime(tc.fs, p))
}

// entry says why the cmroot entry f.CM does not hold f's content, ""
// when it does: the size first, then the bytes.
func (tc *tailCheck) entry(f journal.File) string {
	key := f.CM + "\x00" + f.XXH64 + "\x00" + fmt.Sprint(f.Size)
	if why, ok := tc.entries[key]; ok {
		return why
	}
	why := checkEntry(tc.cmroot, f)
	tc.entries[key] = why
	return why
}

// checkEntry says why the entry f.CM of the store directory dir does not
// hold f's size and xxh64, "" when it does.
func checkEntry(dir string, f journal.File) string {
	p, err := cmroot.EntryPath(dir, f.CM)
	if err != nil {
		return err.Error()
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		if errors.Is(err, syscall.ENOENT) {
			return "not in cmroot"
		}
		return err.Error()
	}
	if !isReg(&st) {
		return "not a regular file"
	}
	if st.Size != f.Size {
		return fmt.Sprintf("%d bytes, want %d", st.Size, f.Size)
	}
	_, sum, err := hashFile(openNoAtimeWith(func(flags int) (*os.File, error) { return os.OpenFile(p, flags, 0) }))
	if err != nil {
		return err.Error()
	}
	if sum != f.XXH64 {
		return fmt.Sprintf("hashes to %s, want %s", sum, f.XXH64)
	}
	return ""
}

// hashFile returns the size and xxh64 of the regular file f, opened with
// err, and closes it.
func hashFile(f *os.File, err error) (int64, string, error) {
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return 0, "", err
	}
	sum, _, _, err := hashReaderAt(f, st.Size, nil)
	return st.Size, sum, err
}

// fileKind names what st is, for a finding.
func fileKind(st *syscall.Stat_t) string {
	switch st.Mode & syscall.S_IFMT {
	case syscall.S_IFREG:
		return "a file"
	case syscall.S_IFDIR:
		return "a directory"
	case syscall.S_IFLNK:
		return "a symlink"
	}
	return "a special file"
}

// parentDir returns the directory of a slash-separated relative path, ""
// at the top.
func parentDir(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[:i]
	}
	return ""
}
