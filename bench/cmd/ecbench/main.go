// Command ecbench measures package ec on one buffer of random bytes per
// scheme, each against baselines timed side by side in the same run:
//
//	go run ./bench/cmd/ecbench [-mib 256] [-schemes ec:rs-6-3-1024k,ec:rs-3-2-1024k,ec:rs-10-4-1024k] [-reps 3]
//
// The codec table, per scheme:
//   - encode: ec.Encode (streaming from an io.Reader, batch by batch,
//     every cell checksummed, all D+P indexes written to io.Writers)
//     against reedsolomon's own encoders on the same bytes split into D
//     shards: its StreamEncoder (io.Readers of the D shards in, a copy
//     as ec's; no checksums) and its Encode in place (no copy at all:
//     the floor). Target ≥ 0.8× the stream. Timed outputs go to
//     io.Discard, ec's and the stream's alike.
//   - reconstruct: ec.Reconstruct of min(3, P) lost data indexes from D
//     others through a CellSource, every cell read and rebuilt checked,
//     against reedsolomon's stream Reconstruct and in-place Reconstruct
//     of the same shards. Target ≥ 0.8× the stream.
//
// The read table: ec.Reader reading the whole container in 8 MiB ReadAt
// calls with data index 1 lost (every stripe decoded) against the same
// Reader with every index healthy.
//
// MB/s are of the container's logical bytes in every row, so a ratio is
// a ratio of times. What ec rebuilds and reads is compared with the
// encoding once per scheme; a mismatch fails the run.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/cmfs-project/cmfs/bench"
	"github.com/cmfs-project/cmfs/ec"
	"github.com/klauspost/reedsolomon"
)

const (
	subject  = "ec"
	stream   = "rs-stream"
	inPlace  = "rs-inplace"
	degraded = "degraded"
	healthy  = "healthy"
	readSize = 8 << 20
)

func main() {
	mib := flag.Int("mib", 256, "container size in MiB")
	schemes := flag.String("schemes", "ec:rs-6-3-1024k,ec:rs-3-2-1024k,ec:rs-10-4-1024k", "EC schemes, comma-separated")
	reps := flag.Int("reps", 3, "timed runs of each row and its baseline (the table shows the best)")
	flag.Parse()
	var scs []ec.Scheme
	err := error(nil)
	for _, s := range strings.Split(*schemes, ",") {
		sc, perr := ec.ParseScheme(strings.TrimSpace(s))
		if perr != nil {
			err = fmt.Errorf("-schemes: %w", perr)
			break
		}
		scs = append(scs, sc)
	}
	if err == nil && (*mib < 1 || *mib > 4096 || *reps < 1) {
		err = errors.New("want 1 ≤ -mib ≤ 4096 and -reps ≥ 1")
	}
	if err == nil && flag.NArg() > 0 {
		err = fmt.Errorf("unexpected argument %q", flag.Arg(0))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ecbench:", err)
		os.Exit(2)
	}
	if err := run(os.Stdout, os.Stderr, int64(*mib)<<20, scs, *reps); err != nil {
		fmt.Fprintln(os.Stderr, "ecbench:", err)
		os.Exit(1)
	}
}

func run(stdout, stderr io.Writer, size int64, scs []ec.Scheme, reps int) error {
	cwd, _ := os.Getwd()
	machine := bench.Describe(cwd)
	fmt.Fprintf(stdout, "EC benchmark, %s\n\n", time.Now().Format(time.RFC3339))
	for _, l := range machine.Lines()[:3] {
		fmt.Fprintln(stdout, "  "+l)
	}
	fmt.Fprintf(stdout, "  %s, GOMAXPROCS %d; %d MiB of random bytes, best of %d run(s)\n\n",
		runtime.Version(), runtime.GOMAXPROCS(0), size>>20, reps)
	data := make([]byte, size)
	_, _ = rand.NewChaCha8([32]byte{'e', 'c'}).Read(data)
	codec := &bench.Table{Impls: []string{subject, stream, inPlace}, Subject: subject, Best: true}
	reads := &bench.Table{Impls: []string{degraded, healthy}, Subject: degraded, Best: true}
	var notes []string
	for _, sc := range scs {
		fmt.Fprintf(stderr, "%s...\n", sc)
		r, err := measure(data, sc, reps)
		if err != nil {
			return fmt.Errorf("%s: %w", sc, err)
		}
		codec.Rows = append(codec.Rows, r.encode, r.rebuild)
		reads.Rows = append(reads.Rows, r.read)
		notes = append(notes, r.note)
		runtime.GC()
	}
	for _, t := range []*bench.Table{codec, reads} {
		for _, l := range t.Spread(1.5) {
			notes = append(notes, "runs differ by more than 1.5× (slowest to fastest) in "+l)
		}
	}
	legend := codec.Legend() + " rs-stream: reedsolomon's StreamEncoder over the same bytes split into D shards " +
		"(it copies its input in from io.Readers as ec does, is handed its shards already split and checksums " +
		"nothing; every timed output, ec's and the stream's, goes to io.Discard); " +
		"rs-inplace: reedsolomon's Encode and Reconstruct of those shards in memory, no copy: the floor. " +
		"degraded÷healthy: the same ec.Reader reading everything, data index 1 lost or not. " +
		"MB/s of the container's logical bytes throughout."
	for _, t := range []*bench.Table{codec, reads} {
		if err := t.WriteText(stdout); err != nil {
			return err
		}
		fmt.Fprintln(stdout)
	}
	fmt.Fprintln(stdout, legend)
	fmt.Fprintln(stdout, "\nnotes:")
	for _, n := range notes {
		fmt.Fprintln(stdout, "  - "+n)
	}
	fmt.Fprintf(stdout, "\nmarkdown:\n\nMachine: %s.\n\n", strings.Join(machine.Lines(), "; "))
	for _, t := range []*bench.Table{codec, reads} {
		if err := t.WriteMarkdown(stdout); err != nil {
			return err
		}
		fmt.Fprintln(stdout)
	}
	_, err := fmt.Fprintln(stdout, legend)
	return err
}

// timed runs f and returns the container's MB/s.
func timed(size int64, f func() error) (float64, error) {
	start := time.Now()
	if err := f(); err != nil {
		return 0, err
	}
	return bench.MBps.Value(bench.Measurement{Bytes: size, Elapsed: time.Since(start)}), nil
}

type result struct {
	encode, rebuild, read *bench.Row
	note                  string
}

func measure(data []byte, sc ec.Scheme, reps int) (result, error) {
	ctx := context.Background()
	size := int64(len(data))
	l := ec.Layout{Scheme: sc, Size: size}
	rs, err := reedsolomon.New(sc.Data, sc.Parity)
	if err != nil {
		return result{}, err
	}
	rst, err := reedsolomon.NewStream(sc.Data, sc.Parity)
	if err != nil {
		return result{}, err
	}
	// Split copies only the last shard's tail; the parity shards come
	// from the capacity given here.
	per := (size + int64(sc.Data) - 1) / int64(sc.Data)
	whole := make([]byte, size, per*int64(sc.Total()))
	copy(whole, data)
	shards, err := rs.Split(whole)
	if err != nil {
		return result{}, err
	}
	parity := make([][]byte, sc.Parity)
	for k := range parity {
		parity[k] = make([]byte, 0, per)
	}
	files := make([][]byte, sc.Total())
	for i := range files {
		files[i] = make([]byte, 0, l.IndexSize(i+1))
	}
	lost := make([]int, min(3, sc.Parity))
	for k := range lost {
		lost[k] = k + 1
	}
	goal := []bench.Target{{Base: stream, Min: 0.8}}
	r := result{
		encode:  &bench.Row{Name: fmt.Sprintf("encode %s", sc), Unit: bench.MBps, Best: true, Targets: goal},
		rebuild: &bench.Row{Name: fmt.Sprintf("reconstruct %d of %s", len(lost), sc), Unit: bench.MBps, Best: true, Targets: goal},
		read:    &bench.Row{Name: fmt.Sprintf("read %s, index 1 lost", sc), Unit: bench.MBps, Best: true},
	}
	// Untimed: the index files every later row reads, and the
	// baselines' output checked against the in-place encoding.
	if err := rs.Encode(shards); err != nil {
		return result{}, fmt.Errorf("reedsolomon encode: %w", err)
	}
	tab, err := ec.Encode(l, bytes.NewReader(data), sinks(files))
	if err != nil {
		return result{}, fmt.Errorf("ec encode: %w", err)
	}
	if err := rst.Encode(readers(shards[:sc.Data], nil), sinks(parity)); err != nil {
		return result{}, fmt.Errorf("reedsolomon stream encode: %w", err)
	}
	for k := range parity {
		if !bytes.Equal(parity[k], shards[sc.Data+k]) {
			return result{}, fmt.Errorf("reedsolomon stream encode: parity %d differs from in place", k)
		}
	}
	// Timed: every output goes to io.Discard, for ec as for the
	// stream, so that what is timed is the coder's work, not a sink's.
	discard := func(n int) []io.Writer {
		w := make([]io.Writer, n)
		for k := range w {
			w[k] = io.Discard
		}
		return w
	}
	for range reps {
		v, err := timed(size, func() error { return rs.Encode(shards) })
		if err != nil {
			return result{}, fmt.Errorf("reedsolomon encode: %w", err)
		}
		r.encode.Add(inPlace, v)
		v, err = timed(size, func() error { return rst.Encode(readers(shards[:sc.Data], nil), discard(sc.Parity)) })
		if err != nil {
			return result{}, fmt.Errorf("reedsolomon stream encode: %w", err)
		}
		r.encode.Add(stream, v)
		v, err = timed(size, func() error {
			_, err := ec.Encode(l, bytes.NewReader(data), discard(sc.Total()))
			return err
		})
		if err != nil {
			return result{}, fmt.Errorf("ec encode: %w", err)
		}
		r.encode.Add(subject, v)
	}

	src := cells{l: l, files: files}
	var avail []int
	for i := len(lost) + 1; i <= sc.Total(); i++ {
		avail = append(avail, i)
	}
	// Untimed: what ec and the stream rebuild is what was lost.
	out := make([][]byte, len(lost))
	for k, i := range lost {
		out[k] = make([]byte, 0, l.IndexSize(i))
	}
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	if err := ec.Reconstruct(ctx, l, tab, src, avail, lost, sinks(out)); err != nil {
		return result{}, fmt.Errorf("ec reconstruct: %w", err)
	}
	runtime.ReadMemStats(&m1)
	fill := make([][]byte, sc.Total())
	for _, i := range lost {
		fill[i-1] = make([]byte, 0, per)
	}
	if err := rst.Reconstruct(readers(shards, lost), sinks(fill)); err != nil {
		return result{}, fmt.Errorf("reedsolomon stream reconstruct: %w", err)
	}
	for k, i := range lost {
		if !bytes.Equal(out[k], files[i-1]) {
			return result{}, fmt.Errorf("ec reconstruct: index %d differs from its encoding", i)
		}
		if !bytes.Equal(fill[i-1], shards[i-1]) {
			return result{}, fmt.Errorf("reedsolomon stream reconstruct: shard %d differs", i)
		}
	}
	for range reps {
		for _, i := range lost {
			shards[i-1] = shards[i-1][:0] // rebuilt in place
		}
		v, err := timed(size, func() error { return rs.Reconstruct(shards) })
		if err != nil {
			return result{}, fmt.Errorf("reedsolomon reconstruct: %w", err)
		}
		r.rebuild.Add(inPlace, v)
		v, err = timed(size, func() error {
			wr := make([]io.Writer, sc.Total())
			for _, i := range lost {
				wr[i-1] = io.Discard
			}
			return rst.Reconstruct(readers(shards, lost), wr)
		})
		if err != nil {
			return result{}, fmt.Errorf("reedsolomon stream reconstruct: %w", err)
		}
		r.rebuild.Add(stream, v)
		v, err = timed(size, func() error { return ec.Reconstruct(ctx, l, tab, src, avail, lost, discard(len(lost))) })
		if err != nil {
			return result{}, fmt.Errorf("ec reconstruct: %w", err)
		}
		r.rebuild.Add(subject, v)
	}

	good := ec.NewReader(l, tab, src, seqFrom(1, sc.Total()))
	sick := ec.NewReader(l, tab, src, seqFrom(2, sc.Total()))
	got := make([]byte, size)
	for range reps {
		for _, rd := range []struct {
			impl string
			r    *ec.Reader
		}{{healthy, good}, {degraded, sick}} {
			clear(got)
			v, err := timed(size, func() error { return readAll(ctx, rd.r, got) })
			if err != nil {
				return result{}, fmt.Errorf("%s read: %w", rd.impl, err)
			}
			if !bytes.Equal(got, data) {
				return result{}, fmt.Errorf("%s read: bytes differ from the container's", rd.impl)
			}
			r.read.Add(rd.impl, v)
		}
	}
	if good.Degraded() != 0 || sick.Degraded() != int64(reps)*l.Stripes() {
		return result{}, fmt.Errorf("degraded stripes: %d healthy and %d with index 1 lost, want 0 and %d",
			good.Degraded(), sick.Degraded(), int64(reps)*l.Stripes())
	}
	r.note = fmt.Sprintf("%s: one ec.Reconstruct of %d indexes allocated %.0f MiB for a %d MiB container "+
		"(batches of 4 MiB per index, pooled; this cell source hands out its own buffers)", sc, len(lost),
		float64(m1.TotalAlloc-m0.TotalAlloc)/(1<<20), size>>20)
	return r, nil
}

func readAll(ctx context.Context, r *ec.Reader, p []byte) error {
	for off := 0; off < len(p); off += readSize {
		if _, err := r.ReadAt(ctx, p[off:min(off+readSize, len(p))], int64(off)); err != nil {
			return err
		}
	}
	return nil
}

func seqFrom(from, to int) []int {
	var s []int
	for i := from; i <= to; i++ {
		s = append(s, i)
	}
	return s
}

// readers returns a reader of each buffer, nil for the indexes (from 1)
// in skip.
func readers(bufs [][]byte, skip []int) []io.Reader {
	r := make([]io.Reader, len(bufs))
	for i, b := range bufs {
		if !slices.Contains(skip, i+1) {
			r[i] = bytes.NewReader(b)
		}
	}
	return r
}

// sinks returns a writer appending to each buffer that is not nil.
func sinks(bufs [][]byte) []io.Writer {
	w := make([]io.Writer, len(bufs))
	for i := range bufs {
		if bufs[i] != nil {
			w[i] = (*sink)(&bufs[i])
		}
	}
	return w
}

// sink appends to a buffer made large enough beforehand.
type sink []byte

func (s *sink) Write(p []byte) (int, error) {
	*s = append(*s, p...)
	return len(p), nil
}

// cells serves index files held in memory, as a node's local index
// replicas would be (without the disk).
type cells struct {
	l     ec.Layout
	files [][]byte
}

func (c cells) ReadCells(_ context.Context, index int, first, n int64) ([]byte, error) {
	if index < 1 || index > len(c.files) {
		return nil, fmt.Errorf("index %d of %d", index, len(c.files))
	}
	f := c.files[index-1]
	off, end := first*int64(c.l.Cell), min(int64(len(f)), (first+n)*int64(c.l.Cell))
	if off > end {
		return nil, fmt.Errorf("index %d stripes %d…%d: past the end", index, first, first+n-1)
	}
	return f[off:end:end], nil
}
