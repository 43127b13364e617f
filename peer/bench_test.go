package peer

import (
	"context"
	"io"
	"testing"

	"github.com/cmfs-project/cmfs/container"
)

// discardStore imports by reading the stream to its end and keeping
// nothing; it exports size zero bytes.
type discardStore struct {
	*fakeStore
	size int64
}

func (d *discardStore) Descriptor(id uint64) (container.Descriptor, error) {
	return container.Descriptor{ID: id, State: container.Closed, Bytes: d.size}, nil
}

func (d *discardStore) Export(ctx context.Context, id uint64, c container.Compression, w io.Writer) error {
	buf := make([]byte, 256<<10)
	for left := d.size; left > 0; {
		n := min(left, int64(len(buf)))
		if _, err := w.Write(buf[:n]); err != nil {
			return err
		}
		left -= n
	}
	return nil
}

func (d *discardStore) Import(ctx context.Context, id uint64, size int64, c container.Compression, r io.Reader) (container.Descriptor, error) {
	n, err := io.Copy(io.Discard, r)
	return container.Descriptor{ID: id, Bytes: n}, err
}

// BenchmarkPush measures the transport alone: a push over loopback TCP
// between two servers whose stores produce and discard the bytes.
func BenchmarkPush(b *testing.B) {
	const size = 256 << 20
	src := serve(b, &discardStore{fakeStore: newFakeStore(), size: size}, Config{}, nil)
	dst := serve(b, &discardStore{fakeStore: newFakeStore()}, Config{}, nil)
	b.SetBytes(size)
	b.ResetTimer()
	for i := range b.N {
		if _, err := src.c.Replicate(context.Background(), Task{Container: uint64(i + 1), Target: dst.addr}); err != nil {
			b.Fatal(err)
		}
	}
}
