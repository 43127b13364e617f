package container

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/cespare/xxhash/v2"
	"github.com/cmfs-project/cmfs/ec"
	"github.com/cmfs-project/cmfs/internal/checksum"
	bolt "go.etcd.io/bbolt"
)

// An EC index replica's container.db holds, besides "blocks" (the whole
// container's records, which the container checksum covers), bucket "ec":
// "layout" → ecLayout as JSON, "cells" → ec.Table.MarshalBinary.
var (
	ecBucket    = []byte("ec")
	ecLayoutKey = []byte("layout")
	ecCellsKey  = []byte("cells")
)

// ecLayout is the "layout" value: the scheme, the whole container's
// logical size (its chunk files back to back) and each chunk file's size.
type ecLayout struct {
	Scheme string  `json:"scheme"`
	Size   int64   `json:"size"`
	Chunks []int64 `json:"chunks"`
}

// MaxReadCells bounds what one ReadCells returns.
const MaxReadCells = 64 << 20

// ECInfo is what a local EC index replica says of its container.
type ECInfo struct {
	// Descriptor is the index replica's own.
	Descriptor Descriptor
	// Layout is the scheme and the container's logical size.
	Layout ec.Layout
	// Table is every cell's xxh64, every index's.
	Table ec.Table
	// Chunks are the sizes of the whole container's chunk files, whose
	// concatenation is the logical stream.
	Chunks []int64
}

// Offset returns the logical offset of byte off of the whole
// container's chunk file chunk: the sizes of the chunk files before it,
// plus off. A block's (chunk, offset) in container.db gives its place in
// the stream this way.
func (e ECInfo) Offset(chunk int, off int64) (int64, error) {
	if chunk < 0 || chunk >= len(e.Chunks) || off < 0 || off > e.Chunks[chunk] {
		return 0, fmt.Errorf("offset %d of chunk %d: the container has %d chunks: %w", off, chunk, len(e.Chunks), ErrRange)
	}
	var o int64
	for _, n := range e.Chunks[:chunk] {
		o += n
	}
	return o + off, nil
}

// ecIndex is what an index replica's container.db says beyond a
// container's checks; its container keeps it once read.
type ecIndex struct {
	layout ec.Layout
	table  ec.Table
	chunks []int64
	blocks map[uint64][]record
}

// readECIndex reads the "ec" bucket of the index at path and checks it
// against d and the "blocks" records recs (see parseECIndex). Its errors
// wrap ErrCorrupt.
func readECIndex(path string, d Descriptor, recs []record) (*ecIndex, error) {
	var lraw, craw []byte
	err := viewIndex(path, func(tx *bolt.Tx) error {
		b := tx.Bucket(ecBucket)
		if b == nil {
			return errors.New("no ec bucket")
		}
		lraw, craw = bytes.Clone(b.Get(ecLayoutKey)), bytes.Clone(b.Get(ecCellsKey))
		return nil
	})
	if err != nil {
		return nil, err
	}
	x, err := parseECIndex(d, recs, lraw, craw)
	if err != nil {
		return nil, fmt.Errorf("index %s: ec bucket: %v: %w", path, err, ErrCorrupt)
	}
	return x, nil
}

// parseECIndex decodes an "ec" bucket and checks it: its scheme is the
// descriptor's, its chunk sizes add up to its size, index
// d.ReplicaIndex is d.Bytes long in that layout, the table has one sum
// per cell, and the blocks tile the chunk files exactly. Sizes are
// checked before anything is allocated for them.
func parseECIndex(d Descriptor, recs []record, lraw, craw []byte) (*ecIndex, error) {
	var lj ecLayout
	dec := json.NewDecoder(bytes.NewReader(lraw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&lj); err != nil {
		return nil, fmt.Errorf("layout: %v", err)
	}
	sc, err := ec.ParseScheme(lj.Scheme)
	if err != nil {
		return nil, err
	}
	if want, err := ec.ParseScheme(d.Replication); err != nil || sc != want {
		return nil, fmt.Errorf("scheme %s, descriptor says %s", sc, d.Replication)
	}
	if len(lj.Chunks) > maxChunks {
		return nil, fmt.Errorf("%d chunks", len(lj.Chunks))
	}
	var total int64
	for n, size := range lj.Chunks {
		if size < 0 || total+size < total {
			return nil, fmt.Errorf("chunk %d of %d bytes", n, size)
		}
		total += size
	}
	if total != lj.Size {
		return nil, fmt.Errorf("chunks of %d bytes in all, layout says %d", total, lj.Size)
	}
	l := ec.Layout{Scheme: sc, Size: lj.Size}
	if d.ReplicaIndex < 1 || d.ReplicaIndex > l.Total() {
		return nil, fmt.Errorf("replica index %d of %d", d.ReplicaIndex, l.Total())
	}
	if n := l.IndexSize(d.ReplicaIndex); n != d.Bytes {
		return nil, fmt.Errorf("index %d holds %d bytes of %d, descriptor says %d", d.ReplicaIndex, n, lj.Size, d.Bytes)
	}
	per := 8 * int64(l.Total())
	if int64(len(craw))%per != 0 || int64(len(craw))/per != l.Stripes() {
		return nil, fmt.Errorf("cell table of %d bytes for %d stripes of %d cells", len(craw), l.Stripes(), l.Total())
	}
	t, err := ec.ParseTable(l, craw)
	if err != nil {
		return nil, err
	}
	byChunk := make([][]record, len(lj.Chunks))
	blocks := make(map[uint64][]record, len(recs))
	for _, r := range recs {
		if r.chunk >= len(lj.Chunks) {
			return nil, fmt.Errorf("block %s in chunk %d of %d", r.id, r.chunk, len(lj.Chunks))
		}
		byChunk[r.chunk] = append(byChunk[r.chunk], r)
		blocks[r.id.Sum] = append(blocks[r.id.Sum], r)
	}
	for n, rs := range byChunk {
		sortByOffset(rs)
		if reason := tiles(chunkName(n), rs, lj.Chunks[n]); reason != "" {
			return nil, errors.New(reason)
		}
	}
	return &ecIndex{layout: l, table: t, chunks: lj.Chunks, blocks: blocks}, nil
}

// sortByOffset sorts a chunk's records by offset; an empty block may
// share its offset with the next one.
func sortByOffset(rs []record) {
	slices.SortFunc(rs, func(a, b record) int { return cmp.Or(cmp.Compare(a.off, b.off), cmp.Compare(a.id.Size, b.id.Size)) })
}

// marshal returns the "layout" and "cells" values.
func (x *ecIndex) marshal() (layout, cells []byte, err error) {
	if layout, err = json.Marshal(ecLayout{Scheme: x.layout.Scheme.String(), Size: x.layout.Size, Chunks: x.chunks}); err != nil {
		return nil, nil, err
	}
	cells, err = x.table.MarshalBinary()
	return layout, cells, err
}

// checkECIndex checks an index replica beyond the checks every container
// gets: its "ec" bucket (readECIndex), its one chunk file's size, and
// every cell's xxh64 against the table. Like check, it returns a reason
// for what is wrong, and an error only when ctx ends.
func checkECIndex(ctx context.Context, dir string, d Descriptor, recs []record) (string, error) {
	x, err := readECIndex(filepath.Join(dir, dbName), d, recs)
	if err != nil {
		return err.Error(), nil
	}
	name := chunkName(0)
	f, err := os.Open(filepath.Join(dir, name))
	if err != nil {
		return fmt.Sprintf("%s: %v", name, err), nil
	}
	defer f.Close()
	fi, err := f.Stat()
	switch {
	case err != nil:
		return fmt.Sprintf("%s: %v", name, err), nil
	case fi.Size() != d.Bytes:
		return fmt.Sprintf("%s: %d bytes, descriptor says %d", name, fi.Size(), d.Bytes), nil
	}
	return checkFile(ctx, f, name, x.cellSums(d.ReplicaIndex, name), make([]byte, copyBufSize))
}

// cellSums checks index's cells, back to back, against the table.
func (x *ecIndex) cellSums(index int, name string) *sumChecker {
	l, t := x.layout, x.table
	return newSumChecker(xxhash.New(), int(l.Stripes()),
		func(k int) (int64, uint64) { return int64(l.CellLen(int64(k), index)), t.Sum(int64(k), index) },
		func(k int, got uint64) string {
			return fmt.Sprintf("%s: cell (stripe %d, index %d) at %d: xxh64 %s, cell table says %s",
				name, k, index, int64(k)*int64(l.Cell), checksum.Format(got), checksum.Format(t.Sum(int64(k), index)))
		},
		func(k int) string { return fmt.Sprintf("%s: ends inside cell (stripe %d, index %d)", name, k, index) })
}

// ecIndexOf returns container id, a CLOSED index replica, and its EC
// index, read from its container.db the first time.
func (s *Store) ecIndexOf(id uint64) (*container, *ecIndex, error) {
	c, err := s.get(id)
	if err != nil {
		return nil, nil, err
	}
	d := *c.desc.Load()
	switch {
	case d.ReplicaIndex == 0:
		return nil, nil, fmt.Errorf("replica index 0 (%s): %w", d.Replication, ErrNotEC)
	case d.State != Closed:
		return nil, nil, fmt.Errorf("state %s: %w", d.State, ErrNotClosed)
	}
	if x := c.ecx.Load(); x != nil {
		return c, x, nil
	}
	path := filepath.Join(c.dir, dbName)
	recs, _, err := readIndex(path)
	if err != nil {
		return nil, nil, err
	}
	x, err := readECIndex(path, d, recs)
	if err != nil {
		return nil, nil, err
	}
	c.ecx.Store(x)
	return c, x, nil
}

// ECInfo returns the layout, cell table and chunk sizes of the CLOSED
// EC index replica id. Errors: ErrNotFound, ErrNotEC (not an index
// replica), ErrNotClosed, ErrCorrupt, ErrClosed.
func (s *Store) ECInfo(id uint64) (ECInfo, error) {
	c, x, err := s.ecIndexOf(id)
	if err != nil {
		return ECInfo{}, fmt.Errorf("ec info of container %d: %w", id, err)
	}
	return ECInfo{Descriptor: *c.desc.Load(), Layout: x.layout, Table: x.table, Chunks: slices.Clone(x.chunks)}, nil
}

// ReadCells returns the cells of stripes first … first+n-1 that the
// CLOSED EC index replica id holds, back to back, each at its length in
// the layout, and its index. The bytes are as on disk: the caller checks
// them against the table (ECInfo), as ec.Reconstruct does. Errors:
// ErrNotFound, ErrNotEC, ErrNotClosed, ErrRange (stripes the layout does
// not have, or more than MaxReadCells bytes), ErrCorrupt, ErrClosed, the
// file's.
func (s *Store) ReadCells(id uint64, first, n int64) ([]byte, int, error) {
	b, index, err := s.readCells(id, first, n)
	if err != nil {
		return nil, 0, fmt.Errorf("read cells %d+%d of container %d: %w", first, n, id, err)
	}
	return b, index, nil
}

func (s *Store) readCells(id uint64, first, n int64) ([]byte, int, error) {
	c, x, err := s.ecIndexOf(id)
	if err != nil {
		return nil, 0, err
	}
	l, index := x.layout, c.desc.Load().ReplicaIndex
	stripes := l.Stripes()
	switch {
	case first < 0 || n < 0 || first > stripes || n > stripes-first:
		return nil, 0, fmt.Errorf("the layout has %d stripes: %w", stripes, ErrRange)
	case n > MaxReadCells/int64(l.Cell):
		return nil, 0, fmt.Errorf("%d cells of %d bytes, beyond %d: %w", n, l.Cell, MaxReadCells, ErrRange)
	case n == 0:
		return []byte{}, index, nil
	}
	start, end := first*int64(l.Cell), (first+n)*int64(l.Cell)
	if first+n == stripes {
		end = l.IndexSize(index)
	}
	c.rw.RLock()
	defer c.rw.RUnlock()
	f, err := os.Open(filepath.Join(c.dir, chunkName(0)))
	if errors.Is(err, os.ErrNotExist) {
		return nil, 0, ErrNotFound // deleted meanwhile
	}
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	b := make([]byte, end-start)
	if _, err := f.ReadAt(b, start); err != nil {
		if err == io.EOF {
			err = fmt.Errorf("%s: shorter than its descriptor says: %w", f.Name(), ErrCorrupt)
		}
		return nil, 0, err
	}
	return b, index, nil
}

// LocateBlock returns where block b (b.Size -1: any size with that sum)
// is in the logical stream of the container whose CLOSED EC index
// replica id this node holds, and its size. Errors: ErrNotFound,
// ErrNotEC, ErrNotClosed, ErrBlockNotFound (the container has no such
// block), ErrCorrupt, ErrClosed.
func (s *Store) LocateBlock(id uint64, b BlockID) (off, size int64, err error) {
	_, x, err := s.ecIndexOf(id)
	if err != nil {
		return 0, 0, fmt.Errorf("locate block %s in container %d: %w", b, id, err)
	}
	for _, r := range x.blocks[b.Sum] {
		if b.Size < 0 || r.id.Size == b.Size {
			off, err := ECInfo{Chunks: x.chunks}.Offset(r.chunk, r.off)
			return off, r.id.Size, err
		}
	}
	return 0, 0, fmt.Errorf("locate block %s in container %d: %w", b, id, ErrBlockNotFound)
}

// OpenMeta opens the metadata/container.db of the CLOSED EC index
// replica id and returns it with its size: the bytes a node
// reconstructing another index of the container takes as its own
// (ReconstructSpec.Meta). Errors: ErrNotFound, ErrNotEC, ErrNotClosed,
// ErrCorrupt, ErrClosed, the file's.
func (s *Store) OpenMeta(id uint64) (io.ReadCloser, int64, error) {
	c, _, err := s.ecIndexOf(id)
	if err != nil {
		return nil, 0, fmt.Errorf("open metadata of container %d: %w", id, err)
	}
	f, err := os.Open(filepath.Join(c.dir, dbName))
	if err != nil {
		return nil, 0, fmt.Errorf("open metadata of container %d: %w", id, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("open metadata of container %d: %w", id, err)
	}
	return f, fi.Size(), nil
}
