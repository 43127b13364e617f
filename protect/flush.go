package protect

import (
	"errors"
	"os"
	"path"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/cmfs-project/cmfs/internal/at"
	"github.com/cmfs-project/cmfs/journal"
	"golang.org/x/sys/unix"
)

// Everything an event names is durable before the event commits: the
// content it gives a path (I3), every original it keeps in cmroot and that
// entry's directory (I2), and the directories whose names it changes. A
// file written without fsync would otherwise be journaled with content a
// power loss takes back, and an original moved into cmroot would come back
// empty. Flushing a file or directory that is already clean costs no
// device flush, so an original preserved long after it was written costs
// a look, not a write.

// flushWorkers bounds how many flushes of one commit run at once.
const flushWorkers = 16

// durableSet is what one commit must flush.
type durableSet struct {
	fs    *at.Tree       // the backing tree, where places with tree live
	files map[place]bool // data: fdatasync
	dirs  map[place]bool // names: fsync of the directory
}

// place is a file or directory to flush: a path relative to the backing
// tree (tree), or an absolute one (cmroot's).
type place struct {
	p    string
	tree bool
}

func (d *durableSet) file(p place) {
	if d.files == nil {
		d.files = map[place]bool{}
	}
	d.files[p] = true
}

func (d *durableSet) dir(p place) {
	if d.dirs == nil {
		d.dirs = map[place]bool{}
	}
	d.dirs[p] = true
}

// named returns what the events name: for each file the content at its path
// or its cmroot entry, and the directories of every path they change.
func (c *Core) named(events []*journal.Event) durableSet {
	d := durableSet{fs: c.fs}
	for _, e := range events {
		for _, p := range []string{e.Path, e.NewPath} {
			if p != "" {
				d.dir(place{treeDir(p), true})
			}
		}
		for _, f := range e.Files {
			if f.CM != "" {
				entry := c.cm.Path(f.CM)
				d.file(place{entry, false})
				d.dir(place{filepath.Dir(entry), false})
				continue
			}
			d.file(place{f.Path, true})
		}
	}
	return d
}

// treeDir is the directory of the tree's path p ("" for the root).
func treeDir(p string) string {
	if d := path.Dir(p); d != "." {
		return d
	}
	return ""
}

// flush makes d durable. A file that is gone was replaced or removed by a
// later change, whose own event flushes what it names; a file cmfs cannot
// open for reading is flushed through a write-only open where it may.
func (c *Core) flush(d durableSet) error {
	var first, then []func() error
	d.each(func(p place, data bool) {
		task := func() error { return d.syncPlace(p, data) }
		if leads(p, data) {
			first = append(first, task)
		} else {
			then = append(then, task)
		}
	})
	return runPhases(first, then)
}

// leads says whether the flush of p comes first: the content of a file in
// the tree, which a journaling file system allocates at writeback, in a
// transaction. A directory's fsync (on ext4 a commit of all the journal
// holds) that runs beside the fdatasync of the new file in it commits the
// create before the file's blocks join it, and the file then waits for a
// second commit: a create, a write and the flushes of file and directory
// took 0.8–1.3 ms here with the flushes at the same time, 0.6–0.85 ms
// with the file's first
// (docs/bench.md, "Files before directories"). What cmroot holds was
// flushed when it was written or is the tree's older content, mostly
// clean: its fdatasync is a device flush alone, which would only add up
// if it ran before the directories' commit, so it runs beside them.
func leads(p place, data bool) bool { return data && p.tree }

// runPhases runs the flushes of first, then, once all of them succeeded,
// those of then.
func runPhases(first, then []func() error) error {
	if err := runFlushes(first); err != nil {
		return err
	}
	return runFlushes(then)
}

// each calls fn for every file (data true) and directory of d.
func (d durableSet) each(fn func(p place, data bool)) {
	for p := range d.files {
		fn(p, true)
	}
	for p := range d.dirs {
		fn(p, false)
	}
}

// name is p's path, for messages.
func (d durableSet) name(p place) string {
	if p.tree {
		return d.fs.Join(p.p)
	}
	return p.p
}

// runFlushes runs tasks, flushWorkers at a time, and joins their errors.
func runFlushes(tasks []func() error) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		work = make(chan func() error)
	)
	for range min(flushWorkers, len(tasks)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for fn := range work {
				if err := fn(); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		}()
	}
	for _, fn := range tasks {
		work <- fn
	}
	close(work)
	wg.Wait()
	return errors.Join(errs...)
}

// pinned is a durableSet held open. Under --sync=interval what an event
// names is flushed up to an interval after its operation returned
// (journal.FlushLater), and by then a later change may have renamed the
// file away or put another in its place, and its own event may not be in
// that flush: flushed by name, the data the event means would be missed
// while the event became durable. So each file and directory is opened
// when the event is appended, and the flush reaches that inode wherever
// it went. What is gone already was moved by a change whose own event
// names it, and is left out, as flush leaves it out; what cannot be
// opened now for another reason is flushed by name, and fails then.
type pinned struct {
	fds   []pinnedFD
	names durableSet
	once  sync.Once
}

type pinnedFD struct {
	fd   int
	data bool
	lead bool // flushed first (leads)
	name string
}

// pin opens what d names.
func (d durableSet) pin() *pinned {
	p := &pinned{names: durableSet{fs: d.fs}}
	d.each(func(pl place, data bool) {
		fd, err := d.open(pl, data)
		switch {
		case err == nil:
			p.fds = append(p.fds, pinnedFD{fd, data, leads(pl, data), d.name(pl)})
		case gone(err):
		case data:
			p.names.file(pl)
		default:
			p.names.dir(pl)
		}
	})
	return p
}

// flush makes what p holds durable, and closes it.
func (p *pinned) flush() error {
	defer p.close()
	var first, then []func() error
	add := func(lead bool, task func() error) {
		if lead {
			first = append(first, task)
		} else {
			then = append(then, task)
		}
	}
	for _, f := range p.fds {
		add(f.lead, func() error { return syncFD(f.fd, f.data, f.name) })
	}
	p.names.each(func(pl place, data bool) {
		add(leads(pl, data), func() error { return p.names.syncPlace(pl, data) })
	})
	return runPhases(first, then)
}

// close lets go of what p holds; a flush closes it too.
func (p *pinned) close() {
	p.once.Do(func() {
		for _, f := range p.fds {
			unix.Close(f.fd)
		}
	})
}

// syncs counts syncFD's flushes, for the mount's status.
var syncs atomic.Uint64

// Syncs returns how many files and directories the process's protection
// cores have flushed.
func Syncs() uint64 { return syncs.Load() }

// syncedHook, when set (by tests), is told the inode of every file
// flushed.
var syncedHook func(ino uint64)

// syncPlace fdatasyncs the file (data) or fsyncs the directory p.
func (d durableSet) syncPlace(p place, data bool) error {
	fd, err := d.open(p, data)
	if gone(err) {
		return nil
	}
	if err != nil {
		return &os.PathError{Op: "flush", Path: d.name(p), Err: err}
	}
	defer unix.Close(fd)
	return syncFD(fd, data, d.name(p))
}

// open opens the file or directory p to flush it.
func (d durableSet) open(p place, data bool) (int, error) {
	flags := unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	if !data {
		flags |= unix.O_DIRECTORY
	}
	open := unix.Open
	if p.tree {
		open = func(rel string, flags int, mode uint32) (int, error) { return d.fs.OpenFD(rel, flags, mode) }
	}
	fd, err := open(p.p, flags|unix.O_NOATIME, 0)
	if errors.Is(err, syscall.EPERM) {
		fd, err = open(p.p, flags, 0) // O_NOATIME needs ownership
	}
	return fd, err
}

// gone says whether opening a path to flush it failed because nothing
// (or a symlink, which an event naming a file does not mean) is there.
func gone(err error) bool {
	return errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ELOOP)
}

// syncFD fdatasyncs the file (data) or fsyncs the directory open as fd,
// named p in errors.
func syncFD(fd int, data bool, p string) error {
	syncs.Add(1)
	var err error
	if data {
		err = unix.Fdatasync(fd)
	} else {
		err = unix.Fsync(fd)
	}
	if err != nil {
		return &os.PathError{Op: "flush", Path: p, Err: err}
	}
	if hook := syncedHook; hook != nil && data {
		var st unix.Stat_t
		if unix.Fstat(fd, &st) == nil {
			hook(st.Ino)
		}
	}
	return nil
}

// fuseMagic is a FUSE file system's statfs type.
const fuseMagic = 0x65735546

// SyncFS returns a function that flushes the file systems dirs live on,
// each once (syncfs(2)): everything an event names, when dirs are the
// backing directory and cmroot. The journal's interval mode runs it once
// per interval instead of one fsync per file. It returns nil when one of
// them is a FUSE file system, which does not pass syncfs on to its server
// (the kernel sends FUSE_SYNCFS to virtiofs only): there each file must
// be flushed by name.
func SyncFS(dirs ...string) func() error {
	for _, d := range dirs {
		var st unix.Statfs_t
		if unix.Statfs(d, &st) == nil && st.Type == fuseMagic {
			return nil
		}
	}
	return func() error {
		seen := map[uint64]bool{}
		var errs []error
		for _, d := range dirs {
			fd, err := unix.Open(d, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				errs = append(errs, &os.PathError{Op: "syncfs", Path: d, Err: err})
				continue
			}
			var st unix.Stat_t
			if unix.Fstat(fd, &st) == nil && seen[st.Dev] {
				unix.Close(fd)
				continue
			}
			seen[st.Dev] = true
			syncs.Add(1)
			if err := unix.Syncfs(fd); err != nil {
				errs = append(errs, &os.PathError{Op: "syncfs", Path: d, Err: err})
			}
			unix.Close(fd)
		}
		return errors.Join(errs...)
	}
}
