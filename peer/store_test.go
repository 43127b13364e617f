package peer

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"

	"github.com/cmfs-project/cmfs/container"
	"github.com/cmfs-project/cmfs/internal/checksum"
)

// realStore opens a container.Store on a volume in a temp dir, closed when
// the test ends.
func realStore(t *testing.T) (*container.Store, string) {
	t.Helper()
	vol := t.TempDir()
	st, err := container.OpenStore([]string{vol}, container.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st, vol
}

// fill puts files of random bytes (sizes) through n's client, closes the
// container, and returns its id and the files by block.
func fill(t *testing.T, n *node, sizes ...int) (uint64, map[container.BlockID][]byte) {
	t.Helper()
	ctx := context.Background()
	files := make(map[container.BlockID][]byte)
	var id uint64
	r := rand.New(rand.NewPCG(uint64(len(sizes)), 1))
	for i, size := range sizes {
		data := make([]byte, size)
		for j := range data {
			data[j] = byte(r.Uint32() % 7) // compressible, not trivially
		}
		got, b, err := n.c.Put(ctx, fmt.Sprintf("file-%d", i), bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		if b != (container.BlockID{Sum: checksum.Sum64(data), Size: int64(size)}) {
			t.Fatalf("put file-%d: block %v", i, b)
		}
		id = got
		files[b] = data
	}
	if _, err := n.c.CloseContainer(ctx, id); err != nil {
		t.Fatal(err)
	}
	return id, files
}

// checkBlocks reads every block from n and compares it with the files.
func checkBlocks(t *testing.T, n *node, files map[container.BlockID][]byte) {
	t.Helper()
	for b, data := range files {
		r, _, err := n.c.Get(context.Background(), b)
		if err != nil {
			t.Fatalf("get %v: %v", b, err)
		}
		got, err := io.ReadAll(r)
		r.Close()
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("get %v: %d bytes, %v", b, len(got), err)
		}
	}
}

// checkTmp fails t if anything is left in the volume's tmp directory.
func checkTmp(t *testing.T, vol string) {
	t.Helper()
	filepath.WalkDir(filepath.Join(vol, "tmp"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			t.Errorf("left in tmp: %s", p)
		}
		return nil
	})
}

// TestReplicateContainerStore replicates a real container between two
// real stores, pushed with every compression and pulled, and reads every
// block back from the target after its scan.
func TestReplicateContainerStore(t *testing.T) {
	ctx := context.Background()
	srcStore, _ := realStore(t)
	src := serve(t, srcStore, Config{}, nil)
	id, files := fill(t, src, 0, 1, 1000, 2<<20+3, 700<<10)
	for _, mode := range []Mode{Push, Pull} {
		for _, comp := range container.Compressions {
			if mode == Pull && comp != container.None && comp != container.Zstd {
				continue // the transport is push's; compression is the store's
			}
			t.Run(fmt.Sprintf("%s/%s", mode, comp), func(t *testing.T) {
				dstStore, vol := realStore(t)
				dst := serve(t, dstStore, Config{}, nil)
				res, err := src.c.Replicate(ctx, Task{Container: id, Target: dst.addr, Mode: mode, Compression: comp, WaitScan: true})
				if err != nil {
					t.Fatal(err)
				}
				if res.Descriptor.ID != id || res.Descriptor.State != container.Closed || res.Descriptor.Blocks != int64(len(files)) {
					t.Fatalf("imported %+v", res.Descriptor)
				}
				checkBlocks(t, dst, files)
				checkTmp(t, vol)
				t.Logf("%d bytes on the wire", res.Bytes)
			})
		}
	}
}

// TestResetContainerStore cuts a push to a real store mid-stream: the
// target discards the attempt (nothing left in tmp), the retry imports
// the container whole.
func TestResetContainerStore(t *testing.T) {
	ctx := context.Background()
	dstStore, vol := realStore(t)
	dst := serve(t, dstStore, Config{}, nil)
	api := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	proxy := toxiproxy.NewProxy(api, "push", "127.0.0.1:0", dst.addr)
	if err := proxy.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Stop)
	const cut = `{"name": "cut", "type": "limit_data", "stream": "upstream", "attributes": {"bytes": 1048576}}`
	if _, err := proxy.Toxics.AddToxicJson(strings.NewReader(cut)); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var retried []error
	srcStore, _ := realStore(t)
	src := serve(t, srcStore, fastRetry(), func(s *Server) {
		s.onRetry = func(attempt int, err error) {
			mu.Lock()
			retried = append(retried, err)
			mu.Unlock()
			proxy.Toxics.RemoveToxic(ctx, "cut")
		}
	})
	id, files := fill(t, src, 3<<20, 1<<20, 12345)
	res, err := src.c.Replicate(ctx, Task{Container: id, Target: proxy.Listen, WaitScan: true})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	n := len(retried)
	mu.Unlock()
	if n == 0 || res.Attempts != n+1 || res.Descriptor.State != container.Closed {
		t.Fatalf("%d attempts, %d retries, state %s: want a retry, then CLOSED", res.Attempts, n, res.Descriptor.State)
	}
	checkBlocks(t, dst, files)
	checkTmp(t, vol)
}
