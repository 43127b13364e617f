package ec

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/klauspost/reedsolomon"
)

var testSchemes = []Scheme{
	{Data: 3, Parity: 2, Cell: 1 << 10},
	{Data: 6, Parity: 3, Cell: 4 << 10},
	{Data: 10, Parity: 4, Cell: 1 << 10},
	{Data: 6, Parity: 3, Cell: 1 << 20},
}

// testSizes are the sizes every scheme is tried with: the edges of a
// cell, a stripe and a batch.
func testSizes(sc Scheme) []int64 {
	c, sb := int64(sc.Cell), sc.StripeBytes()
	batch := sc.batchStripes() * sb
	return []int64{0, 1, c - 1, c, c + 1, sb - 1, sb, sb + 1, 3*sb + 2*c + 7, batch - 1, batch + c/2 + 1}
}

func sizeName(sc Scheme, n int64) string { return fmt.Sprintf("%s/%d", sc, n) }

// subsets returns every subset of 1…total with at most k members.
func subsets(total, k int) [][]int {
	var out [][]int
	var rec func(from int, cur []int)
	rec = func(from int, cur []int) {
		out = append(out, slices.Clone(cur))
		if len(cur) == k {
			return
		}
		for i := from; i <= total; i++ {
			rec(i+1, append(cur, i))
		}
	}
	rec(1, nil)
	return out
}

func without(total int, lost []int) []int {
	var avail []int
	for i := 1; i <= total; i++ {
		if !slices.Contains(lost, i) {
			avail = append(avail, i)
		}
	}
	return avail
}

// reconstruct runs Reconstruct of missing from avail and returns what
// it wrote per missing index.
func reconstruct(l Layout, tab Table, src CellSource, avail, missing []int) ([][]byte, error) {
	bufs := make([]bytes.Buffer, len(missing))
	w := make([]io.Writer, len(missing))
	for k := range w {
		w[k] = &bufs[k]
	}
	err := Reconstruct(context.Background(), l, tab, src, avail, missing, w)
	out := make([][]byte, len(missing))
	for k := range out {
		out[k] = bufs[k].Bytes()
	}
	return out, err
}

func TestEncodeLayout(t *testing.T) {
	for _, sc := range testSchemes {
		for _, size := range testSizes(sc) {
			t.Run(sizeName(sc, size), func(t *testing.T) {
				l := Layout{Scheme: sc, Size: size}
				data := randomBytes(uint64(size), size)
				files, tab := encodeAll(t, l, data)
				for i, f := range files {
					if got, want := int64(len(f)), l.IndexSize(i+1); got != want {
						t.Fatalf("index %d: %d bytes, want %d", i+1, got, want)
					}
				}
				// The data cells, stripe by stripe, are the data.
				var joined []byte
				for st := range l.Stripes() {
					for i := 1; i <= sc.Data; i++ {
						joined = append(joined, files[i-1][st*int64(sc.Cell):][:l.CellLen(st, i)]...)
					}
				}
				if !bytes.Equal(joined, data) {
					t.Fatalf("data cells joined: %d bytes differ from the %d written", len(joined), len(data))
				}
				// Each stripe, padded, is a codeword of reedsolomon's
				// own, and every cell has its sum in the table.
				rs, err := reedsolomon.New(sc.Data, sc.Parity)
				if err != nil {
					t.Fatal(err)
				}
				shards := make([][]byte, sc.Total())
				for i := range shards {
					shards[i] = make([]byte, sc.Cell)
				}
				for st := range l.Stripes() {
					for i := range shards {
						clear(shards[i][copy(shards[i], files[i][st*int64(sc.Cell):][:l.CellLen(st, i+1)]):])
					}
					if ok, err := rs.Verify(shards); !ok || err != nil {
						t.Fatalf("stripe %d: not a reedsolomon codeword (%v)", st, err)
					}
				}
				s, err := newSource(l, tab, newMemSource(l, files), nil)
				if err != nil {
					t.Fatal(err)
				}
				for i := 1; i <= sc.Total(); i++ {
					if err := s.check(i, 0, l.Stripes(), files[i-1]); err != nil {
						t.Fatalf("index %d against the table: %v", i, err)
					}
				}
			})
		}
	}
}

func TestEncodeShortInput(t *testing.T) {
	l := Layout{Scheme: testSchemes[0], Size: 5000}
	w := make([]io.Writer, l.Total())
	_, err := Encode(l, bytes.NewReader(make([]byte, 4999)), w)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("encode of 4999 bytes for 5000: %v, want io.ErrUnexpectedEOF", err)
	}
	if _, err := Encode(l, bytes.NewReader(nil), w[:2]); err == nil {
		t.Fatal("encode with 2 writers for 5 indexes: no error")
	}
}

// TestReconstructEveryLoss loses every choice of up to P indexes (a
// sample of them for rs-10-4 and 1 MiB cells) and rebuilds them.
func TestReconstructEveryLoss(t *testing.T) {
	for _, sc := range testSchemes {
		for _, size := range testSizes(sc) {
			t.Run(sizeName(sc, size), func(t *testing.T) {
				l := Layout{Scheme: sc, Size: size}
				files, tab := encodeAll(t, l, randomBytes(uint64(size)+1, size))
				losses := subsets(sc.Total(), sc.Parity)
				big := size > 4*sc.StripeBytes()
				if sc.Total() > 9 || sc.Cell > 64<<10 || big {
					r := rand.New(rand.NewPCG(uint64(size), 7))
					r.Shuffle(len(losses), func(a, b int) { losses[a], losses[b] = losses[b], losses[a] })
					losses = losses[:4]
					// Always the worst: the first P data indexes.
					losses = append(losses, seq(1, sc.Parity))
				}
				for _, lost := range losses {
					src := newMemSource(l, files)
					for _, i := range lost {
						src.lose(i)
					}
					got, err := reconstruct(l, tab, src, without(sc.Total(), lost), lost)
					if err != nil {
						t.Fatalf("lost %v: %v", lost, err)
					}
					for k, i := range lost {
						if !bytes.Equal(got[k], files[i-1]) {
							t.Fatalf("lost %v: index %d rebuilt as %d bytes that differ from its %d", lost, i, len(got[k]), len(files[i-1]))
						}
					}
					batches := int((l.Stripes() + l.batchStripes() - 1) / l.batchStripes())
					for i := 1; i <= sc.Total(); i++ {
						if n := src.reads(i); n > batches {
							t.Fatalf("lost %v: index %d read %d times for %d batches", lost, i, n, batches)
						}
					}
				}
			})
		}
	}
}

// TestFullBatches crosses a batch boundary of the real size with
// rs-6-3-1024k: 4 stripes of 6 MiB a batch.
func TestFullBatches(t *testing.T) {
	withBatch(t, defaultBatchBytes)
	sc := DefaultScheme
	if sc.batchStripes() != 4 {
		t.Fatalf("%d stripes a batch, want 4", sc.batchStripes())
	}
	l := Layout{Scheme: sc, Size: 4*sc.StripeBytes() + 3*int64(sc.Cell) + 1}
	data := randomBytes(11, l.Size)
	files, tab := encodeAll(t, l, data)
	src := newMemSource(l, files)
	lost := []int{1, 4, 8}
	for _, i := range lost {
		src.lose(i)
	}
	got, err := reconstruct(l, tab, src, without(sc.Total(), lost), lost)
	if err != nil {
		t.Fatal(err)
	}
	for k, i := range lost {
		if !bytes.Equal(got[k], files[i-1]) {
			t.Fatalf("index %d rebuilt as %d bytes that differ from its %d", i, len(got[k]), len(files[i-1]))
		}
	}
	reads := 0
	for _, i := range without(sc.Total(), lost) {
		reads += src.reads(i)
	}
	if reads != 2*sc.Data {
		t.Fatalf("%d reads of cells, want D for each of the 2 batches: %d", reads, 2*sc.Data)
	}
	r := NewReader(l, tab, src, without(sc.Total(), nil))
	off := 3*sc.StripeBytes() + 100
	p := make([]byte, l.Size-off)
	if n, err := r.ReadAt(context.Background(), p, off); n != len(p) || err != nil {
		t.Fatalf("read across the batch boundary: %d, %v", n, err)
	}
	if !bytes.Equal(p, data[off:]) {
		t.Fatal("degraded read across the batch boundary: bytes differ")
	}
	if r.Degraded() != 2 {
		t.Fatalf("Degraded() %d, want 2 stripes", r.Degraded())
	}
}

func seq(from, to int) []int {
	var s []int
	for i := from; i <= to; i++ {
		s = append(s, i)
	}
	return s
}

// TestReconstructBadCells gives Reconstruct every index but the
// missing one, some of them failing or corrupt: up to P bad in all it
// rebuilds the index; more, it fails with ErrTooFewCells having written
// only true cells.
func TestReconstructBadCells(t *testing.T) {
	sc := Scheme{Data: 3, Parity: 2, Cell: 1 << 10}
	l := Layout{Scheme: sc, Size: 3*sc.batchStripes()*sc.StripeBytes() + 100}
	last, mid := l.Stripes()-1, l.Stripes()/2
	tests := []struct {
		name    string
		lost    []int            // read fails
		flipped map[int][2]int64 // index → {stripe, byte in cell}
		missing []int
		ok      bool
		wrote   int64 // stripes written before the failure
	}{
		{name: "one flipped", flipped: map[int][2]int64{2: {5, 17}}, missing: []int{1}, ok: true},
		{name: "flipped in the last stripe", flipped: map[int][2]int64{4: {last, 0}}, missing: []int{5}, ok: true},
		{name: "lost and flipped", lost: []int{3}, flipped: map[int][2]int64{2: {0, 0}}, missing: []int{1}, ok: false},
		{name: "flipped and missing P", flipped: map[int][2]int64{1: {mid, 3}}, missing: []int{2}, ok: true},
		{name: "two flipped, one missing", flipped: map[int][2]int64{1: {mid, 3}, 4: {2, 2}}, missing: []int{2}, ok: false,
			wrote: sc.batchStripes()},
		{name: "P missing, one flipped in the second batch", flipped: map[int][2]int64{3: {sc.batchStripes() + 1, 1000}},
			missing: []int{1, 5}, ok: false, wrote: sc.batchStripes()},
	}
	data := randomBytes(3, l.Size)
	files, tab := encodeAll(t, l, data)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := newMemSource(l, files)
			for _, i := range tt.lost {
				src.lose(i)
			}
			for i, at := range tt.flipped {
				src.flip(i, at[0], int(at[1]))
			}
			got, err := reconstruct(l, tab, src, without(sc.Total(), tt.missing), tt.missing)
			if tt.ok {
				if err != nil {
					t.Fatalf("reconstruct %v: %v", tt.missing, err)
				}
			} else if !errors.Is(err, ErrTooFewCells) {
				t.Fatalf("reconstruct %v: %v, want ErrTooFewCells", tt.missing, err)
			}
			for k, i := range tt.missing {
				if tt.ok && !bytes.Equal(got[k], files[i-1]) {
					t.Fatalf("index %d: rebuilt bytes differ", i)
				}
				// Nothing invented: what was written is a prefix of
				// the true index.
				if !bytes.HasPrefix(files[i-1], got[k]) {
					t.Fatalf("index %d: %d bytes written that are not the index's", i, len(got[k]))
				}
				if want := tt.wrote * int64(sc.Cell); !tt.ok && int64(len(got[k])) != want {
					t.Fatalf("index %d: %d bytes written before the failure, want %d", i, len(got[k]), want)
				}
			}
			if !tt.ok && strings.Contains(err.Error(), "\n") {
				t.Fatalf("error of more than one line: %q", err)
			}
		})
	}
}

func TestReconstructRefuses(t *testing.T) {
	sc := Scheme{Data: 3, Parity: 2, Cell: 1 << 10}
	l := Layout{Scheme: sc, Size: 10000}
	files, tab := encodeAll(t, l, randomBytes(9, l.Size))
	src := newMemSource(l, files)
	one := []io.Writer{io.Discard}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name           string
		ctx            context.Context
		tab            Table
		avail, missing []int
		w              []io.Writer
		want           error // nil: any error
	}{
		{name: "writers", avail: []int{1, 2, 3}, missing: []int{4}, w: nil},
		{name: "index 0", avail: []int{0, 2, 3}, missing: []int{4}, w: one},
		{name: "index past P", avail: []int{1, 2, 3}, missing: []int{6}, w: one},
		{name: "twice", avail: []int{1, 2, 2}, missing: []int{4}, w: one},
		{name: "missing and available", avail: []int{1, 2, 3, 4}, missing: []int{4}, w: one},
		{name: "too few", avail: []int{1, 2}, missing: []int{4}, w: one, want: ErrTooFewCells},
		{name: "wrong table", tab: NewTable(Layout{Scheme: sc, Size: 1}), avail: []int{1, 2, 3}, missing: []int{4}, w: one},
		{name: "cancelled", ctx: cancelled, avail: []int{1, 2, 3}, missing: []int{4}, w: one, want: context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, tb := tt.ctx, tt.tab
			if ctx == nil {
				ctx = context.Background()
			}
			if tb.sums == nil {
				tb = tab
			}
			err := Reconstruct(ctx, l, tb, src, tt.avail, tt.missing, tt.w)
			if err == nil || tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want an error (%v)", err, tt.want)
			}
		})
	}
}

func TestReader(t *testing.T) {
	for _, sc := range testSchemes {
		size, reads := 3*sc.StripeBytes()+int64(sc.Cell)/3+1, 20
		if sc.Cell < 64<<10 {
			size, reads = 3*sc.batchStripes()*sc.StripeBytes()+3*int64(sc.Cell)+11, 50
		}
		l := Layout{Scheme: sc, Size: size}
		data := randomBytes(uint64(sc.Data), size)
		files, tab := encodeAll(t, l, data)
		cases := []struct {
			name      string
			lost      []int
			flipped   []int // a byte of each cell of these indexes
			degrades  bool  // some read must decode
			tooFew    bool
			avoidData bool // no index read but data ones
		}{
			{name: "healthy", avoidData: true},
			{name: "parity lost", lost: seq(sc.Data+1, sc.Total()), avoidData: true},
			{name: "one data lost", lost: []int{2}, degrades: true},
			{name: "P data lost", lost: seq(1, sc.Parity), degrades: true},
			{name: "data corrupt", flipped: []int{1}, degrades: true},
			{name: "P bad, lost and corrupt", lost: seq(sc.Data, sc.Data+sc.Parity-2), flipped: []int{1}, degrades: true},
			{name: "P+1 data lost", lost: seq(1, sc.Parity+1), tooFew: true},
		}
		for _, tc := range cases {
			t.Run(fmt.Sprintf("%s/%s", sc, tc.name), func(t *testing.T) {
				src := newMemSource(l, files)
				for _, i := range tc.lost {
					src.lose(i)
				}
				for _, i := range tc.flipped {
					for st := range l.Stripes() {
						if l.CellLen(st, i) > 0 {
							src.flip(i, st, l.CellLen(st, i)/2)
						}
					}
				}
				r := NewReader(l, tab, src, without(sc.Total(), nil))
				if r.Size() != size {
					t.Fatalf("Size %d, want %d", r.Size(), size)
				}
				rng := rand.New(rand.NewPCG(uint64(size), 1))
				sawTooFew := false
				for k := range reads {
					off := rng.Int64N(size + 10)
					n := rng.Int64N(min(size, 2*sc.StripeBytes()) + 1)
					switch k {
					case 0:
						off, n = 0, size // all of it
					case 1:
						off, n = size-5, 50 // across the end
					case 2:
						off, n = 7, 0
					}
					p := make([]byte, n)
					got, err := r.ReadAt(context.Background(), p, off)
					if tc.tooFew && err != nil && !errors.Is(err, io.EOF) {
						if !errors.Is(err, ErrTooFewCells) {
							t.Fatalf("read %d at %d: %v, want ErrTooFewCells", n, off, err)
						}
						sawTooFew = true
						continue
					}
					want := data[min(off, size):min(off+n, size)]
					wantErr := error(nil)
					if int64(len(want)) < n {
						wantErr = io.EOF
					}
					if got != len(want) || !errors.Is(err, wantErr) || err != nil && wantErr == nil {
						t.Fatalf("read %d at %d of %d: %d, %v; want %d, %v", n, off, size, got, err, len(want), wantErr)
					}
					if !bytes.Equal(p[:got], want) {
						t.Fatalf("read %d at %d: bytes differ", n, off)
					}
				}
				if tc.tooFew && !sawTooFew {
					t.Fatal("P+1 data indexes lost: every read succeeded")
				}
				if tc.degrades != (r.Degraded() > 0) {
					t.Fatalf("Degraded() %d; want a degraded read: %v", r.Degraded(), tc.degrades)
				}
				if tc.avoidData {
					for i := sc.Data + 1; i <= sc.Total(); i++ {
						if n := src.reads(i); n > 0 && !slices.Contains(tc.lost, i) {
							t.Fatalf("healthy read read parity index %d %d times", i, n)
						}
					}
				}
			})
		}
	}
}

// TestReaderReadsOnlyWhatItNeeds: bytes within one cell take one read
// of one index.
func TestReaderReadsOnlyWhatItNeeds(t *testing.T) {
	sc := Scheme{Data: 6, Parity: 3, Cell: 4 << 10}
	l := Layout{Scheme: sc, Size: 10 * sc.StripeBytes()}
	data := randomBytes(5, l.Size)
	files, tab := encodeAll(t, l, data)
	src := newMemSource(l, files)
	r := NewReader(l, tab, src, seq(1, sc.Total()))
	off := 3*sc.StripeBytes() + 2*int64(sc.Cell) + 100 // stripe 3, index 3
	p := make([]byte, 1000)
	if n, err := r.ReadAt(context.Background(), p, off); n != len(p) || err != nil {
		t.Fatalf("read: %d, %v", n, err)
	}
	if !bytes.Equal(p, data[off:][:len(p)]) {
		t.Fatal("bytes differ")
	}
	for i := 1; i <= sc.Total(); i++ {
		want := 0
		if i == 3 {
			want = 1
		}
		if got := src.reads(i); got != want {
			t.Fatalf("index %d read %d times, want %d", i, got, want)
		}
	}
}

func TestReaderRefuses(t *testing.T) {
	sc := Scheme{Data: 3, Parity: 2, Cell: 1 << 10}
	l := Layout{Scheme: sc, Size: 5000}
	files, tab := encodeAll(t, l, randomBytes(1, l.Size))
	src := newMemSource(l, files)
	p := make([]byte, 10)
	if _, err := NewReader(l, tab, src, []int{1, 9}).ReadAt(context.Background(), p, 0); err == nil {
		t.Fatal("reader with index 9 of 5: no error")
	}
	if _, err := NewReader(l, Table{}, src, []int{1, 2, 3}).ReadAt(context.Background(), p, 0); err == nil {
		t.Fatal("reader with an empty table: no error")
	}
	if _, err := NewReader(l, tab, src, []int{1, 2, 3}).ReadAt(context.Background(), p, -1); err == nil {
		t.Fatal("read at -1: no error")
	}
}

func TestParseScheme(t *testing.T) {
	good := []struct {
		in   string
		want Scheme
	}{
		{"ec:rs-6-3-1024k", DefaultScheme},
		{"rs-3-2-1024k", Scheme{Data: 3, Parity: 2, Cell: 1 << 20}},
		{"ec:rs-10-4-1024k", Scheme{Data: 10, Parity: 4, Cell: 1 << 20}},
		{"ec:rs-6-3-4k", Scheme{Data: 6, Parity: 3, Cell: 4 << 10}},
	}
	for _, tt := range good {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseScheme(tt.in)
			if err != nil || got != tt.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tt.want)
			}
			if again, err := ParseScheme(got.String()); err != nil || again != got {
				t.Fatalf("%q parses as %+v, %v", got.String(), again, err)
			}
		})
	}
	for _, in := range []string{"", "ec:", "ec:rs", "rs-6-3", "ec:rs-6-3-1024", "ec:rs-6-3-1mb", "ec:xor-6-3-1024k",
		"ec:rs-0-3-1024k", "ec:rs-6-0-1024k", "ec:rs-6-3-0k", "ec:rs-6--3-1024k", "ec:rs-6-3-1024k-1",
		"ec:rs-200-100-1024k", "ec:rs-6-3-65537k", "ec:rs--6-3-1024k", "replica:3", " ec:rs-6-3-1024k", "ec:rs-6-3-1024K"} {
		t.Run("refuse "+in, func(t *testing.T) {
			_, err := ParseScheme(in)
			if !errors.Is(err, ErrScheme) {
				t.Fatalf("got %v, want ErrScheme", err)
			}
			if msg := err.Error(); strings.Contains(msg, "\n") || !strings.Contains(msg, fmt.Sprintf("%q", in)) {
				t.Fatalf("error %q: want one line naming the input", msg)
			}
		})
	}
}

func TestTableMarshal(t *testing.T) {
	for _, sc := range testSchemes[:3] {
		for _, size := range []int64{0, 1, 3*sc.StripeBytes() + 5} {
			t.Run(sizeName(sc, size), func(t *testing.T) {
				l := Layout{Scheme: sc, Size: size}
				_, tab := encodeAll(t, l, randomBytes(2, size))
				b, err := tab.MarshalBinary()
				if err != nil {
					t.Fatal(err)
				}
				got, err := ParseTable(l, b)
				if err != nil || !got.Equal(tab) {
					t.Fatalf("round trip: %v, equal %v", err, got.Equal(tab))
				}
				if _, err := ParseTable(l, append(b, 0)); err == nil {
					t.Fatal("table one byte too long: no error")
				}
				if size > 0 {
					b[3] ^= 1
					if got, _ := ParseTable(l, b); got.Equal(tab) {
						t.Fatal("a flipped bit: tables still equal")
					}
				}
			})
		}
	}
}

// TestReaderConcurrent reads from several goroutines at once, one data
// index lost, so that the race detector sees the shared state.
func TestReaderConcurrent(t *testing.T) {
	sc := Scheme{Data: 3, Parity: 2, Cell: 1 << 10}
	l := Layout{Scheme: sc, Size: 40*sc.StripeBytes() + 77}
	data := randomBytes(8, l.Size)
	files, tab := encodeAll(t, l, data)
	src := newMemSource(l, files)
	src.flip(2, 7, 5)
	r := NewReader(l, tab, src, seq(1, sc.Total()))
	errs := make(chan error, 4)
	for g := range 4 {
		go func() {
			rng := rand.New(rand.NewPCG(uint64(g), 2))
			for range 50 {
				off := rng.Int64N(l.Size)
				p := make([]byte, rng.Int64N(l.Size-off)+1)
				if n, err := r.ReadAt(context.Background(), p, off); n != len(p) || err != nil || !bytes.Equal(p, data[off:][:n]) {
					errs <- fmt.Errorf("read %d at %d: %d, %v (bytes equal: %v)", len(p), off, n, err, bytes.Equal(p[:n], data[off:][:n]))
					return
				}
			}
			errs <- nil
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if r.Degraded() == 0 {
		t.Fatal("index 2 corrupt: no degraded read")
	}
}

// ctxSource fails every read whose context is done, as a remote
// source would.
type ctxSource struct{ CellSource }

func (c ctxSource) ReadCells(ctx context.Context, index int, first, n int64) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return c.CellSource.ReadCells(ctx, index, first, n)
}

// TestReaderCancelKeepsIndexes: reads cut short by the caller do not
// drop the indexes they were reading.
func TestReaderCancelKeepsIndexes(t *testing.T) {
	sc := Scheme{Data: 3, Parity: 2, Cell: 1 << 10}
	l := Layout{Scheme: sc, Size: 20 * sc.StripeBytes()}
	data := randomBytes(4, l.Size)
	files, tab := encodeAll(t, l, data)
	r := NewReader(l, tab, ctxSource{newMemSource(l, files)}, seq(1, sc.Total()))
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	p := make([]byte, l.Size)
	if _, err := r.ReadAt(cancelled, p, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("read with a cancelled context: %v, want context.Canceled", err)
	}
	if n, err := r.ReadAt(context.Background(), p, 0); n != len(p) || err != nil || !bytes.Equal(p, data) {
		t.Fatalf("read after: %d, %v", n, err)
	}
	if r.Degraded() != 0 {
		t.Fatalf("Degraded() %d after a cancelled read: indexes were dropped", r.Degraded())
	}
	var w bytes.Buffer
	err := Reconstruct(cancelled, l, tab, ctxSource{newMemSource(l, files)}, seq(1, 4), []int{5}, []io.Writer{&w})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("reconstruct with a cancelled context: %v", err)
	}
}
