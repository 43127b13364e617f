package container

import "errors"

// Errors returned by Store. Calls wrap them with context; test with
// errors.Is.
var (
	// ErrNotFound: no container has the requested id on this node.
	ErrNotFound = errors.New("container: no such container")
	// ErrExists: Import of an id this node already holds.
	ErrExists = errors.New("container: already exists")
	// ErrImporting: the id is being imported right now (Import, Delete).
	ErrImporting = errors.New("container: being imported")
	// ErrNoSpace: no volume has room for the reservation an Import needs.
	// Nothing was written.
	ErrNoSpace = errors.New("container: no volume has room")
	// ErrHostile: an imported tarball holds something the format does not
	// allow (a name outside it, "..", an absolute path, a link, a device,
	// a duplicate, a size beyond the reservation or the descriptor, a
	// descriptor for another container). Nothing was kept.
	ErrHostile = errors.New("container: tarball outside the format")
	// ErrCorrupt: data fails its checksum (a descriptor's own checksum, a
	// compressed stream's, a block read by OpenBlock) or a tarball is
	// truncated or malformed.
	ErrCorrupt = errors.New("container: checksum mismatch or malformed data")
	// ErrNotClosed: Export or Verify of a container that is not CLOSED or
	// UNHEALTHY (Export) or still OPEN (Verify).
	ErrNotClosed = errors.New("container: not closed")
	// ErrNotOpen: CloseContainer of a container that is neither OPEN nor
	// CLOSED nor CLOSING after a close of its own that failed (it is being
	// recovered after a restart or an import, or is UNHEALTHY).
	ErrNotOpen = errors.New("container: not open")
	// ErrBlockNotFound: no container on this node serves the block.
	ErrBlockNotFound = errors.New("container: no such block")
	// ErrBadCompression: a compression name ParseCompression does not know.
	ErrBadCompression = errors.New("container: unknown compression")
	// ErrInUse: OpenStore of a volume another Store (or process) holds.
	ErrInUse = errors.New("container: volume in use by another process")
	// ErrNotEC: Encode of a container that is not a whole EC one (its
	// replication is replica:N, or it is an index replica), or ReadCells,
	// ECInfo, LocateBlock or OpenMeta of one that is not an EC index
	// replica.
	ErrNotEC = errors.New("container: not an EC container of the kind the call needs")
	// ErrRange: ReadCells of stripes the layout does not have or of more
	// than MaxReadCells bytes; an offset beyond the container.
	ErrRange = errors.New("container: out of range")
	// ErrInvalid: a ReconstructSpec that does not hold together.
	ErrInvalid = errors.New("container: invalid request")
	// ErrClosed: a call on a closed Store.
	ErrClosed = errors.New("container: store is closed")
)
