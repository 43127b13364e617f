package protect

import (
	"io/fs"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/cmfs-project/cmfs/internal/at"

	"github.com/cmfs-project/cmfs/journal"
	"golang.org/x/sys/unix"
)

// Hard links. A change to the content of a file with several links
// changes it under every name, so its event must name them all. go-fuse
// gives a node one path (the name last looked up or linked), and knows
// only the names looked up during this mount; links made before the
// mount, or behind its back, it has never seen. The names come from a
// linkIndex instead: every name in the protected tree of every file with
// more than one link, built by one walk of the backing tree the first
// time such a file's content changes, kept current by the mount's own
// link, unlink and rename, checked at every use (each name must still
// hold the inode, and there must be as many names as tree links), and
// walked again when found stale. A file with one link — nearly every file
// of a warehouse — never reaches the index: one comparison of st_nlink.

// linkIndex maps the inode of every multiply-linked regular file in the
// protected tree to its names there.
type linkIndex struct {
	fs *at.Tree // the backing tree
	// skip says a backing-relative path is not part of the protected
	// tree (the state directory, cmroot, scratch space).
	skip func(rel string) bool
	// links returns a file's link count in the tree (cmroot's links
	// left out).
	links func(st *syscall.Stat_t) uint64

	mu    sync.Mutex
	built bool
	dev   uint64
	names map[uint64][]string
	// short holds inodes the last walk found fewer tree names for than
	// they have tree links (links in scratch space, the state directory
	// or outside the backing directory), with that link count: while the
	// count and the names stay as they were, no walk can find more.
	short map[uint64]uint64
	walks int // walks done, for tests
	// size mirrors len(names), so a directory rename with nothing indexed
	// costs no lock.
	size atomic.Int64
}

func newLinkIndex(fs *at.Tree, skip func(string) bool, links func(*syscall.Stat_t) uint64) *linkIndex {
	return &linkIndex{fs: fs, skip: skip, links: links}
}

// lookup returns every tree name of the file st, which is known by rel
// (always among the names) and has want tree links: rel first, the others
// in byte order.
func (x *linkIndex) lookup(rel string, st *syscall.Stat_t) []string {
	want := x.links(st)
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.built && x.dev == st.Dev {
		if got, complete := x.check(rel, st.Ino, want); complete {
			return got
		}
	}
	x.walk()
	got, complete := x.check(rel, st.Ino, want)
	if !complete {
		x.short[st.Ino] = want
	}
	return got
}

// check verifies the names indexed for ino, drops those that no longer
// hold it, and says whether they are all of its want tree links.
func (x *linkIndex) check(rel string, ino, want uint64) ([]string, bool) {
	indexed := x.names[ino]
	got := []string{rel}
	for _, name := range indexed {
		if name != rel && x.holds(name, ino) {
			got = append(got, name)
		}
	}
	slices.Sort(got[1:])
	stale := len(got) != len(indexed) || !slices.Contains(indexed, rel)
	x.set(ino, got)
	switch {
	case uint64(len(got)) >= want:
		return got, true
	case !stale && x.short[ino] == want:
		return got, true // as short as the last walk found it
	}
	return got, false
}

// holds says whether the backing path of rel is the inode ino.
func (x *linkIndex) holds(rel string, ino uint64) bool {
	var st syscall.Stat_t
	return x.fs.Lstat(rel, &st) == nil && st.Ino == ino && st.Dev == x.dev
}

func (x *linkIndex) set(ino uint64, names []string) {
	if x.names == nil {
		x.names = map[uint64][]string{}
	}
	if len(names) == 0 {
		delete(x.names, ino)
	} else {
		x.names[ino] = names
	}
	x.size.Store(int64(len(x.names)))
}

// walk rebuilds the index from the backing tree.
func (x *linkIndex) walk() {
	var root syscall.Stat_t
	if err := x.fs.Lstat("", &root); err != nil {
		return
	}
	names := map[uint64][]string{}
	links := map[uint64]uint64{}
	x.fs.WalkDir("", func(rel string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // raced with a removal, or unreadable: skip it
		}
		if rel != "" && x.skip(rel) {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		var st syscall.Stat_t
		if x.fs.Lstat(rel, &st) != nil || st.Nlink < 2 || st.Dev != root.Dev {
			return nil
		}
		names[st.Ino] = append(names[st.Ino], rel)
		links[st.Ino] = x.links(&st)
		return nil
	})
	x.built, x.dev, x.names, x.short = true, root.Dev, names, map[uint64]uint64{}
	for ino, n := range links {
		if uint64(len(names[ino])) < n {
			x.short[ino] = n
		}
	}
	x.size.Store(int64(len(names)))
	x.walks++
}

// linked records that the file ino, known as old, got the name rel.
func (x *linkIndex) linked(ino uint64, old, rel string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if !x.built {
		return
	}
	names := x.names[ino]
	for _, n := range []string{old, rel} {
		if n != "" && !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	x.set(ino, names)
}

// unlinked records that the name rel of the file ino is gone.
func (x *linkIndex) unlinked(ino uint64, rel string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if !x.built {
		return
	}
	x.set(ino, slices.DeleteFunc(slices.Clone(x.names[ino]), func(n string) bool { return n == rel }))
}

// renamed records a rename of old to rel ("" when it left the protected
// tree); for a directory, of every indexed name below it.
func (x *linkIndex) renamed(old, rel string, dir bool) {
	if x.size.Load() == 0 {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	for ino, names := range x.names {
		var moved []string
		changed := false
		for _, n := range names {
			switch {
			case n == old && !dir:
			case dir && strings.HasPrefix(n, old+"/"):
			default:
				moved = append(moved, n)
				continue
			}
			changed = true
			if rel != "" {
				moved = append(moved, rel+n[len(old):])
			}
		}
		if changed {
			x.set(ino, moved)
		}
	}
}

// linkNames returns every name in the protected tree of the regular file
// st, whose node is at rel, when it has more than one; nil when rel is
// its only name, without looking further.
func (c *Core) linkNames(rel string, st *syscall.Stat_t) []string {
	if st.Nlink < 2 || c.links == nil || c.treeLinks(st) < 2 {
		return nil
	}
	return c.links.lookup(rel, st)
}

// contentEvents builds the events of a change to the content of a file
// at rel, known by names (nil: rel alone), that now holds cur and whose
// original, if preserved, is orig: every name gets cur and orig. Names in
// one table partition (or one place outside the warehouse layout) share
// an event, rel's first, so that each event's warehouse fields describe
// its files.
func contentEvents(t journal.Type, rel string, names []string, cur journal.File, orig *journal.File) []*journal.Event {
	if names == nil {
		names = []string{rel}
	}
	var events []*journal.Event
	at := map[journal.Location]*journal.Event{}
	for _, name := range names {
		loc := journal.Locate(path.Dir(name))
		e := at[loc]
		if e == nil {
			e = fileEvent(t, name)
			at[loc] = e
			events = append(events, e)
		}
		f := cur
		f.Path = name
		e.Files = append(e.Files, f)
	}
	if orig != nil {
		for _, e := range events {
			for _, f := range e.Files[:len(e.Files):len(e.Files)] {
				o := *orig
				o.Path = f.Path
				e.Files = append(e.Files, o)
			}
		}
	}
	return events
}

// unlinkedName keeps the index current after the name rel of the file st
// went away through the mount.
func (c *Core) unlinkedName(rel string, st *syscall.Stat_t) {
	if st.Nlink > 1 && c.links != nil && isReg(st) {
		c.links.unlinked(st.Ino, rel)
	}
}

// linkedName keeps the index current after the file st, known as old,
// got the name rel through the mount.
func (c *Core) linkedName(old, rel string, st *syscall.Stat_t) {
	if c.links != nil && isReg(st) && !c.excluded(rel) {
		if c.excluded(old) {
			old = "" // scratch space is no name in the tree
		}
		c.links.linked(st.Ino, old, rel)
	}
}

// renamedNames keeps the index current after a rename through the mount
// of src at oldRel to newRel, which replaced over (nil: nothing). An
// exchange is left to the check at the next use.
func (c *Core) renamedNames(oldRel, newRel string, src, over *syscall.Stat_t, flags uint32) {
	if c.links == nil || flags&unix.RENAME_EXCHANGE != 0 {
		return
	}
	if over != nil && isReg(over) && over.Nlink > 1 {
		c.links.unlinked(over.Ino, newRel)
	}
	if c.excluded(newRel) {
		newRel = "" // scratch space is no name in the tree
	}
	switch {
	case src.Mode&syscall.S_IFMT == syscall.S_IFDIR:
		c.links.renamed(oldRel, newRel, true)
	case isReg(src) && src.Nlink > 1:
		c.links.renamed(oldRel, newRel, false)
	}
}
