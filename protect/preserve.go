package protect

import (
	"io/fs"
	"os"
	"path"
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

// preserve keeps the regular file at abs in cmroot.
func (c *Core) preserve(abs string, h how) (preserved, error) {
	if h == byCopy || h == byCopyIdle {
		f, err := openNoAtime(abs)
		if err != nil {
			return preserved{}, err
		}
		defer f.Close()
		var st syscall.Stat_t
		if h == byCopyIdle && syscall.Fstat(int(f.Fd()), &st) == nil {
			if sum, ok := c.sums.get(statState(&st)); ok {
				name, created, err := c.cm.PreserveCopyOf(f, sum, st.Size)
				if err != nil {
					return preserved{}, err
				}
				return preserved{File: journal.File{Size: st.Size, XXH64: sum, CM: name}, created: created}, nil
			}
		}
		name, sum, size, created, err := c.cm.PreserveCopy(f)
		if err != nil {
			return preserved{}, err
		}
		return preserved{File: journal.File{Size: size, XXH64: sum, CM: name}, created: created}, nil
	}
	sum, st, err := c.sumPath(abs)
	if err != nil {
		return preserved{}, err
	}
	name, created, err := c.cm.Preserve(abs, sum, st.Size, h == byMove)
	if err != nil {
		return preserved{}, err
	}
	return preserved{File: journal.File{Size: st.Size, XXH64: sum, CM: name}, created: created, moved: h == byMove}, nil
}

// undo reverses a preservation whose operation failed: a moved original
// goes back to abs, a new entry is dropped. An error means the original
// is not back at abs (it is still in cmroot).
func (c *Core) undo(p preserved, abs string) error {
	if p.moved && abs != "" {
		if p.created {
			return c.cm.Unpreserve(p.CM, abs)
		}
		return c.cm.Restore(p.CM, abs) // the entry predates us: copy it back
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

// preserveTree keeps every regular file under abs (a file or a directory)
// before it leaves the protected tree, and returns the events that record
// its departure.
func (c *Core) preserveTree(abs, rel string) ([]*journal.Event, []preserved, error) {
	var events []*journal.Event
	var kept []preserved
	var dirs []string
	err := c.walk(abs, rel, func(p, prel string, d fs.DirEntry) error {
		switch {
		case d.IsDir():
			dirs = append(dirs, prel)
		case d.Type().IsRegular():
			// The file lives on, unprotected, in scratch space: copy it.
			pr, err := c.preserve(p, byCopy)
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
// arrived at abs from scratch space: its directories and its content are
// new to the protected tree.
func (c *Core) arrivals(abs, rel string) ([]*journal.Event, error) {
	var events []*journal.Event
	err := c.walk(abs, rel, func(p, prel string, d fs.DirEntry) error {
		switch {
		case d.IsDir():
			events = append(events, dirEvent(true, prel))
		case d.Type().IsRegular():
			sum, st, err := c.sumPath(p)
			if err != nil {
				return err
			}
			events = append(events, fileEvent(journal.Write, prel, journal.File{Path: prel, Size: st.Size, XXH64: sum}))
		case d.Type()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			e := fileEvent(journal.Symlink, prel)
			e.Target = target
			events = append(events, e)
		}
		return nil
	})
	return events, err
}

// walk calls fn for abs (mount-relative rel) and everything below it,
// leaving out scratch space.
func (c *Core) walk(abs, rel string, fn func(p, prel string, d fs.DirEntry) error) error {
	return filepath.WalkDir(abs, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		sub, _ := filepath.Rel(abs, p)
		prel := path.Join(rel, filepath.ToSlash(sub))
		if c.excluded(prel) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		return fn(p, prel, d)
	})
}

// isReg says whether st is a regular file.
func isReg(st *syscall.Stat_t) bool { return st.Mode&syscall.S_IFMT == syscall.S_IFREG }
