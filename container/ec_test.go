package container

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cmfs-project/cmfs/ec"
	bolt "go.etcd.io/bbolt"
)

// ecOpts makes small EC containers: rs-3-2 with 1 KiB cells, chunk files
// of 4 KiB.
var ecOpts = Options{ChunkSize: 4 << 10, ContainerSize: 1 << 30, Replication: "ec:rs-3-2-1k"}

// ecCases are whole containers of several shapes, as their blocks' sizes.
var ecCases = []struct {
	name   string
	blocks []int
}{
	{"empty", []int{0}},
	{"one byte", []int{1}},
	{"one stripe exactly", []int{3 << 10}},
	{"odd", []int{5000, 777}},
	{"multi-chunk", []int{3000, 0, 2500, 4100, 1, 1234, 9000, 17}},
}

// ecWhole puts blocks of the given sizes into a new container of s and
// closes it; it returns its descriptor, the blocks, and its logical
// stream (its chunk files back to back).
func ecWhole(t *testing.T, s *Store, seed uint64, sizes []int) (Descriptor, [][]byte, []byte) {
	t.Helper()
	var blocks [][]byte
	for k, n := range sizes {
		blocks = append(blocks, randBytes(seed+uint64(k), n))
	}
	d, _ := closedContainer(t, s, blocks...)
	return d, blocks, logicalStream(t, s, d)
}

func logicalStream(t *testing.T, s *Store, d Descriptor) []byte {
	t.Helper()
	c, err := s.get(d.ID)
	if err != nil {
		t.Fatal(err)
	}
	var out []byte
	for n := 0; n < d.Chunks; n++ {
		b, err := os.ReadFile(filepath.Join(c.dir, chunkName(n)))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b...)
	}
	return out
}

func encode(t *testing.T, s *Store, id uint64) *Staged {
	t.Helper()
	st, err := s.Encode(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Error(err)
		}
	})
	return st
}

// importIndex exports staged index i with c and imports it into a new
// store, then waits for its scan.
func importIndex(t *testing.T, st *Staged, i int, c Compression) *Store {
	t.Helper()
	var buf bytes.Buffer
	if err := st.Export(context.Background(), i, c, &buf); err != nil {
		t.Fatal(err)
	}
	dst := newTestStore(t, Options{})
	d := st.Descriptor(i)
	if _, err := dst.Import(context.Background(), d.ID, d.Size(), c, &buf); err != nil {
		t.Fatalf("import index %d: %v", i, err)
	}
	got, err := dst.WaitScan(context.Background(), d.ID)
	if err != nil || got.State != Closed {
		t.Fatalf("index %d after its scan: %s %q, %v; want CLOSED", i, got.State, got.Reason, err)
	}
	return dst
}

func TestEncodeExportImport(t *testing.T) {
	ctx := context.Background()
	for k, tc := range ecCases {
		t.Run(tc.name, func(t *testing.T) {
			src := newTestStore(t, ecOpts)
			whole, blocks, stream := ecWhole(t, src, uint64(100*k), tc.blocks)
			st := encode(t, src, whole.ID)
			sc, _ := ec.ParseScheme(whole.Replication)
			l := ec.Layout{Scheme: sc, Size: whole.Bytes}
			if got, want := st.Indexes(), indexesOf(sc); !slices.Equal(got, want) {
				t.Fatalf("staged indexes %v, want %v", got, want)
			}
			stores := map[int]*Store{}
			var table ec.Table
			for _, i := range st.Indexes() {
				stores[i] = importIndex(t, st, i, Compressions[i%len(Compressions)])
				d, _ := stores[i].Descriptor(whole.ID)
				if d.ReplicaIndex != i || d.Bytes != l.IndexSize(i) || d.Chunks != 1 || d.Blocks != whole.Blocks ||
					d.ContainerChecksum != whole.ContainerChecksum || d.Replication != whole.Replication {
					t.Fatalf("index %d: %+v\nwhole %+v", i, d, whole)
				}
				info, err := stores[i].ECInfo(whole.ID)
				if err != nil {
					t.Fatal(err)
				}
				if info.Layout != l || info.Descriptor != d || len(info.Chunks) != whole.Chunks {
					t.Fatalf("index %d: ECInfo %+v, want layout %+v", i, info, l)
				}
				if i == 1 {
					table = info.Table
				} else if !info.Table.Equal(table) {
					t.Fatalf("index %d has another cell table than index 1", i)
				}
				// Cells, not blocks: an index replica serves none.
				if _, _, err := stores[i].OpenBlock(BlockIDOf(blocks[0])); !errors.Is(err, ErrBlockNotFound) {
					t.Fatalf("OpenBlock from index %d: %v, want ErrBlockNotFound", i, err)
				}
			}
			// The data cells, stripe by stripe, are the logical stream.
			var got []byte
			for s := int64(0); s < l.Stripes(); s++ {
				for i := 1; i <= sc.Data; i++ {
					cells, index, err := stores[i].ReadCells(whole.ID, s, 1)
					if err != nil || index != i {
						t.Fatalf("ReadCells(%d) of index %d: index %d, %v", s, i, index, err)
					}
					got = append(got, cells...)
				}
			}
			if !bytes.Equal(got, stream) {
				t.Fatalf("data cells: %d bytes, differ from the %d of the chunk files", len(got), len(stream))
			}
			// Every index's cells at once, and each block where LocateBlock says.
			for i, s := range stores {
				cells, _, err := s.ReadCells(whole.ID, 0, l.Stripes())
				if err != nil || int64(len(cells)) != l.IndexSize(i) {
					t.Fatalf("all cells of index %d: %d bytes, %v; want %d", i, len(cells), err, l.IndexSize(i))
				}
				for _, b := range blocks {
					off, size, err := s.LocateBlock(whole.ID, BlockIDOf(b))
					if err != nil || size != int64(len(b)) || !bytes.Equal(stream[off:off+size], b) {
						t.Fatalf("LocateBlock %s on index %d: %d+%d, %v", BlockIDOf(b), i, off, size, err)
					}
				}
			}
			_, size, err := stores[1].LocateBlock(whole.ID, BlockID{Sum: BlockIDOf(blocks[0]).Sum, Size: -1})
			if err != nil || size != int64(len(blocks[0])) {
				t.Fatalf("LocateBlock of any size: %d, %v", size, err)
			}
			if _, _, err := stores[1].LocateBlock(whole.ID, BlockIDOf([]byte("absent"))); !errors.Is(err, ErrBlockNotFound) {
				t.Fatalf("LocateBlock of an absent block: %v, want ErrBlockNotFound", err)
			}
			// A staged index exports as the adopted one would.
			if err := st.Close(); err != nil {
				t.Fatal(err)
			}
			if err := st.Export(ctx, 1, None, &bytes.Buffer{}); !errors.Is(err, ErrNotFound) {
				t.Fatalf("Export after Close: %v, want ErrNotFound", err)
			}
		})
	}
}

// The same staged index exports the same bytes as the Store's own Export
// of it once imported: one tarball format.
func TestStagedExportIsStoreExport(t *testing.T) {
	src := newTestStore(t, ecOpts)
	whole, _, _ := ecWhole(t, src, 1, []int{5000, 300})
	st := encode(t, src, whole.ID)
	for _, c := range []Compression{None, Zstd} {
		var staged bytes.Buffer
		if err := st.Export(context.Background(), 4, c, &staged); err != nil {
			t.Fatal(err)
		}
		dst := importIndex(t, st, 4, c)
		// The imported descriptor went through RECOVERING and back to
		// CLOSED: the same bytes, so the same tarball.
		if got := export(t, dst, whole.ID, c); !bytes.Equal(got, staged.Bytes()) {
			t.Fatalf("%s: Store.Export of the imported index differs from Staged.Export", c)
		}
	}
}

func TestEncodeRefuses(t *testing.T) {
	ctx := context.Background()
	s := newTestStore(t, ecOpts)
	d, _ := closedContainer(t, s, []byte("whole"))
	st := encode(t, s, d.ID)
	idx := importIndex(t, st, 2, None)
	rep, _, err := s.PutReplication(bytes.NewReader([]byte("replicated")), "replica:3")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CloseContainer(rep); err != nil {
		t.Fatal(err)
	}
	open, _, err := s.PutReplication(bytes.NewReader([]byte("open")), "ec:rs-3-2-1k")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		s    *Store
		id   uint64
		want error
	}{
		{"replica:3", s, rep, ErrNotEC},
		{"an index replica", idx, d.ID, ErrNotEC},
		{"OPEN", s, open, ErrNotClosed},
		{"absent", s, 99, ErrNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if st, err := tc.s.Encode(ctx, tc.id); !errors.Is(err, tc.want) {
				if st != nil {
					st.Close()
				}
				t.Fatalf("Encode: %v, want %v", err, tc.want)
			}
		})
	}
	// The readers' calls want an index replica.
	if _, _, err := s.ReadCells(d.ID, 0, 1); !errors.Is(err, ErrNotEC) {
		t.Errorf("ReadCells of a whole container: %v, want ErrNotEC", err)
	}
	if _, err := s.ECInfo(d.ID); !errors.Is(err, ErrNotEC) {
		t.Errorf("ECInfo of a whole container: %v, want ErrNotEC", err)
	}
	if _, _, err := s.OpenMeta(99); !errors.Is(err, ErrNotFound) {
		t.Errorf("OpenMeta of nothing: %v, want ErrNotFound", err)
	}
	for _, r := range [][2]int64{{-1, 1}, {0, 2}, {1, 1}, {0, -1}} {
		if _, _, err := idx.ReadCells(d.ID, r[0], r[1]); !errors.Is(err, ErrRange) {
			t.Errorf("ReadCells(%d, %d) of a 1-stripe index: %v, want ErrRange", r[0], r[1], err)
		}
	}
}

func TestReadCellsBounded(t *testing.T) {
	// 1 KiB cells: 64 Ki of them is the most one call returns.
	l := ec.Layout{Scheme: ec.Scheme{Data: 3, Parity: 2, Cell: 1 << 10}, Size: 3 << 30}
	x := &ecIndex{layout: l, table: ec.NewTable(ec.Layout{Scheme: l.Scheme}), chunks: []int64{l.Size}}
	s := newTestStore(t, ecOpts)
	c := &container{id: 5, vol: s.vols[0], dir: t.TempDir()}
	c.setDesc(Descriptor{ID: 5, State: Closed, ReplicaIndex: 1, Replication: "ec:rs-3-2-1k"})
	c.ecx.Store(x)
	s.register(c, 0)
	t.Cleanup(func() { s.forget(c) })
	if _, _, err := s.ReadCells(5, 0, MaxReadCells/1024+1); !errors.Is(err, ErrRange) {
		t.Fatalf("ReadCells beyond MaxReadCells: %v, want ErrRange", err)
	}
}

func TestECIndexVerify(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, dir string, d Descriptor)
		reason string
	}{
		{"cell flipped", func(t *testing.T, dir string, d Descriptor) {
			flipByte(t, filepath.Join(dir, chunkName(0)), 2<<10+5) // stripe 2
		}, "cell (stripe 2, index 2)"},
		{"db byte flipped", func(t *testing.T, dir string, d Descriptor) {
			flipByte(t, filepath.Join(dir, dbName), 4096+30)
		}, "index file"},
		{"chunk file cut", func(t *testing.T, dir string, d Descriptor) {
			if err := os.Truncate(filepath.Join(dir, chunkName(0)), d.Bytes-1); err != nil {
				t.Fatal(err)
			}
		}, "descriptor says"},
		{"table entry changed", func(t *testing.T, dir string, d Descriptor) {
			rewriteEC(t, dir, d, func(b *bolt.Bucket) {
				cells := bytes.Clone(b.Get(ecCellsKey))
				cells[8*(1*5+1)+1] ^= 1 // stripe 1, index 2
				b.Put(ecCellsKey, cells)
			})
		}, "cell table says"},
		{"layout of another scheme", func(t *testing.T, dir string, d Descriptor) {
			rewriteEC(t, dir, d, func(b *bolt.Bucket) {
				b.Put(ecLayoutKey, bytes.Replace(b.Get(ecLayoutKey), []byte("rs-3-2"), []byte("rs-3-1"), 1))
			})
		}, "ec bucket"},
		{"no ec bucket", func(t *testing.T, dir string, d Descriptor) {
			rewriteDB(t, dir, d, func(tx *bolt.Tx) { tx.DeleteBucket(ecBucket) })
		}, "no ec bucket"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := newTestStore(t, ecOpts)
			whole, _, _ := ecWhole(t, src, 9, []int{7000, 4000})
			st := encode(t, src, whole.ID)
			dst := importIndex(t, st, 2, None)
			c, _ := dst.get(whole.ID)
			if _, err := dst.ECInfo(whole.ID); err != nil {
				t.Fatal(err)
			}
			tc.damage(t, c.dir, *c.desc.Load())
			if d, err := readDescriptor(c.dir); err == nil {
				c.setDesc(d) // rewriteDB's, as a restart would read it
			}
			got, err := dst.Verify(ctx, whole.ID)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("reason: %s", got.Reason)
			if got.State != Unhealthy || !strings.Contains(got.Reason, tc.reason) {
				t.Fatalf("%s %q, want UNHEALTHY naming %q", got.State, got.Reason, tc.reason)
			}
			if _, _, err := dst.ReadCells(whole.ID, 0, 1); !errors.Is(err, ErrNotClosed) {
				t.Fatalf("ReadCells of an UNHEALTHY index: %v, want ErrNotClosed", err)
			}
		})
	}
}

// rewriteEC changes an index replica's ec bucket, and its descriptor's
// metadata size and checksum to match, so only the ec checks can tell.
func rewriteEC(t *testing.T, dir string, d Descriptor, change func(b *bolt.Bucket)) {
	t.Helper()
	rewriteDB(t, dir, d, func(tx *bolt.Tx) { change(tx.Bucket(ecBucket)) })
}

func rewriteDB(t *testing.T, dir string, d Descriptor, change func(tx *bolt.Tx)) {
	t.Helper()
	path := filepath.Join(dir, dbName)
	db, err := bolt.Open(path, 0o644, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error { change(tx); return nil }); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	n, sum, err := fileChecksum(path)
	if err != nil {
		t.Fatal(err)
	}
	d.MetadataBytes, d.MetadataChecksum = n, fmt.Sprintf("%016x", sum)
	if err := writeDescriptor(dir, &d, false); err != nil {
		t.Fatal(err)
	}
}

func TestEncodeOfRottenContainer(t *testing.T) {
	s := newTestStore(t, ecOpts)
	whole, _, _ := ecWhole(t, s, 3, []int{3000, 3000})
	c, _ := s.get(whole.ID)
	flipByte(t, filepath.Join(c.dir, chunkName(0)), 3010)
	if st, err := s.Encode(context.Background(), whole.ID); !errors.Is(err, ErrCorrupt) {
		if st != nil {
			st.Close()
		}
		t.Fatalf("Encode of a rotten container: %v, want ErrCorrupt", err)
	}
	// checkStore (cleanup) finds the staging directory empty and nothing
	// reserved; the container itself is for Verify to condemn.
	if _, err := s.Verify(context.Background(), whole.ID); err != nil {
		t.Fatal(err)
	}
}

func TestStagedClose(t *testing.T) {
	s := newTestStore(t, ecOpts)
	whole, _, _ := ecWhole(t, s, 4, []int{9000})
	st, err := s.Encode(context.Background(), whole.ID)
	if err != nil {
		t.Fatal(err)
	}
	v := s.Volumes()[0]
	if names := dirNames(t, filepath.Join(v.Path, stageDir)); len(names) != 1 {
		t.Fatalf("staging holds %v, want one directory", names)
	}
	var staged int64
	for _, i := range st.Indexes() {
		staged += st.Descriptor(i).Bytes
	}
	if v.Reserved < staged {
		t.Fatalf("%d bytes reserved for %d bytes of cells", v.Reserved, staged)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if names := dirNames(t, filepath.Join(v.Path, stageDir)); len(names) != 0 {
		t.Fatalf("staging holds %v after Close", names)
	}
	if r := s.Volumes()[0].Reserved; r != 0 {
		t.Fatalf("%d bytes still reserved after Close", r)
	}
	if _, err := st.Adopt(context.Background(), 1); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Adopt after Close: %v, want ErrNotFound", err)
	}
}

func TestAdopt(t *testing.T) {
	ctx := context.Background()
	s := newTestStore(t, ecOpts)
	whole, _, _ := ecWhole(t, s, 5, []int{4000, 2000})
	st := encode(t, s, whole.ID)
	if _, err := st.Adopt(ctx, 1); !errors.Is(err, ErrExists) {
		t.Fatalf("Adopt while the whole copy is here: %v, want ErrExists", err)
	}
	if err := s.Delete(whole.ID); err != nil {
		t.Fatal(err)
	}
	d, err := st.Adopt(ctx, 3)
	if err != nil || d.State != Recovering || d.ReplicaIndex != 3 {
		t.Fatalf("Adopt = %s index %d, %v; want RECOVERING index 3", d.State, d.ReplicaIndex, err)
	}
	if d, err = s.WaitScan(ctx, whole.ID); err != nil || d.State != Closed {
		t.Fatalf("adopted index after its scan: %s %q, %v", d.State, d.Reason, err)
	}
	for _, i := range []int{3, 4} {
		if _, err := st.Adopt(ctx, i); !errors.Is(err, ErrExists) {
			t.Fatalf("Adopt of index %d once 3 is here: %v, want ErrExists", i, err)
		}
	}
	if err := st.Export(ctx, 3, None, &bytes.Buffer{}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Export of an adopted index: %v, want ErrNotFound", err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	v := s.Volumes()[0]
	if v.Reserved != 0 || v.Containers != 1 || v.Used < d.Bytes {
		t.Fatalf("volume: %d reserved, %d containers, %d used", v.Reserved, v.Containers, v.Used)
	}
	// The adopted index survives the Staged and a restart.
	vol := v.Path
	s.Close()
	s2 := newTestStore(t, ecOpts, vol)
	if got, _ := s2.Descriptor(whole.ID); got.State != Closed || got.ReplicaIndex != 3 {
		t.Fatalf("after reopen: %s index %d", got.State, got.ReplicaIndex)
	}
	if _, _, err := s2.ReadCells(whole.ID, 0, 1); err != nil {
		t.Fatal(err)
	}
}

func TestRestartEmptiesStaging(t *testing.T) {
	vol := filepath.Join(t.TempDir(), "vol")
	s := newTestStore(t, ecOpts, vol)
	whole, _, _ := ecWhole(t, s, 6, []int{5000})
	if _, err := s.Encode(context.Background(), whole.ID); err != nil {
		t.Fatal(err)
	}
	s.crash() // with the Staged never closed
	if names := dirNames(t, filepath.Join(vol, stageDir)); len(names) != 1 {
		t.Fatalf("staging holds %v before the restart", names)
	}
	s2 := newTestStore(t, ecOpts, vol)
	if names := dirNames(t, filepath.Join(vol, stageDir)); len(names) != 0 {
		t.Fatalf("staging holds %v after the restart", names)
	}
	if got, _ := s2.Descriptor(whole.ID); got.State != Closed {
		t.Fatalf("whole copy after restart: %s", got.State)
	}
}

func TestOpenMeta(t *testing.T) {
	src := newTestStore(t, ecOpts)
	whole, _, _ := ecWhole(t, src, 7, []int{6000})
	st := encode(t, src, whole.ID)
	a, b := importIndex(t, st, 1, None), importIndex(t, st, 5, Gzip)
	var metas [][]byte
	for _, s := range []*Store{a, b} {
		rc, n, err := s.OpenMeta(whole.ID)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		_, err = buf.ReadFrom(rc)
		rc.Close()
		d, _ := s.Descriptor(whole.ID)
		if err != nil || int64(buf.Len()) != n || n != d.MetadataBytes {
			t.Fatalf("OpenMeta: %d bytes of %d, descriptor says %d, %v", buf.Len(), n, d.MetadataBytes, err)
		}
		metas = append(metas, buf.Bytes())
	}
	if !bytes.Equal(metas[0], metas[1]) {
		t.Fatal("two indexes' container.db differ")
	}
}

func TestECInfoOffset(t *testing.T) {
	e := ECInfo{Chunks: []int64{10, 0, 5}}
	for _, tc := range []struct {
		chunk int
		off   int64
		want  int64
		err   bool
	}{
		{0, 0, 0, false}, {0, 9, 9, false}, {1, 0, 10, false}, {2, 4, 14, false}, {2, 5, 15, false},
		{2, 6, 0, true}, {3, 0, 0, true}, {-1, 0, 0, true}, {0, -1, 0, true},
	} {
		got, err := e.Offset(tc.chunk, tc.off)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("Offset(%d, %d) = %d, %v; want %d (error %v)", tc.chunk, tc.off, got, err, tc.want, tc.err)
		}
	}
}

func TestECIndexDescriptorChecks(t *testing.T) {
	base := Descriptor{LayoutVersion: layoutVersion, ID: 1, State: Closed, ChecksumType: ChecksumType,
		ReplicaIndex: 2, Replication: "ec:rs-3-2-1k", Chunks: 1}
	for _, tc := range []struct {
		name   string
		mutate func(d *Descriptor)
		ok     bool
	}{
		{"good", func(d *Descriptor) {}, true},
		{"index beyond D+P", func(d *Descriptor) { d.ReplicaIndex = 6 }, false},
		{"index of replica:3", func(d *Descriptor) { d.Replication = "replica:3" }, false},
		{"two chunks", func(d *Descriptor) { d.Chunks = 2 }, false},
		{"OPEN", func(d *Descriptor) { d.State = Open }, false},
		{"cell ec cannot use", func(d *Descriptor) { d.Replication = "ec:rs-3-2-100000k" }, false},
		{"whole copy", func(d *Descriptor) { d.ReplicaIndex, d.Chunks = 0, 3 }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := base
			tc.mutate(&d)
			b, err := d.marshal()
			if err != nil {
				t.Fatal(err)
			}
			_, err = parseDescriptor(b)
			if (err == nil) != tc.ok {
				t.Fatalf("parseDescriptor: %v, want ok %v", err, tc.ok)
			}
		})
	}
}

// storeCells reads cells from the stores holding one index each.
type storeCells struct {
	id     uint64
	stores map[int]*Store
	fail   map[int]bool // indexes whose reads fail
}

func (sc storeCells) ReadCells(ctx context.Context, index int, first, n int64) ([]byte, error) {
	if sc.fail[index] {
		return nil, fmt.Errorf("index %d: node down", index)
	}
	s := sc.stores[index]
	if s == nil {
		return nil, fmt.Errorf("no store holds index %d", index)
	}
	b, got, err := s.ReadCells(sc.id, first, n)
	if err == nil && got != index {
		err = fmt.Errorf("store of index %d holds index %d", index, got)
	}
	return b, err
}

var _ ec.CellSource = storeCells{}

// ecCluster is a whole container encoded with rs-6-3-1k and each index
// imported into a store of its own, the staged originals kept.
type ecCluster struct {
	whole  Descriptor
	staged *Staged
	stores map[int]*Store
}

func newECCluster(t *testing.T, seed uint64, sizes []int) ecCluster {
	t.Helper()
	opts := ecOpts
	opts.Replication = "ec:rs-6-3-1k"
	src := newTestStore(t, opts)
	whole, _, _ := ecWhole(t, src, seed, sizes)
	st := encode(t, src, whole.ID)
	cl := ecCluster{whole: whole, staged: st, stores: map[int]*Store{}}
	for _, i := range st.Indexes() {
		cl.stores[i] = importIndex(t, st, i, None)
	}
	return cl
}

// spec asks for lost from the other indexes, the descriptor and the
// metadata taken from the first of them.
func (cl ecCluster) spec(t *testing.T, lost []int, fail map[int]bool) ReconstructSpec {
	t.Helper()
	sp := ReconstructSpec{ID: cl.whole.ID, Indexes: lost, Src: storeCells{id: cl.whole.ID, stores: cl.stores, fail: fail}}
	for i := 1; i <= 9; i++ {
		if !slices.Contains(lost, i) {
			sp.Avail = append(sp.Avail, i)
		}
	}
	from := cl.stores[sp.Avail[0]]
	sp.Descriptor, _ = from.Descriptor(cl.whole.ID)
	rc, _, err := from.OpenMeta(cl.whole.ID)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rc.Close() })
	sp.Meta = rc
	return sp
}

func TestReconstruct(t *testing.T) {
	ctx := context.Background()
	for k, tc := range []struct {
		name  string
		sizes []int
		lost  []int
	}{
		{"data cells", []int{40000, 3, 0, 9000}, []int{1, 2, 3}},
		{"parity cells", []int{40000, 3, 0, 9000}, []int{7, 8, 9}},
		{"mixed, one byte", []int{1}, []int{2, 5, 9}},
		{"mixed, short last stripe", []int{6<<10 + 1500}, []int{1, 6, 7}},
		{"one index", []int{12345}, []int{4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := newECCluster(t, uint64(10*k), tc.sizes)
			target := newTestStore(t, Options{})
			st, err := target.Reconstruct(ctx, cl.spec(t, tc.lost, nil))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			if got := st.Indexes(); !slices.Equal(got, slices.Sorted(slices.Values(tc.lost))) {
				t.Fatalf("staged %v, want %v", got, tc.lost)
			}
			for _, i := range tc.lost {
				// Byte for byte what Encode made, descriptor included.
				if got, want := st.Descriptor(i), cl.staged.Descriptor(i); got != want {
					t.Fatalf("index %d: descriptor %+v\nencoded %+v", i, got, want)
				}
				got, err := os.ReadFile(filepath.Join(st.indexDir(i), chunkName(0)))
				if err != nil {
					t.Fatal(err)
				}
				want, err := os.ReadFile(filepath.Join(cl.staged.indexDir(i), chunkName(0)))
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("index %d: reconstructed cells differ from the encoded ones", i)
				}
				importIndex(t, st, i, Snappy)
			}
			d, err := st.Adopt(ctx, tc.lost[0])
			if err != nil {
				t.Fatal(err)
			}
			if d, err = target.WaitScan(ctx, d.ID); err != nil || d.State != Closed || d.ReplicaIndex != tc.lost[0] {
				t.Fatalf("adopted: %s %q index %d, %v", d.State, d.Reason, d.ReplicaIndex, err)
			}
		})
	}
}

// corruptCells returns one index's cells with a byte flipped.
type corruptCells struct {
	storeCells
	bad int
}

func (c corruptCells) ReadCells(ctx context.Context, index int, first, n int64) ([]byte, error) {
	b, err := c.storeCells.ReadCells(ctx, index, first, n)
	if err == nil && index == c.bad && len(b) > 0 {
		b[len(b)/2] ^= 1
	}
	return b, err
}

func TestReconstructFails(t *testing.T) {
	ctx := context.Background()
	cl := newECCluster(t, 77, []int{30000, 5000})
	lost := []int{2, 4, 8}
	for _, tc := range []struct {
		name string
		sp   func(t *testing.T) ReconstructSpec
		want error
	}{
		{"a source down of exactly D", func(t *testing.T) ReconstructSpec {
			return cl.spec(t, lost, map[int]bool{6: true})
		}, ec.ErrTooFewCells},
		{"corrupt cells of exactly D", func(t *testing.T) ReconstructSpec {
			sp := cl.spec(t, lost, nil)
			sp.Src = corruptCells{sp.Src.(storeCells), 9}
			return sp
		}, ec.ErrTooFewCells},
		{"metadata of another size", func(t *testing.T) ReconstructSpec {
			sp := cl.spec(t, lost, nil)
			sp.Meta = bytes.NewReader([]byte("not a bbolt file"))
			return sp
		}, ErrCorrupt},
		{"metadata with a flipped byte", func(t *testing.T) ReconstructSpec {
			sp := cl.spec(t, lost, nil)
			var buf bytes.Buffer
			buf.ReadFrom(sp.Meta)
			b := buf.Bytes()
			b[5000] ^= 1
			sp.Meta = bytes.NewReader(b)
			return sp
		}, ErrCorrupt},
		{"fewer than D available", func(t *testing.T) ReconstructSpec {
			sp := cl.spec(t, lost, nil)
			sp.Avail = sp.Avail[:5]
			return sp
		}, ErrInvalid},
		{"an index both available and lost", func(t *testing.T) ReconstructSpec {
			sp := cl.spec(t, lost, nil)
			sp.Indexes = []int{2, sp.Avail[0]}
			return sp
		}, ErrInvalid},
		{"a whole copy's descriptor", func(t *testing.T) ReconstructSpec {
			sp := cl.spec(t, lost, nil)
			sp.Descriptor = cl.whole
			return sp
		}, ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target := newTestStore(t, Options{})
			st, err := target.Reconstruct(ctx, tc.sp(t))
			if !errors.Is(err, tc.want) {
				if st != nil {
					st.Close()
				}
				t.Fatalf("Reconstruct: %v, want %v", err, tc.want)
			}
			t.Logf("error: %v", err)
			// A failed reconstruction leaves nothing: no staged files,
			// nothing reserved, no container (checkStore checks too).
			v := target.Volumes()[0]
			if got := tree(t, v.Path); !sameStrings(got, emptyVolumeTree) || v.Reserved != 0 || len(target.List()) != 0 {
				t.Fatalf("after a failed reconstruction: %v, %d reserved, %d containers", got, v.Reserved, len(target.List()))
			}
		})
	}
	// One bad source among more than D is made up for.
	for name, sp := range map[string]ReconstructSpec{
		"down": cl.spec(t, []int{2, 4}, map[int]bool{6: true}),
		"corrupt": func() ReconstructSpec {
			sp := cl.spec(t, []int{2, 4}, nil)
			sp.Src = corruptCells{sp.Src.(storeCells), 9}
			return sp
		}(),
	} {
		target := newTestStore(t, Options{})
		st, err := target.Reconstruct(ctx, sp)
		if err != nil {
			t.Fatalf("one source %s of D+1: %v", name, err)
		}
		st.Close()
	}
}

func TestEncodeCancelled(t *testing.T) {
	s := newTestStore(t, ecOpts)
	whole, _, _ := ecWhole(t, s, 8, []int{20000})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if st, err := s.Encode(ctx, whole.ID); !errors.Is(err, context.Canceled) {
		if st != nil {
			st.Close()
		}
		t.Fatalf("Encode with a cancelled context: %v, want context.Canceled", err)
	}
	// checkStore (cleanup): nothing staged, nothing reserved.
}

// A container beyond one batch of stripes (ec works 4 MiB per index at a
// time): every staged index passes the scan, and its data cells
// interleaved are the chunk files.
func TestEncodeBeyondABatch(t *testing.T) {
	opts := ecOpts
	opts.ChunkSize = 1 << 20
	s := newTestStore(t, opts)
	var sizes []int
	for n := 0; n < 13; n++ {
		sizes = append(sizes, 1<<20-n*1000)
	}
	whole, _, stream := ecWhole(t, s, 11, sizes)
	st := encode(t, s, whole.ID)
	sc, _ := ec.ParseScheme(whole.Replication)
	l := ec.Layout{Scheme: sc, Size: whole.Bytes}
	files := map[int][]byte{}
	for _, i := range st.Indexes() {
		if _, reason, err := check(context.Background(), st.indexDir(i), st.Descriptor(i)); err != nil || reason != "" {
			t.Fatalf("staged index %d: %s %v", i, reason, err)
		}
		b, err := os.ReadFile(filepath.Join(st.indexDir(i), chunkName(0)))
		if err != nil {
			t.Fatal(err)
		}
		files[i] = b
	}
	var got []byte
	for s := int64(0); s < l.Stripes(); s++ {
		for i := 1; i <= sc.Data; i++ {
			got = append(got, files[i][s*int64(l.Cell):][:l.CellLen(s, i)]...)
		}
	}
	if !bytes.Equal(got, stream) {
		t.Fatalf("data cells of %d bytes differ from the %d of the chunk files", len(got), len(stream))
	}
}

func TestEncodeNoSpace(t *testing.T) {
	opts := ecOpts
	opts.Statfs = func(string) (int64, int64, error) { return 1 << 30, 64 << 10, nil }
	s := newTestStore(t, opts)
	whole, _, _ := ecWhole(t, s, 12, []int{20000})
	if st, err := s.Encode(context.Background(), whole.ID); !errors.Is(err, ErrNoSpace) {
		if st != nil {
			st.Close()
		}
		t.Fatalf("Encode on a volume with 64 KiB free: %v, want ErrNoSpace", err)
	}
}
