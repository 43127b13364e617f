package lazyfs

import (
	"fmt"
	"io"
	"os"
)

const pageSize = 4096

// overlay is what one regular file holds in memory and not yet on disk:
// whole pages written since the last sync and the logical size. It is not
// safe for concurrent use; the cache that owns it serialises callers.
type overlay struct {
	// under is the overlay's own read-write descriptor of the underlying
	// file, which holds the file as of its last sync.
	under *os.File
	// size is the logical size, what stat reports.
	size int64
	// valid bounds the underlying bytes still current: those at and above
	// it were cut off by a truncate since the last sync (and read as
	// zeros unless written again). valid <= size.
	valid int64
	pages map[int64]*[pageSize]byte
}

// newOverlay starts a clean overlay over under, which it then owns.
func newOverlay(under *os.File) (*overlay, error) {
	fi, err := under.Stat()
	if err != nil {
		return nil, err
	}
	return &overlay{under: under, size: fi.Size(), valid: fi.Size(), pages: map[int64]*[pageSize]byte{}}, nil
}

// ReadAt reads the file as the overlay sees it.
func (o *overlay) ReadAt(p []byte, off int64) (int, error) {
	if off >= o.size {
		return 0, io.EOF
	}
	n := int(min(int64(len(p)), o.size-off))
	for done := 0; done < n; {
		at := off + int64(done)
		idx, in := at/pageSize, int(at%pageSize)
		chunk := min(pageSize-in, n-done)
		if pg, ok := o.pages[idx]; ok {
			copy(p[done:done+chunk], pg[in:])
		} else if err := o.readUnder(p[done:done+chunk], at); err != nil {
			return done, err
		}
		done += chunk
	}
	return n, nil
}

// readUnder fills p with the underlying bytes at off that are still
// current, zeros elsewhere.
func (o *overlay) readUnder(p []byte, off int64) error {
	clear(p)
	if off >= o.valid {
		return nil
	}
	_, err := o.under.ReadAt(p[:min(int64(len(p)), o.valid-off)], off)
	if err == io.EOF {
		// The underlying file is shorter than valid only if someone cut
		// it behind our back; what is missing reads as zeros.
		err = nil
	}
	return err
}

// page returns page idx for writing, filled from the underlying file the
// first time.
func (o *overlay) page(idx int64) (*[pageSize]byte, error) {
	if pg, ok := o.pages[idx]; ok {
		return pg, nil
	}
	pg := new([pageSize]byte)
	if err := o.readUnder(pg[:], idx*pageSize); err != nil {
		return nil, err
	}
	// Bytes past the logical size must read as zeros once the file grows.
	if end := o.size - idx*pageSize; end < pageSize {
		clear(pg[max(end, 0):])
	}
	o.pages[idx] = pg
	return pg, nil
}

// WriteAt writes p at off, growing the file if it ends past its size.
func (o *overlay) WriteAt(p []byte, off int64) (int, error) {
	for done := 0; done < len(p); {
		at := off + int64(done)
		pg, err := o.page(at / pageSize)
		if err != nil {
			return done, err
		}
		done += copy(pg[at%pageSize:], p[done:])
	}
	o.size = max(o.size, off+int64(len(p)))
	return len(p), nil
}

// Truncate sets the logical size: what lies past a shrink is gone, and
// reads as zeros if the file grows again.
func (o *overlay) Truncate(size int64) {
	if size < o.size {
		o.valid = min(o.valid, size)
		for idx, pg := range o.pages {
			switch start := idx * pageSize; {
			case start >= size:
				delete(o.pages, idx)
			case start+pageSize > size:
				clear(pg[size-start:])
			}
		}
	}
	o.size = size
}

// Sync makes the overlay's view of the file durable in the underlying
// file, and leaves the overlay clean.
func (o *overlay) Sync() error {
	name := o.under.Name()
	// Cut what truncates dropped, so that holes left by a later extend
	// read as zeros, then write the dirty pages and set the size.
	if err := o.under.Truncate(o.valid); err != nil {
		return fmt.Errorf("sync %s: %w", name, err)
	}
	for idx, pg := range o.pages {
		end := min(pageSize, o.size-idx*pageSize)
		if _, err := o.under.WriteAt(pg[:end], idx*pageSize); err != nil {
			return fmt.Errorf("sync %s: %w", name, err)
		}
	}
	if err := o.under.Truncate(o.size); err != nil {
		return fmt.Errorf("sync %s: %w", name, err)
	}
	if err := o.under.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", name, err)
	}
	clear(o.pages)
	o.valid = o.size
	return nil
}

// Close forgets the overlay, as a power failure does.
func (o *overlay) Close() error { return o.under.Close() }
