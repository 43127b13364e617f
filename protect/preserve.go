package protect

import (
	"io/fs"
	"path/filepath"
	"syscall"

	"github.com/cmfs-project/cmfs/journal"
)

// How an original is preserved. A file still open for writing is always
// copied: later writes through its handles must not reach cmroot.
type how int

const (
	byMove     how = iota // the path goes away (unlink)
	byLink                // the path stays and will be replaced (rename over, O_TRUNC swap)
	byCopy                // the path stays and will be changed in place, or is still being written
	byCopyIdle            // as byCopy, and nothing writes to the file meanwhile: a cached checksum holds
)

// preserved is an original kept in cmroot; File.Path is filled by the caller.
type preserved struct {
	journal.File
	created bool // a new cmroot entry, not a refresh of an existing one
	moved   bool // the original left its path
}

// preserve keeps the regular file rel in cmroot.
func (c *Core) preserve(rel string, h how) (preserved, error) {
	if h == byCopy || h == byCopyIdle {
		f, err := openNoAtime(c.fs, rel)
		if err != nil {
			return preserved{}, err
		}
		defer f.Close()
		var st syscall.Stat_t
		idle := h == byCopyIdle && syscall.Fstat(int(f.Fd()), &st) == nil
		if idle {
			if sum, ok := c.sums.get(statState(&st)); ok {
				name, created, err := c.cm.PreserveCopyOf(f, sum, st.Size)
				if err != nil {
					return preserved{}, err
				}
				return preserved{File: journal.File{Size: st.Size, XXH64: sum, CM: name}, created: created}, nil
			}
		}
		k, err := c.cm.PreserveCopy(f)
		if err != nil {
			return preserved{}, err
		}
		var after syscall.Stat_t
		if idle && syscall.Fstat(int(f.Fd()), &after) == nil && statState(&after) == statState(&st) && after.Size == k.Size {
			// The copy's checksum is the file's: the close after a write
			// into part of it can start from its block sums (rehash).
			c.sums.put(statState(&after), k.XXH64, k.Blocks)
		}
		return preserved{File: journal.File{Size: k.Size, XXH64: k.XXH64, CM: k.Name}, created: k.Created}, nil
	}
	sum, st, err := c.sumPath(rel)
	if err != nil {
		return preserved{}, err
	}
	return c.preserveSummed(rel, h, sum, st)
}

// preserveSummed is preserve by move or link of rel, whose checksum sum
// and stat st the caller has just taken (sumPath, sumStat). cmroot checks the
// size again as it links or moves the file.
func (c *Core) preserveSummed(rel string, h how, sum string, st *syscall.Stat_t) (preserved, error) {
	var name string
	var created bool
	err := c.fs.WithPath(rel, func(p string) (err error) {
		name, created, err = c.cm.PreserveStat(p, sum, st, h == byMove)
		return err
	})
	if err != nil {
		return preserved{}, err
	}
	return preserved{File: journal.File{Size: st.Size, XXH64: sum, CM: name}, created: created, moved: h == byMove}, nil
}

// undo reverses a preservation whose operation failed: a moved original
// goes back to rel ("": the original stays where it is), a new entry is
// dropped. An error means the original is not back at rel (it is still
// in cmroot).
func (c *Core) undo(p preserved, rel string) error {
	if p.moved && rel != "" {
		return c.fs.WithPath(rel, func(abs string) error {
			if p.created {
				return c.cm.Unpreserve(p.CM, abs)
			}
			return c.cm.Restore(p.CM, abs) // the entry predates us: copy it back
		})
	}
	if p.created {
		c.cm.Drop(p.CM)
	}
	return nil
}

func (c *Core) undoAll(ps []preserved) {
	for _, p := range ps {
		c.undo(p, "")
	}
}

// preserveTree keeps every regular file under rel (a file or a
// directory) before it leaves the protected tree, and returns the events
// that record its departure.
func (c *Core) preserveTree(rel string) ([]*journal.Event, []preserved, error) {
	var events []*journal.Event
	var kept []preserved
	var dirs []string
	err := c.walk(rel, func(prel string, d fs.DirEntry) error {
		switch {
		case d.IsDir():
			dirs = append(dirs, prel)
		case d.Type().IsRegular():
			// The file lives on, unprotected, in scratch space: copy it.
			pr, err := c.preserve(prel, byCopy)
			if err != nil {
				return err
			}
			pr.Path = prel
			kept = append(kept, pr)
			events = append(events, fileEvent(journal.Delete, prel, pr.File))
		default:
			events = append(events, fileEvent(journal.Delete, prel))
		}
		return nil
	})
	if err != nil {
		c.undoAll(kept)
		return nil, nil, err
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		events = append(events, dirEvent(false, dirs[i]))
	}
	return events, kept, nil
}

// arrivals returns the events for a file or directory tree that just
// arrived at rel from scratch space: its directories and its content are
// new to the protected tree.
func (c *Core) arrivals(rel string) ([]*journal.Event, error) {
	var events []*journal.Event
	err := c.walk(rel, func(prel string, d fs.DirEntry) error {
		switch {
		case d.IsDir():
			events = append(events, dirEvent(true, prel))
		case d.Type().IsRegular():
			sum, st, err := c.sumPath(prel)
			if err != nil {
				return err
			}
			events = append(events, fileEvent(journal.Write, prel, journal.File{Path: prel, Size: st.Size, XXH64: sum}))
		case d.Type()&fs.ModeSymlink != 0:
			target, _ := c.fs.Readlink(prel)
			e := fileEvent(journal.Symlink, prel)
			e.Target = target
			events = append(events, e)
		}
		return nil
	})
	return events, err
}

// walk calls fn for rel and everything below it, leaving out scratch
// space.
func (c *Core) walk(rel string, fn func(prel string, d fs.DirEntry) error) error {
	return c.fs.WalkDir(rel, func(prel string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if c.excluded(prel) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		return fn(prel, d)
	})
}

// isReg says whether st is a regular file.
func isReg(st *syscall.Stat_t) bool { return st.Mode&syscall.S_IFMT == syscall.S_IFREG }
