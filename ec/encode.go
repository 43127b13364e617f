package ec

import (
	"fmt"
	"io"

	"github.com/cespare/xxhash/v2"
	"github.com/klauspost/reedsolomon"
)

// defaultBatchBytes bounds what one index holds in memory in a batch of
// stripes: (D+P)*defaultBatchBytes in all, 36 MiB for rs-6-3.
const defaultBatchBytes = 4 << 20

// batchBytes is defaultBatchBytes but in tests, which shrink it to
// cross batch boundaries with small containers.
var batchBytes int64 = defaultBatchBytes

// batchStripes is how many stripes a batch holds.
func (sc Scheme) batchStripes() int64 { return max(1, batchBytes/int64(sc.Cell)) }

func (sc Scheme) coder() (reedsolomon.Encoder, error) {
	if err := sc.Validate(); err != nil {
		return nil, err
	}
	return reedsolomon.New(sc.Data, sc.Parity)
}

// batch is the cells of up to batchStripes stripes, one buffer per
// index: cell (first+j, i) is cells[i-1][j*Cell:][:CellLen].
type batch struct {
	l     Layout
	first int64
	n     int64 // stripes in the batch
	cells [][]byte
}

func newBatch(l Layout) *batch {
	b := &batch{l: l, cells: make([][]byte, l.Total())}
	k := min(l.batchStripes(), max(1, l.Stripes()))
	for i := range b.cells {
		b.cells[i] = getBuf(k * int64(l.Cell))
	}
	return b
}

// free gives the batch's buffers back.
func (b *batch) free() {
	for i, c := range b.cells {
		putBuf(c)
		b.cells[i] = nil
	}
}

// at moves the batch to the stripes from first on.
func (b *batch) at(first int64) {
	b.first = first
	b.n = min(int64(len(b.cells[0])/b.l.Cell), b.l.Stripes()-first)
}

// cell returns cell (first+j, index) at its real length.
func (b *batch) cell(j int64, index int) []byte {
	return b.cells[index-1][j*int64(b.l.Cell):][:b.l.CellLen(b.first+j, index)]
}

// run returns index's cells of the batch, back to back: all full but
// the container's last.
func (b *batch) run(index int) []byte {
	return b.cells[index-1][:b.l.cellsLen(index, b.first, b.n)]
}

// Encode reads l.Size bytes from r, stripes them and writes index i's
// cells, back to back, to w[i-1] (a nil writer is skipped; w has one
// entry per index). It returns every cell's checksum. r must hold at
// least l.Size bytes; what follows is not read.
func Encode(l Layout, r io.Reader, w []io.Writer) (Table, error) {
	rs, err := l.coder()
	if err != nil {
		return Table{}, err
	}
	if len(w) != l.Total() {
		return Table{}, fmt.Errorf("encode: %d writers for %d indexes", len(w), l.Total())
	}
	t := NewTable(l)
	b := newBatch(l)
	defer b.free()
	shards := make([][]byte, l.Total())
	for first := int64(0); first < l.Stripes(); first += b.n {
		b.at(first)
		for j := range b.n {
			for i := 1; i <= l.Data; i++ {
				c := b.cells[i-1][j*int64(l.Cell):][:l.Cell]
				n := l.CellLen(first+j, i)
				if _, err := io.ReadFull(r, c[:n]); err != nil {
					return Table{}, fmt.Errorf("encode: read stripe %d cell %d: %w", first+j, i, err)
				}
				clear(c[n:])
			}
		}
		// Reed-Solomon works byte by byte across the shards, so the
		// batch's cells of each index, back to back, encode as one
		// shard: one call per batch, not one per stripe.
		for i := range shards {
			shards[i] = b.cells[i][:b.n*int64(l.Cell)]
		}
		if err := rs.Encode(shards); err != nil {
			return Table{}, fmt.Errorf("encode: stripes %d…%d: %w", first, first+b.n-1, err)
		}
		parallel(l.Total(), 0, func(k int) {
			for j := range b.n {
				t.set(first+j, k+1, xxhash.Sum64(b.cell(j, k+1)))
			}
		})
		for i, wi := range w {
			if wi == nil {
				continue
			}
			if _, err := wi.Write(b.run(i + 1)); err != nil {
				return Table{}, fmt.Errorf("encode: write index %d: %w", i+1, err)
			}
		}
	}
	return t, nil
}
