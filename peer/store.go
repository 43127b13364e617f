package peer

import (
	"context"
	"io"

	"github.com/cmfs-project/cmfs/container"
)

// Store is what a Server needs of the node's containers; *container.Store
// is the one implementation outside tests. See the container package for
// what each call does and returns.
type Store interface {
	PutReplication(r io.Reader, replication string) (uint64, container.BlockID, error)
	CloseContainer(id uint64) (container.Descriptor, error)
	List() []container.Descriptor
	Descriptor(id uint64) (container.Descriptor, error)
	OpenBlock(b container.BlockID) (io.ReadCloser, int64, error)
	Verify(ctx context.Context, id uint64) (container.Descriptor, error)
	Export(ctx context.Context, id uint64, c container.Compression, w io.Writer) error
	Import(ctx context.Context, id uint64, size int64, c container.Compression, r io.Reader) (container.Descriptor, error)
	WaitScan(ctx context.Context, id uint64) (container.Descriptor, error)
}

var _ Store = (*container.Store)(nil)
