package ec

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"
)

// Reader reads a container's logical bytes from its index replicas: the
// data cells that hold them, each checked against the table, and only
// where a data index is unavailable, fails or has a bad cell, D good
// cells of those stripes, decoded (a degraded read). An index that
// fails once is not read again by this Reader. A Reader is safe for
// concurrent use.
type Reader struct {
	s        *source
	err      error // why the Reader cannot read at all
	degraded atomic.Int64
}

// NewReader returns a Reader of l's bytes through src, from the indexes
// in avail (data or parity, in the order degraded reads should try
// them). A bad layout, table or index list makes every ReadAt fail.
func NewReader(l Layout, t Table, src CellSource, avail []int) *Reader {
	s, err := newSource(l, t, src, avail)
	if err == nil {
		err = checkIndexes(l, avail, nil)
	}
	if err != nil {
		return &Reader{err: fmt.Errorf("ec reader: %w", err)}
	}
	return &Reader{s: s}
}

// Size is the logical size: what a ReadAt can return.
func (r *Reader) Size() int64 {
	if r.s == nil {
		return 0
	}
	return r.s.l.Size
}

// Degraded is how many stripes this Reader has decoded so far because a
// data cell was missing or bad.
func (r *Reader) Degraded() int64 { return r.degraded.Load() }

// ReadAt reads len(p) bytes from logical offset off, as io.ReaderAt
// does: fewer only at the end, with io.EOF. An error wrapping
// ErrTooFewCells means some stripe had fewer than D good cells.
func (r *Reader) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	if off < 0 {
		return 0, fmt.Errorf("ec read at %d: negative offset", off)
	}
	l := r.s.l
	if off >= l.Size {
		return 0, io.EOF
	}
	end := min(off+int64(len(p)), l.Size)
	sb, bs := l.StripeBytes(), l.batchStripes()
	for pos := off; pos < end; {
		first := pos / sb
		last := min((end-1)/sb, first+bs-1)
		stop := min(end, (last+1)*sb)
		if err := r.read(ctx, p[pos-off:stop-off], pos, first, last-first+1); err != nil {
			return int(pos - off), fmt.Errorf("ec read %d bytes at %d: %w", len(p), off, err)
		}
		pos = stop
	}
	if n := int(end - off); n < len(p) {
		return n, io.EOF
	}
	return len(p), nil
}

// span is the stripes [first, end) of one data index that hold some of
// a read's bytes.
type span struct{ first, end int64 }

// read fills dst with the bytes from pos on, all within stripes
// first…first+n-1.
func (r *Reader) read(ctx context.Context, dst []byte, pos, first, n int64) error {
	l, s := r.s.l, r.s
	end := pos + int64(len(dst))
	spans := make([]span, l.Data+1)
	runs := make(map[int][]byte, l.Data)
	var bad, read []int
	worst := span{first + n, first}
	for i := 1; i <= l.Data; i++ {
		spans[i] = r.span(i, pos, end, first, n)
		if sp := spans[i]; sp.first < sp.end {
			if s.usable(i) {
				read = append(read, i)
			} else {
				bad = append(bad, i)
			}
		}
	}
	got := s.fetchAll(ctx, read, func(k int) (int64, int64) {
		sp := spans[read[k]]
		return sp.first, sp.end - sp.first
	})
	if err := ctx.Err(); err != nil {
		return err
	}
	for k, i := range read {
		if got[k].ok {
			runs[i] = got[k].b
		} else {
			bad = append(bad, i)
		}
	}
	for _, i := range bad {
		worst = span{min(worst.first, spans[i].first), max(worst.end, spans[i].end)}
	}
	if len(bad) > 0 {
		dn := worst.end - worst.first
		have := map[int][]byte{}
		for i, run := range runs {
			if sp := spans[i]; sp.first <= worst.first && worst.end <= sp.end {
				off := (worst.first - sp.first) * int64(l.Cell)
				have[i] = run[off:][:l.cellsLen(i, worst.first, dn)]
			}
		}
		decoded, err := s.decode(ctx, worst.first, dn, bad, have, nil)
		if err != nil {
			return err
		}
		defer func() {
			for _, b := range decoded {
				putBuf(b)
			}
		}()
		r.degraded.Add(dn)
		for k, i := range bad {
			runs[i] = decoded[k]
			spans[i].first = worst.first
		}
	}
	for i, run := range runs {
		r.place(dst, pos, i, spans[i].first, run)
	}
	return nil
}

// span returns the stripes among first…first+n-1 whose cell of data
// index i holds some of the bytes [pos, end).
func (r *Reader) span(i int, pos, end, first, n int64) span {
	l := r.s.l
	start := func(st int64) int64 { return st*l.StripeBytes() + int64(i-1)*int64(l.Cell) }
	sp := span{first, first + n}
	if start(first)+int64(l.CellLen(first, i)) <= pos {
		sp.first++
	}
	if last := first + n - 1; start(last) >= end {
		sp.end--
	}
	return sp
}

// place copies from run, data index i's cells from stripe runFirst on,
// what falls in dst, the bytes from pos on.
func (r *Reader) place(dst []byte, pos int64, i int, runFirst int64, run []byte) {
	l := r.s.l
	end := pos + int64(len(dst))
	for k := int64(0); k*int64(l.Cell) < int64(len(run)); k++ {
		st := runFirst + k
		cs := st*l.StripeBytes() + int64(i-1)*int64(l.Cell)
		cell := run[k*int64(l.Cell):][:min(int64(l.Cell), int64(len(run))-k*int64(l.Cell))]
		lo, hi := max(cs, pos), min(cs+int64(len(cell)), end)
		if lo < hi {
			copy(dst[lo-pos:hi-pos], cell[lo-cs:hi-cs])
		}
	}
}
