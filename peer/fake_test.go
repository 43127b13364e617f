package peer

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/container"
	"github.com/cmfs-project/cmfs/internal/checksum"
)

// fakeStore is an in-memory Store. A container's "tarball" is its bytes,
// whatever the compression; Import keeps what it read, so a test can
// compare it with what the source exported.
type fakeStore struct {
	mu         sync.Mutex
	containers map[uint64]*fakeContainer
	importing  map[uint64]bool
	blocks     map[container.BlockID][]byte
	open       uint64
	imports    int // Import calls
	// importHook, if set, runs at the start of each Import; an error is
	// Import's.
	importHook func(n int) error
	// slowExport delays each write of Export.
	slowExport time.Duration
	// exportStall, if set, stops Export after its first 1.5 MiB until it
	// is closed or ctx ends.
	exportStall chan struct{}
	// exportDone, if set, is called when Export returns.
	exportDone func()
	// putErr, if set, is what Put returns once it has read its block.
	putErr error
}

type fakeContainer struct {
	d   container.Descriptor
	tar []byte
}

func newFakeStore() *fakeStore {
	return &fakeStore{
		containers: make(map[uint64]*fakeContainer),
		importing:  make(map[uint64]bool),
		blocks:     make(map[container.BlockID][]byte),
	}
}

// add puts a CLOSED container with size bytes of random data.
func (f *fakeStore) add(t *testing.T, id uint64, size int) []byte {
	t.Helper()
	data := make([]byte, size)
	r := rand.New(rand.NewPCG(id, uint64(size)))
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.containers[id] = &fakeContainer{
		d:   container.Descriptor{ID: id, State: container.Closed, Bytes: int64(size), Created: time.Now(), ChecksumType: "xxh64", Replication: "replica:3"},
		tar: data,
	}
	return data
}

// tarball returns what the store holds for id: nil if nothing.
func (f *fakeStore) tarball(id uint64) []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, ok := f.containers[id]; ok {
		return c.tar
	}
	return nil
}

// check fails t if an import is still registered: every import must end.
func (f *fakeStore) check(t *testing.T) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for id := range f.importing {
		t.Errorf("container %d: still importing", id)
	}
}

func (f *fakeStore) PutReplication(r io.Reader, _ string) (uint64, container.BlockID, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return 0, container.BlockID{}, err
	}
	b := container.BlockID{Sum: checksum.Sum64(data), Size: int64(len(data))}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.putErr != nil {
		return 0, container.BlockID{}, f.putErr
	}
	if f.open == 0 {
		f.open = rand.Uint64() | 1
		f.containers[f.open] = &fakeContainer{d: container.Descriptor{ID: f.open, State: container.Open}}
	}
	c := f.containers[f.open]
	if _, ok := f.blocks[b]; !ok {
		f.blocks[b] = data
		c.d.Bytes += b.Size
		c.d.Blocks++
		c.tar = append(c.tar, data...)
	}
	return f.open, b, nil
}

func (f *fakeStore) CloseContainer(id uint64) (container.Descriptor, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.containers[id]
	if !ok {
		return container.Descriptor{}, fmt.Errorf("close %d: %w", id, container.ErrNotFound)
	}
	c.d.State = container.Closed
	if id == f.open {
		f.open = 0
	}
	return c.d, nil
}

func (f *fakeStore) List() []container.Descriptor {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ds []container.Descriptor
	for _, c := range f.containers {
		ds = append(ds, c.d)
	}
	return ds
}

func (f *fakeStore) Descriptor(id uint64) (container.Descriptor, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.containers[id]
	if !ok {
		return container.Descriptor{}, fmt.Errorf("container %d: %w", id, container.ErrNotFound)
	}
	return c.d, nil
}

func (f *fakeStore) OpenBlock(b container.BlockID) (io.ReadCloser, int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for id, data := range f.blocks {
		if id.Sum == b.Sum && (b.Size < 0 || id.Size == b.Size) {
			return io.NopCloser(bytes.NewReader(data)), int64(len(data)), nil
		}
	}
	return nil, 0, fmt.Errorf("block %s: %w", b, container.ErrBlockNotFound)
}

func (f *fakeStore) Verify(ctx context.Context, id uint64) (container.Descriptor, error) {
	return f.WaitScan(ctx, id)
}

func (f *fakeStore) Export(ctx context.Context, id uint64, c container.Compression, w io.Writer) error {
	if _, err := container.ParseCompression(string(c)); err != nil {
		return err
	}
	f.mu.Lock()
	ct, ok := f.containers[id]
	f.mu.Unlock()
	if !ok {
		return fmt.Errorf("export %d: %w", id, container.ErrNotFound)
	}
	if ct.d.State != container.Closed && ct.d.State != container.Unhealthy {
		return fmt.Errorf("export %d: %w", id, container.ErrNotClosed)
	}
	if f.exportDone != nil {
		defer f.exportDone()
	}
	for data := ct.tar; len(data) > 0; {
		if err := ctx.Err(); err != nil {
			return err
		}
		if f.exportStall != nil && len(ct.tar)-len(data) >= 3<<19 {
			select {
			case <-f.exportStall:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if f.slowExport > 0 {
			time.Sleep(f.slowExport) // a slow export is what it fakes: not a wait
		}
		n := min(len(data), 100<<10) // writes of an odd size: messages are cut by the writer
		if _, err := w.Write(data[:n]); err != nil {
			return fmt.Errorf("export %d: %w", id, err)
		}
		data = data[n:]
	}
	return nil
}

func (f *fakeStore) Import(ctx context.Context, id uint64, size int64, c container.Compression, r io.Reader) (container.Descriptor, error) {
	f.mu.Lock()
	f.imports++
	n, hook := f.imports, f.importHook
	switch {
	case f.containers[id] != nil:
		f.mu.Unlock()
		return container.Descriptor{}, fmt.Errorf("import %d: %w", id, container.ErrExists)
	case f.importing[id]:
		f.mu.Unlock()
		return container.Descriptor{}, fmt.Errorf("import %d: %w", id, container.ErrImporting)
	}
	f.importing[id] = true
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.importing, id)
		f.mu.Unlock()
	}()
	if hook != nil {
		if err := hook(n); err != nil {
			return container.Descriptor{}, err
		}
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return container.Descriptor{}, fmt.Errorf("import %d: %w", id, err)
	}
	d := container.Descriptor{ID: id, State: container.Recovering, Bytes: int64(len(data)), ChecksumType: "xxh64"}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.containers[id] = &fakeContainer{d: d, tar: data}
	return d, nil
}

func (f *fakeStore) WaitScan(ctx context.Context, id uint64) (container.Descriptor, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.containers[id]
	if !ok {
		return container.Descriptor{}, fmt.Errorf("container %d: %w", id, container.ErrNotFound)
	}
	if c.d.State == container.Recovering {
		c.d.State = container.Closed
	}
	return c.d, nil
}

var _ Store = (*fakeStore)(nil)
