package ec

import (
	"cmp"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"
	"github.com/klauspost/reedsolomon"
)

// defaultBatchBytes bounds what one index holds in memory in a batch of
// stripes: (D+P)*defaultBatchBytes a batch, 36 MiB for rs-6-3.
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
//
// Two batches are in memory: while one goroutine codes, checksums and
// writes a batch, the caller's reads the next from r.
func Encode(l Layout, r io.Reader, w []io.Writer) (Table, error) {
	rs, err := l.coder()
	if err != nil {
		return Table{}, err
	}
	if len(w) != l.Total() {
		return Table{}, fmt.Errorf("encode: %d writers for %d indexes", len(w), l.Total())
	}
	t := NewTable(l)
	nb := min(2, (l.Stripes()+l.batchStripes()-1)/l.batchStripes())
	free := make(chan *batch, nb)
	for range nb {
		free <- newBatch(l)
	}
	defer func() {
		for range nb {
			(<-free).free()
		}
	}()
	work := make(chan *batch)
	done := make(chan error, 1)
	var failed atomic.Bool
	go func() {
		var err error
		for b := range work {
			if err == nil {
				if err = encodeBatch(rs, b, t, w); err != nil {
					failed.Store(true)
				}
			}
			free <- b
		}
		done <- err
	}()
	var rerr error
	for first, bs := int64(0), l.batchStripes(); first < l.Stripes() && !failed.Load(); first += bs {
		b := <-free
		b.at(first)
		if rerr = readBatch(r, b, t); rerr != nil {
			free <- b
			break
		}
		work <- b
	}
	close(work)
	if err := cmp.Or(<-done, rerr); err != nil {
		return Table{}, fmt.Errorf("encode: %w", err)
	}
	return t, nil
}

// readBatch reads the data cells of b's stripes, pads the short ones
// with zeros and checksums each into t while it is still in the cache.
func readBatch(r io.Reader, b *batch, t Table) error {
	l := b.l
	for j := range b.n {
		for i := 1; i <= l.Data; i++ {
			c := b.cells[i-1][j*int64(l.Cell):][:l.Cell]
			n := l.CellLen(b.first+j, i)
			if _, err := io.ReadFull(r, c[:n]); err != nil {
				return fmt.Errorf("read stripe %d cell %d: %w", b.first+j, i, err)
			}
			clear(c[n:])
			t.set(b.first+j, i, xxhash.Sum64(c[:n]))
		}
	}
	return nil
}

// encodeBatch computes b's parity cells and their checksums into t, and
// writes the batch's cells to w.
func encodeBatch(rs reedsolomon.Encoder, b *batch, t Table, w []io.Writer) error {
	// Reed-Solomon works byte by byte across the shards, so the
	// batch's cells of each index, back to back, encode as one shard:
	// one call per batch, not one per stripe.
	shards := make([][]byte, len(b.cells))
	for i := range shards {
		shards[i] = b.cells[i][:b.n*int64(b.l.Cell)]
	}
	if err := rs.Encode(shards); err != nil {
		return fmt.Errorf("stripes %d…%d: %w", b.first, b.first+b.n-1, err)
	}
	parallel(b.l.Parity, 0, func(k int) {
		for j := range b.n {
			i := b.l.Data + k + 1
			t.set(b.first+j, i, xxhash.Sum64(b.cell(j, i)))
		}
	})
	for i, wi := range w {
		if wi == nil {
			continue
		}
		if _, err := wi.Write(b.run(i + 1)); err != nil {
			return fmt.Errorf("write index %d: %w", i+1, err)
		}
	}
	return nil
}
