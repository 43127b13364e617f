package container

import (
	"bytes"
	"context"
	"errors"
	"github.com/cmfs-project/cmfs/internal/wait"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestPutCloseListGet(t *testing.T) {
	s := newTestStore(t, Options{})
	blocks := [][]byte{randBytes(1, 1000), randBytes(2, 3<<20), {}, textBytes(3, 5000)}
	var id uint64
	var ids []BlockID
	for _, b := range blocks {
		cid, bid := mustPut(t, s, b)
		if id != 0 && cid != id {
			t.Fatalf("second block in container %d, first in %d", cid, id)
		}
		id = cid
		ids = append(ids, bid)
	}
	d, err := s.Descriptor(id)
	if err != nil {
		t.Fatal(err)
	}
	if d.State != Open || d.Blocks != 4 || d.Bytes != 1000+3<<20+5000 {
		t.Fatalf("open descriptor %+v", d)
	}
	// Blocks are served while the container is open.
	for i, b := range ids {
		got, err := readBlock(t, s, b)
		if err != nil || !bytes.Equal(got, blocks[i]) {
			t.Fatalf("block %s: %d bytes, %v", b, len(got), err)
		}
	}
	d, err = s.CloseContainer(id)
	if err != nil {
		t.Fatal(err)
	}
	if d.State != Closed || d.Blocks != 4 || d.Chunks != 1 || d.ContainerChecksum == "" || d.MetadataChecksum == "" || d.Replication != DefaultReplication {
		t.Fatalf("closed descriptor %+v", d)
	}
	if again, err := s.CloseContainer(id); err != nil || again != d {
		t.Fatalf("second close = %+v, %v", again, err)
	}
	list := s.List()
	if len(list) != 1 || list[0] != d {
		t.Fatalf("List = %+v, want [%+v]", list, d)
	}
	onDisk, err := readDescriptor(filepath.Join(s.Volumes()[0].Path, strconv.FormatUint(id, 10)))
	if err != nil || onDisk != d {
		t.Fatalf("container.yaml = %+v, %v; want %+v", onDisk, err, d)
	}
	for i, b := range ids {
		got, err := readBlock(t, s, b)
		if err != nil || !bytes.Equal(got, blocks[i]) {
			t.Fatalf("block %s after close: %d bytes, %v", b, len(got), err)
		}
		// By bare sum too.
		got, err = readBlock(t, s, BlockID{Sum: b.Sum, Size: -1})
		if err != nil || !bytes.Equal(got, blocks[i]) {
			t.Fatalf("block %016x: %d bytes, %v", b.Sum, len(got), err)
		}
	}
	if _, err := readBlock(t, s, BlockID{Sum: ids[0].Sum, Size: 999}); !errors.Is(err, ErrBlockNotFound) {
		t.Fatalf("wrong size: %v, want ErrBlockNotFound", err)
	}
	// The next Put opens a new container.
	cid, _ := mustPut(t, s, []byte("next"))
	if cid == id {
		t.Fatal("Put went into a closed container")
	}
	// And the store reopens to the same state.
	vol := s.Volumes()[0].Path
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := newTestStore(t, Options{}, vol)
	if got, err := s2.Descriptor(id); err != nil || got != d {
		t.Fatalf("after reopen %+v, %v", got, err)
	}
	if got, err := s2.Descriptor(cid); err != nil || got.State != Closed || got.Blocks != 1 {
		t.Fatalf("container open at Close: %+v, %v; want CLOSED", got, err)
	}
	for i, b := range ids {
		if got, err := readBlock(t, s2, b); err != nil || !bytes.Equal(got, blocks[i]) {
			t.Fatalf("block %s after reopen: %v", b, err)
		}
	}
}

func TestPutDedup(t *testing.T) {
	s := newTestStore(t, Options{})
	a, b := randBytes(1, 100<<10), randBytes(2, 50<<10)
	id, ba := mustPut(t, s, a)
	mustPut(t, s, b)
	id2, ba2 := mustPut(t, s, a)
	if id2 != id || ba2 != ba {
		t.Fatalf("second put of a: %d %v, first %d %v", id2, ba2, id, ba)
	}
	d, err := s.CloseContainer(id)
	if err != nil {
		t.Fatal(err)
	}
	if d.Blocks != 2 || d.Bytes != int64(len(a)+len(b)) {
		t.Fatalf("descriptor %+v: want 2 blocks of %d bytes", d, len(a)+len(b))
	}
	fi, err := os.Stat(filepath.Join(s.Volumes()[0].Path, strconv.FormatUint(id, 10), chunkName(0)))
	if err != nil || fi.Size() != d.Bytes {
		t.Fatalf("chunk file %v, %v; want %d bytes", fi.Size(), err, d.Bytes)
	}
}

func TestPutReadError(t *testing.T) {
	s := newTestStore(t, Options{})
	id, _ := mustPut(t, s, []byte("before"))
	boom := errors.New("boom")
	_, _, err := s.Put(io.MultiReader(bytes.NewReader(randBytes(1, 3<<20)), iotestErr{boom}))
	if !errors.Is(err, boom) {
		t.Fatalf("Put = %v, want the reader's error", err)
	}
	_, b := mustPut(t, s, []byte("after"))
	d, err := s.CloseContainer(id)
	if err != nil || d.Bytes != int64(len("before")+len("after")) || d.Blocks != 2 {
		t.Fatalf("descriptor %+v, %v: the failed put left bytes behind", d, err)
	}
	if got, err := readBlock(t, s, b); err != nil || string(got) != "after" {
		t.Fatalf("block after a failed put: %q, %v", got, err)
	}
}

type iotestErr struct{ err error }

func (r iotestErr) Read([]byte) (int, error) { return 0, r.err }

func TestRollAtContainerSize(t *testing.T) {
	s := newTestStore(t, Options{ContainerSize: 1 << 20, ChunkSize: 300 << 10})
	var ids []uint64
	var blocks []BlockID
	for i := range 10 {
		id, b := mustPut(t, s, randBytes(uint64(i), 256<<10))
		ids = append(ids, id)
		blocks = append(blocks, b)
	}
	// 4 blocks of 256 KiB reach 1 MiB: containers of 4, 4 and 2 blocks.
	if ids[0] != ids[3] || ids[3] == ids[4] || ids[4] != ids[7] || ids[7] == ids[8] {
		t.Fatalf("containers %v", ids)
	}
	for _, id := range []uint64{ids[0], ids[4]} {
		d, err := s.Descriptor(id)
		if err != nil || d.State != Closed || d.Blocks != 4 || d.Chunks != 2 {
			t.Fatalf("full container %+v, %v: want CLOSED, 4 blocks in 2 chunks", d, err)
		}
	}
	if d, _ := s.Descriptor(ids[8]); d.State != Open {
		t.Fatalf("last container %s, want OPEN", d.State)
	}
	for i, b := range blocks {
		if got, err := readBlock(t, s, b); err != nil || !bytes.Equal(got, randBytes(uint64(i), 256<<10)) {
			t.Fatalf("block %d: %v", i, err)
		}
	}
}

func TestIdleClose(t *testing.T) {
	s := newTestStore(t, Options{IdleClose: 20 * time.Millisecond})
	id, _ := mustPut(t, s, []byte("x"))
	wait.For(t, 10*time.Second, "idle close", func() bool {
		d, _ := s.Descriptor(id)
		return d.State == Closed
	})
}

// TestPutReplication: each replication config fills its own open
// container, which carries it; idle close closes each of them.
func TestPutReplication(t *testing.T) {
	s := newTestStore(t, Options{IdleClose: 50 * time.Millisecond})
	put := func(data []byte, replication string) uint64 {
		t.Helper()
		id, b, err := s.PutReplication(bytes.NewReader(data), replication)
		if err != nil {
			t.Fatal(err)
		}
		if b != BlockIDOf(data) {
			t.Fatalf("PutReplication = %v, want %v", b, BlockIDOf(data))
		}
		return id
	}
	three := put([]byte("a"), "")
	two := put([]byte("b"), "replica:2")
	if two == three {
		t.Fatalf("replica:2 block in the replica:3 container %d", three)
	}
	if got := put([]byte("c"), "replica:2"); got != two {
		t.Errorf("second replica:2 block in container %d, want %d", got, two)
	}
	if got := put([]byte("d"), DefaultReplication); got != three {
		t.Errorf("second %s block in container %d, want %d", DefaultReplication, got, three)
	}
	for id, want := range map[uint64]string{three: DefaultReplication, two: "replica:2"} {
		wait.For(t, 10*time.Second, "idle close", func() bool {
			d, _ := s.Descriptor(id)
			return d.State == Closed
		})
		if d, _ := s.Descriptor(id); d.Replication != want || d.Blocks != 2 {
			t.Errorf("container %d: replication %q, %d blocks; want %q, 2", id, d.Replication, d.Blocks, want)
		}
	}
	if _, _, err := s.PutReplication(bytes.NewReader([]byte("e")), "replica:x"); err == nil || !strings.Contains(err.Error(), "replica:N") {
		t.Errorf("PutReplication(replica:x) = %v, want a refusal naming replica:N", err)
	}
}

func TestConcurrentPuts(t *testing.T) {
	s := newTestStore(t, Options{ContainerSize: 256 << 10})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			for i := range 8 {
				data := randBytes(uint64(g*100+i), 40<<10)
				_, b, err := s.Put(bytes.NewReader(data))
				if err == nil && b != BlockIDOf(data) {
					err = errors.New("wrong block id")
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var blocks int64
	for _, d := range s.List() {
		blocks += d.Blocks
	}
	if blocks != 64 {
		t.Fatalf("%d blocks stored, want 64", blocks)
	}
}

func TestVerifyFlippedByteOnDisk(t *testing.T) {
	for _, tc := range []struct {
		name   string
		file   string
		offset int64
	}{
		{"chunk data", chunkName(0), 70000},
		{"index", dbName, 4096 + 100},
		{"checksum file", checksumName, 3},
		{"descriptor", descriptorName, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestStore(t, Options{})
			data := randBytes(7, 100<<10)
			d, ids := closedContainer(t, s, randBytes(6, 50<<10), data)
			dir := filepath.Join(s.Volumes()[0].Path, strconv.FormatUint(d.ID, 10))
			flipByte(t, filepath.Join(dir, tc.file), tc.offset)
			if tc.file == chunkName(0) {
				// OpenBlock notices on its own, at the end of the block.
				if _, err := readBlock(t, s, ids[1]); !errors.Is(err, ErrCorrupt) {
					t.Fatalf("reading the flipped block: %v, want ErrCorrupt", err)
				}
			}
			got, err := s.Verify(context.Background(), d.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got.State != Unhealthy || got.Reason == "" {
				t.Fatalf("after a flipped byte in %s: %s %q, want UNHEALTHY with a reason", tc.file, got.State, got.Reason)
			}
			t.Logf("reason: %s", got.Reason)
			if _, _, err := s.OpenBlock(ids[0]); !errors.Is(err, ErrBlockNotFound) {
				t.Fatalf("UNHEALTHY container still serves: %v", err)
			}
			// Durably: a reopened store agrees.
			vol := s.Volumes()[0].Path
			s.Close()
			s2 := newTestStore(t, Options{}, vol)
			if d2, _ := s2.Descriptor(d.ID); d2.State != Unhealthy {
				t.Fatalf("after reopen %s, want UNHEALTHY", d2.State)
			}
		})
	}
}

func TestVerifyHealthy(t *testing.T) {
	s := newTestStore(t, Options{ChunkSize: 64 << 10})
	d, _ := closedContainer(t, s, randBytes(1, 100<<10), []byte{}, randBytes(2, 10), randBytes(3, 200<<10))
	got, err := s.Verify(context.Background(), d.ID)
	if err != nil || got.State != Closed {
		t.Fatalf("Verify = %s %q, %v; want CLOSED", got.State, got.Reason, err)
	}
	id, _ := mustPut(t, s, []byte("open"))
	if _, err := s.Verify(context.Background(), id); !errors.Is(err, ErrNotClosed) {
		t.Fatalf("Verify of an OPEN container: %v, want ErrNotClosed", err)
	}
	if _, err := s.Verify(context.Background(), 12345); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Verify of no container: %v, want ErrNotFound", err)
	}
}

func flipByte(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatalf("flip %s at %d: %v", path, off, err)
	}
	b[0] ^= 0x20
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func TestDelete(t *testing.T) {
	s := newTestStore(t, Options{})
	d, ids := closedContainer(t, s, []byte("gone soon"))
	open, _ := mustPut(t, s, []byte("open one"))
	for _, id := range []uint64{d.ID, open} {
		if err := s.Delete(id); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Descriptor(id); !errors.Is(err, ErrNotFound) {
			t.Fatalf("after delete: %v", err)
		}
	}
	if _, err := readBlock(t, s, ids[0]); !errors.Is(err, ErrBlockNotFound) {
		t.Fatalf("deleted block: %v", err)
	}
	if err := s.Delete(d.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	vol := s.Volumes()[0]
	if got := tree(t, vol.Path); !sameStrings(got, emptyVolumeTree) {
		t.Fatalf("volume holds %v", got)
	}
	if vol.Used != 0 || vol.Containers != 0 {
		t.Fatalf("volume accounts %d bytes in %d containers after deleting all", vol.Used, vol.Containers)
	}
	// Puts go on into a new container.
	mustPut(t, s, []byte("again"))
}

// TestPruneVanishedDirectory: a CLOSED container whose directory is
// removed behind the Store's back is dropped by Prune, and only it: the
// open container and a CLOSED one still on disk stay listed.
func TestPruneVanishedDirectory(t *testing.T) {
	s := newTestStore(t, Options{})
	gone, ids := closedContainer(t, s, []byte("removed by hand"))
	kept, _ := closedContainer(t, s, []byte("still here"))
	open, _ := mustPut(t, s, []byte("open one"))
	if got := s.Prune(); len(got) != 0 {
		t.Fatalf("prune with every directory there: %v", got)
	}
	if err := os.RemoveAll(filepath.Join(s.Volumes()[0].Path, strconv.FormatUint(gone.ID, 10))); err != nil {
		t.Fatal(err)
	}
	if got := s.Prune(); !slices.Equal(got, []uint64{gone.ID}) {
		t.Fatalf("prune: %v, want [%d]", got, gone.ID)
	}
	var listed []uint64
	for _, d := range s.List() {
		listed = append(listed, d.ID)
	}
	if want := slices.Sorted(slices.Values([]uint64{kept.ID, open})); !slices.Equal(listed, want) {
		t.Fatalf("listed %v, want %v", listed, want)
	}
	if _, err := readBlock(t, s, ids[0]); !errors.Is(err, ErrBlockNotFound) {
		t.Fatalf("block of the pruned container: %v", err)
	}
	if vol := s.Volumes()[0]; vol.Containers != 2 {
		t.Fatalf("volume accounts %d containers, want 2", vol.Containers)
	}
	if got := s.Prune(); len(got) != 0 {
		t.Fatalf("second prune: %v", got)
	}
}

func TestOpenStoreRecoversOpenContainer(t *testing.T) {
	vol := filepath.Join(t.TempDir(), "vol")
	s := newTestStore(t, Options{}, vol)
	blocks := [][]byte{randBytes(1, 10<<10), randBytes(2, 20<<10)}
	var id uint64
	var ids []BlockID
	for _, b := range blocks {
		id, _ = mustPut(t, s, b)
		ids = append(ids, BlockIDOf(b))
	}
	s.crash()
	// An interrupted Put left a tail the index does not know.
	chunk := filepath.Join(vol, strconv.FormatUint(id, 10), chunkName(0))
	f, err := os.OpenFile(chunk, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("torn tail of a put"))
	f.Close()

	s2 := newTestStore(t, Options{}, vol)
	d, err := s2.WaitScan(context.Background(), id)
	if err != nil || d.State != Closed || d.Blocks != 2 || d.Bytes != 30<<10 {
		t.Fatalf("recovered %+v, %v; want CLOSED with 2 blocks", d, err)
	}
	for i, b := range ids {
		if got, err := readBlock(t, s2, b); err != nil || !bytes.Equal(got, blocks[i]) {
			t.Fatalf("block %d after recovery: %v", i, err)
		}
	}
}

func TestOpenStoreCleansLeftovers(t *testing.T) {
	vol := filepath.Join(t.TempDir(), "vol")
	s := newTestStore(t, Options{}, vol)
	d, _ := closedContainer(t, s, []byte("kept"))
	s.crash()
	// What a kill -9 leaves mid-import, mid-create and mid-delete.
	for _, p := range []string{
		"tmp/container-copy/42.tar.zst",
		"tmp/container-extract/42-123/chunks/0.data",
		"tmp/container-extract/42-123/container.yaml",
		"tmp/container-new/43-9/metadata/container.db",
		"tmp/container-delete/44-1/c/chunks/0.data",
	} {
		if err := os.MkdirAll(filepath.Join(vol, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(vol, p), []byte("partial"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s2 := newTestStore(t, Options{}, vol) // its cleanup asserts the tmp dirs are empty
	want := append([]string{strconv.FormatUint(d.ID, 10) + "/"}, emptyVolumeTree...)
	var got []string
	for _, p := range tree(t, vol) {
		if !strings.Contains(strings.TrimSuffix(p, "/"), "/") || strings.HasPrefix(p, "tmp/") {
			got = append(got, p)
		}
	}
	if !sameStrings(got, want) {
		t.Fatalf("volume after reopen: %v, want %v", got, want)
	}
	if len(s2.List()) != 1 {
		t.Fatalf("List = %v", s2.List())
	}
}

func TestOpenStoreLock(t *testing.T) {
	vol := filepath.Join(t.TempDir(), "vol")
	newTestStore(t, Options{}, vol)
	if _, err := OpenStore([]string{vol}, Options{}); !errors.Is(err, ErrInUse) {
		t.Fatalf("second OpenStore: %v, want ErrInUse", err)
	}
}

func TestUnreadableDescriptorListedUnhealthy(t *testing.T) {
	vol := filepath.Join(t.TempDir(), "vol")
	s := newTestStore(t, Options{}, vol)
	d, _ := closedContainer(t, s, []byte("x"))
	s.Close()
	flipByte(t, filepath.Join(vol, strconv.FormatUint(d.ID, 10), descriptorName), 5)
	s2 := newTestStore(t, Options{}, vol)
	got, err := s2.Descriptor(d.ID)
	if err != nil || got.State != Unhealthy {
		t.Fatalf("%+v, %v; want UNHEALTHY", got, err)
	}
	// UNHEALTHY is exported, as it is: the target refuses the descriptor.
	var tarball bytes.Buffer
	if err := s2.Export(context.Background(), d.ID, None, &tarball); err != nil {
		t.Fatal(err)
	}
	dst := newTestStore(t, Options{})
	if _, err := dst.Import(context.Background(), d.ID, d.Bytes, None, &tarball); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("import of it: %v, want ErrCorrupt", err)
	}
	if err := s2.Delete(d.ID); err != nil {
		t.Fatal(err)
	}
}

func TestVolumeChoice(t *testing.T) {
	root := t.TempDir()
	a, b := filepath.Join(root, "a"), filepath.Join(root, "b")
	free := map[string]int64{a: 100 << 20, b: 200 << 20}
	s := newTestStore(t, Options{Statfs: func(dir string) (int64, int64, error) { return 1 << 40, free[dir], nil }}, a, b)
	id, _ := mustPut(t, s, []byte("x"))
	if _, err := os.Stat(filepath.Join(b, strconv.FormatUint(id, 10))); err != nil {
		t.Fatalf("new container not on the roomier volume: %v", err)
	}
}

func TestParseBlockID(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want BlockID
		ok   bool
	}{
		{"0123456789abcdef-42", BlockID{0x0123456789abcdef, 42}, true},
		{"0123456789abcdef", BlockID{0x0123456789abcdef, -1}, true},
		{"0123456789ABCDEF-0", BlockID{0x0123456789abcdef, 0}, true},
		{"0123456789abcde", BlockID{}, false},
		{"0123456789abcdef-", BlockID{}, false},
		{"0123456789abcdef--1", BlockID{}, false},
		{"0123456789abcdeg-1", BlockID{}, false},
		{"", BlockID{}, false},
	} {
		got, err := ParseBlockID(tc.in)
		if (err == nil) != tc.ok || (tc.ok && got != tc.want) {
			t.Errorf("ParseBlockID(%q) = %v, %v; want %v ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
	b := BlockIDOf([]byte("hello"))
	if got, err := ParseBlockID(b.String()); err != nil || got != b {
		t.Fatalf("round trip %v: %v, %v", b, got, err)
	}
}

func TestDescriptorRoundTrip(t *testing.T) {
	d := Descriptor{LayoutVersion: layoutVersion, ID: ^uint64(0), State: Closed, ChecksumType: ChecksumType, Replication: "ec:rs-6-3-1024k",
		Bytes: 5 << 30, Blocks: 7, Chunks: 20, MetadataBytes: 32768, MetadataChecksum: "0000000000000001",
		MaxSize: 5 << 30, Created: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), ContainerChecksum: "1234567890123456"}
	b, err := d.marshal()
	if err != nil {
		t.Fatal(err)
	}
	got, err := parseDescriptor(b)
	if err != nil || got != d {
		t.Fatalf("parse(marshal) = %+v, %v\nwant %+v\n%s", got, err, d, b)
	}
	// Every single flipped bit is caught.
	for i := range b {
		for bit := range 8 {
			c := bytes.Clone(b)
			c[i] ^= 1 << bit
			if _, err := parseDescriptor(c); err == nil {
				t.Fatalf("flip of bit %d of byte %d (%q) not caught", bit, i, b[i])
			}
		}
	}
	for _, bad := range []string{"replica:0", "replica:x", "ec:rs-6-3", "ec:rs-6-3-1024", "ec:rs-0-3-1024k", "raid5"} {
		if ValidateReplication(bad) == nil {
			t.Errorf("ValidateReplication(%q) = nil", bad)
		}
	}
}

func TestParseCompression(t *testing.T) {
	for _, c := range Compressions {
		if got, err := ParseCompression(string(c)); err != nil || got != c {
			t.Errorf("ParseCompression(%q) = %v, %v", c, got, err)
		}
	}
	if got, err := ParseCompression(""); err != nil || got != None {
		t.Errorf("ParseCompression(\"\") = %v, %v", got, err)
	}
	if _, err := ParseCompression("brotli"); !errors.Is(err, ErrBadCompression) {
		t.Errorf("ParseCompression(brotli) = %v", err)
	}
}

func TestBlockFromAnyHolder(t *testing.T) {
	s := newTestStore(t, Options{})
	shared := randBytes(9, 64<<10)
	d1, ids := closedContainer(t, s, shared, []byte("one"))
	d2, _ := closedContainer(t, s, shared, []byte("two"))
	if err := s.Delete(d1.ID); err != nil {
		t.Fatal(err)
	}
	if got, err := readBlock(t, s, ids[0]); err != nil || !bytes.Equal(got, shared) {
		t.Fatalf("block held by container %d too: %v", d2.ID, err)
	}
	if err := s.Delete(d2.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := readBlock(t, s, ids[0]); !errors.Is(err, ErrBlockNotFound) {
		t.Fatalf("no holder left: %v", err)
	}
}
