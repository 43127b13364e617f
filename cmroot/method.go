package cmroot

import "sync/atomic"

// Method is how a preservation kept its original.
type Method int

// The methods, in the order PreserveStats lists them. A move to another
// filesystem is a copy (or a clone) followed by the original's removal,
// and counts as such.
const (
	Moved        Method = iota // renamed into the store: the original left its path
	Linked                     // hard-linked into the store: the original stays, to be replaced
	Copied                     // its bytes copied into a new entry
	Cloned                     // cloned (FICLONE, a reflink): the entry shares the original's extents
	Deduplicated               // an entry with its content was there: only that entry's retention restarted
	numMethods
)

var methodNames = [numMethods]string{"move", "link", "copy", "reflink", "dedup"}

// String is the method's name in metrics: move, link, copy, reflink,
// dedup.
func (m Method) String() string {
	if m < 0 || m >= numMethods {
		return "unknown"
	}
	return methodNames[m]
}

// MethodStats counts the preservations of one method since the store was
// opened: those later undone (the operation failed) or dropped unused (an
// in-place open that changed nothing) included.
type MethodStats struct {
	Method Method
	Files  uint64 // originals preserved
	Bytes  uint64 // their sizes' total
}

// methodCount is one method's counters.
type methodCount struct{ files, bytes atomic.Uint64 }

// count records a preservation of size bytes by m.
func (s *Store) count(m Method, size int64) {
	c := &s.methods[m]
	c.files.Add(1)
	c.bytes.Add(uint64(size))
}

// PreserveStats returns the preservations since Open, one element per
// method in Method order, every method present.
func (s *Store) PreserveStats() []MethodStats {
	out := make([]MethodStats, numMethods)
	for m := range numMethods {
		c := &s.methods[m]
		out[m] = MethodStats{Method: m, Files: c.files.Load(), Bytes: c.bytes.Load()}
	}
	return out
}

// copyMethod is how copyFrom or copyIn made an entry: created says it
// made one, cloned that it cloned.
func copyMethod(created, cloned bool) Method {
	switch {
	case !created:
		return Deduplicated
	case cloned:
		return Cloned
	}
	return Copied
}
