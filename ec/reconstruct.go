package ec

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/cespare/xxhash/v2"
	"github.com/klauspost/reedsolomon"
)

// CellSource reads the cells of one container's indexes, wherever they
// are (a local index replica, a node over gRPC, a test's buffers).
type CellSource interface {
	// ReadCells returns the cells of index from stripe first to
	// first+n-1, back to back, each at its length in the layout. An
	// error makes Reconstruct and Reader take another index. The
	// caller only reads the slice and keeps it no longer than the
	// stripes it asked for take to decode. ReadCells is called from
	// several goroutines at once: up to D reads are in flight.
	ReadCells(ctx context.Context, index int, first, n int64) ([]byte, error)
}

var (
	// ErrChecksum is wrapped by the error of a cell whose xxh64 is not
	// the table's.
	ErrChecksum = errors.New("cell checksum mismatch")
	// ErrTooFewCells is wrapped by Reconstruct's and Reader's errors
	// when fewer than D good cells of a stripe can be had: nothing is
	// decoded from less.
	ErrTooFewCells = errors.New("too few good cells to decode")
)

// Reconstruct writes the indexes in missing, cell by cell, to w (w[k]
// takes missing[k]; a nil writer is skipped), from the indexes in avail
// read through src: D of them per batch, in avail's order, each cell
// checked against t; an index whose read fails or whose cell fails its
// checksum is dropped and the next one read instead. It fails, having
// written part of w, when fewer than D good cells of some stripe can be
// had (ErrTooFewCells). Every cell it writes has the table's checksum.
func Reconstruct(ctx context.Context, l Layout, t Table, src CellSource, avail, missing []int, w []io.Writer) error {
	if len(w) != len(missing) {
		return fmt.Errorf("reconstruct: %d writers for %d missing indexes", len(w), len(missing))
	}
	if err := checkIndexes(l, avail, missing); err != nil {
		return fmt.Errorf("reconstruct: %w", err)
	}
	s, err := newSource(l, t, src, avail)
	if err != nil {
		return fmt.Errorf("reconstruct: %w", err)
	}
	if len(missing) == 0 {
		return nil
	}
	out := make([][]byte, len(missing))
	defer func() {
		for _, b := range out {
			putBuf(b)
		}
	}()
	for first, bs := int64(0), l.batchStripes(); first < l.Stripes(); first += bs {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("reconstruct: %w", err)
		}
		n := min(bs, l.Stripes()-first)
		runs, err := s.decode(ctx, first, n, missing, nil, out)
		if err != nil {
			return fmt.Errorf("reconstruct: %w", err)
		}
		for k, wk := range w {
			out[k] = runs[k]
			if wk == nil {
				continue
			}
			if _, err := wk.Write(runs[k]); err != nil {
				return fmt.Errorf("reconstruct: write index %d: %w", missing[k], err)
			}
		}
	}
	return nil
}

// checkIndexes refuses an index out of 1…D+P, one named twice, or one
// both available and missing.
func checkIndexes(l Layout, avail, missing []int) error {
	seen := map[int]string{}
	for _, list := range []struct {
		name string
		idx  []int
	}{{"available", avail}, {"missing", missing}} {
		for _, i := range list.idx {
			if i < 1 || i > l.Total() {
				return fmt.Errorf("%s index %d: want 1…%d", list.name, i, l.Total())
			}
			if was, ok := seen[i]; ok {
				return fmt.Errorf("index %d named twice (%s and %s)", i, was, list.name)
			}
			seen[i] = list.name
		}
	}
	return nil
}

// source reads checked cells of avail's indexes and decodes the rest.
// An index that fails once is dropped for the source's life.
type source struct {
	l     Layout
	t     Table
	src   CellSource
	rs    reedsolomon.Encoder
	avail []int

	mu      sync.Mutex
	dropped map[int]error // index → why it is no longer read
}

func newSource(l Layout, t Table, src CellSource, avail []int) (*source, error) {
	rs, err := l.coder()
	if err != nil {
		return nil, err
	}
	if t.total != l.Total() || int64(len(t.sums)) != l.Stripes()*int64(l.Total()) {
		return nil, fmt.Errorf("cell table of %d sums for %d indexes: want %d stripes of %d", len(t.sums), t.total, l.Stripes(), l.Total())
	}
	return &source{l: l, t: t, src: src, rs: rs, avail: slices.Clone(avail), dropped: map[int]error{}}, nil
}

// usable reports whether index is available and not dropped.
func (s *source) usable(index int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, bad := s.dropped[index]
	return !bad && slices.Contains(s.avail, index)
}

func (s *source) drop(index int, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.dropped[index]; !ok {
		s.dropped[index] = err
	}
}

// why lists the dropped indexes and what dropped them, for an error.
func (s *source) why() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.dropped) == 0 {
		return "none dropped"
	}
	idx := make([]int, 0, len(s.dropped))
	for i := range s.dropped {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	var b strings.Builder
	for k, i := range idx {
		if k > 0 {
			b.WriteString("; ")
		}
		b.WriteString(s.dropped[i].Error())
	}
	return b.String()
}

// fetch reads index's cells of stripes first…first+n-1 and checks their
// length and each cell's checksum; an index that fails is dropped.
func (s *source) fetch(ctx context.Context, index int, first, n int64) ([]byte, error) {
	run, err := s.src.ReadCells(ctx, index, first, n)
	if err == nil {
		err = s.check(index, first, n, run)
	} else {
		err = fmt.Errorf("index %d: read stripes %d…%d: %w", index, first, first+n-1, err)
	}
	if err != nil {
		// A read cut short by the caller says nothing of the index.
		if ctx.Err() == nil {
			s.drop(index, err)
		}
		return nil, err
	}
	return run, nil
}

// check compares a run of index's cells with the layout and the table.
func (s *source) check(index int, first, n int64, run []byte) error {
	if want := s.l.cellsLen(index, first, n); int64(len(run)) != want {
		return fmt.Errorf("index %d: stripes %d…%d: %d bytes, want %d", index, first, first+n-1, len(run), want)
	}
	off := 0
	for st := first; st < first+n; st++ {
		c := run[off:][:s.l.CellLen(st, index)]
		if xxhash.Sum64(c) != s.t.Sum(st, index) {
			return fmt.Errorf("index %d: stripe %d: %w", index, st, ErrChecksum)
		}
		off += len(c)
	}
	return nil
}

// decode rebuilds the cells of the indexes in want for stripes
// first…first+n-1 and returns one run per index, back to back at their
// real lengths, in out's buffers where they are large enough (else in
// buffers of getBuf's). It takes D good indexes: first those of have
// (index → run of exactly these stripes, already checked), then
// avail's in order, read with fetch, as many at once as are still
// needed.
func (s *source) decode(ctx context.Context, first, n int64, want []int, have map[int][]byte, out [][]byte) ([][]byte, error) {
	size := n * int64(s.l.Cell)
	shards := make([][]byte, s.l.Total())
	var pads [][]byte
	defer func() {
		for _, p := range pads {
			putBuf(p)
		}
	}()
	got := 0
	use := func(index int, run []byte) {
		if int64(len(run)) < size {
			// The container's last stripe: reedsolomon wants every
			// shard as long, so the short cells get their zeros here.
			p := getBuf(size)
			clear(p[copy(p, run):])
			pads = append(pads, p)
			run = p
		}
		shards[index-1] = run
		got++
	}
	var cands []int
	for _, i := range s.avail {
		if slices.Contains(want, i) {
			continue
		}
		if run, ok := have[i]; ok && got < s.l.Data {
			use(i, run)
		} else if !ok {
			cands = append(cands, i)
		}
	}
	for got < s.l.Data && len(cands) > 0 {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var round []int
		for len(round) < s.l.Data-got && len(cands) > 0 {
			if i := cands[0]; s.usable(i) {
				round = append(round, i)
			}
			cands = cands[1:]
		}
		runs := s.fetchAll(ctx, round, func(int) (int64, int64) { return first, n })
		for k, i := range round {
			if runs[k].ok {
				use(i, runs[k].b)
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if got < s.l.Data {
		return nil, fmt.Errorf("stripes %d…%d: %d good indexes of the %d needed, of %v available (%s): %w",
			first, first+n-1, got, s.l.Data, s.avail, s.why(), ErrTooFewCells)
	}
	required := make([]bool, s.l.Total())
	for k, i := range want {
		var buf []byte
		if k < len(out) {
			buf = out[k]
		}
		if int64(cap(buf)) < size {
			buf = getBuf(size)
		}
		shards[i-1] = buf[:0:size]
		required[i-1] = true
	}
	if err := s.rs.ReconstructSome(shards, required); err != nil {
		return nil, fmt.Errorf("stripes %d…%d: %w", first, first+n-1, err)
	}
	runs := make([][]byte, len(want))
	for k, i := range want {
		runs[k] = shards[i-1][:s.l.cellsLen(i, first, n)]
	}
	// Good inputs cannot decode to a bad cell, short of a wrong table
	// or a bug; either way nothing unchecked leaves here.
	errs := make([]error, len(want))
	parallel(len(want), 0, func(k int) { errs[k] = s.check(want[k], first, n, runs[k]) })
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("decoded %w", err)
	}
	return runs, nil
}

// fetched is one index's run, if its read and its cells were good.
type fetched struct {
	b  []byte
	ok bool
}

// fetchAll fetches the indexes at once, index k's stripes given by
// span(k) (first, count); those that fail are dropped.
func (s *source) fetchAll(ctx context.Context, indexes []int, span func(k int) (int64, int64)) []fetched {
	runs := make([]fetched, len(indexes))
	parallel(len(indexes), len(indexes), func(k int) {
		first, n := span(k)
		b, err := s.fetch(ctx, indexes[k], first, n)
		runs[k] = fetched{b, err == nil}
	})
	return runs
}
