// Command ecbench measures package ec on one buffer of random bytes per
// scheme, each against a baseline timed side by side in the same run:
//
//	go run ./bench/cmd/ecbench [-mib 256] [-schemes ec:rs-6-3-1024k,ec:rs-3-2-1024k,ec:rs-10-4-1024k] [-reps 3]
//
// Rows, per scheme:
//   - encode: ec.Encode (streaming from a reader, batch by batch, every
//     cell checksummed, written to index buffers) against reedsolomon's
//     own Encode of the same bytes split into D shards (in place: no
//     copy, no checksum). Target ≥ 0.8×.
//   - reconstruct: ec.Reconstruct of min(3, P) lost data indexes from D
//     others, every cell read checked and every rebuilt cell checked,
//     against reedsolomon.Reconstruct of the same shards of the split.
//     Target ≥ 0.8×.
//   - degraded read: ec.Reader reading the whole container in 8 MiB
//     ReadAt calls with data index 1 lost, against the same Reader
//     reading it with every index healthy. No target: a report.
//
// MB/s are of the container's logical bytes in every row, so a ratio
// is a ratio of times. Rebuilt indexes and reads are compared with the
// encoded ones once per scheme; a mismatch fails the run.
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
	"strings"
	"time"

	"github.com/cmfs-project/cmfs/bench"
	"github.com/cmfs-project/cmfs/ec"
	"github.com/klauspost/reedsolomon"
)

const (
	subject  = "ec"
	baseline = "baseline"
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
	table := &bench.Table{Impls: []string{subject, baseline}, Subject: subject, Best: true}
	var notes []string
	for _, sc := range scs {
		fmt.Fprintf(stderr, "%s...\n", sc)
		rows, note, err := measure(data, sc, reps)
		if err != nil {
			return fmt.Errorf("%s: %w", sc, err)
		}
		table.Rows = append(table.Rows, rows...)
		notes = append(notes, note)
		runtime.GC()
	}
	for _, l := range table.Spread(1.5) {
		notes = append(notes, "runs differ by more than 1.5× (slowest to fastest) in "+l)
	}
	legend := table.Legend() + " Baselines: reedsolomon's own Encode and Reconstruct of the same bytes split " +
		"into D shards for encode and reconstruct rows; the same ec.Reader with every index healthy for " +
		"degraded read rows. MB/s of the container's logical bytes throughout."
	return bench.WriteReport(stdout, table, legend, notes, machine)
}

// timed runs f and returns the container's MB/s.
func timed(size int64, f func() error) (float64, error) {
	start := time.Now()
	if err := f(); err != nil {
		return 0, err
	}
	return bench.MBps.Value(bench.Measurement{Bytes: size, Elapsed: time.Since(start)}), nil
}

func measure(data []byte, sc ec.Scheme, reps int) ([]*bench.Row, string, error) {
	ctx := context.Background()
	size := int64(len(data))
	l := ec.Layout{Scheme: sc, Size: size}
	rs, err := reedsolomon.New(sc.Data, sc.Parity)
	if err != nil {
		return nil, "", err
	}
	// Split copies only the last shard's tail; the parity shards come
	// from the capacity given here.
	per := (size + int64(sc.Data) - 1) / int64(sc.Data)
	whole := make([]byte, size, per*int64(sc.Total()))
	copy(whole, data)
	shards, err := rs.Split(whole)
	if err != nil {
		return nil, "", err
	}
	files := make([][]byte, sc.Total())
	w := make([]io.Writer, sc.Total())
	for i := range files {
		files[i] = make([]byte, 0, l.IndexSize(i+1))
	}
	lost := make([]int, min(3, sc.Parity))
	for k := range lost {
		lost[k] = k + 1
	}
	encode := &bench.Row{Name: fmt.Sprintf("encode %s", sc), Unit: bench.MBps, Best: true,
		Targets: []bench.Target{{Base: baseline, Min: 0.8}}}
	rebuild := &bench.Row{Name: fmt.Sprintf("reconstruct %d of %s", len(lost), sc), Unit: bench.MBps, Best: true,
		Targets: []bench.Target{{Base: baseline, Min: 0.8}}}
	degraded := &bench.Row{Name: fmt.Sprintf("degraded read %s", sc), Unit: bench.MBps, Best: true}
	var tab ec.Table
	for range reps {
		v, err := timed(size, func() error { return rs.Encode(shards) })
		if err != nil {
			return nil, "", fmt.Errorf("reedsolomon encode: %w", err)
		}
		encode.Add(baseline, v)
		v, err = timed(size, func() error {
			for i := range files {
				files[i] = files[i][:0]
				w[i] = (*sink)(&files[i])
			}
			tab, err = ec.Encode(l, bytes.NewReader(data), w)
			return err
		})
		if err != nil {
			return nil, "", fmt.Errorf("ec encode: %w", err)
		}
		encode.Add(subject, v)
	}

	src := cells{l: l, files: files}
	var avail []int
	for i := len(lost) + 1; i <= sc.Total(); i++ {
		avail = append(avail, i)
	}
	out := make([][]byte, len(lost))
	saved := make([][]byte, len(lost))
	var allocated uint64
	for range reps {
		for k, i := range lost {
			saved[k] = shards[i-1][:0]
			shards[i-1] = saved[k]
		}
		v, err := timed(size, func() error { return rs.Reconstruct(shards) })
		if err != nil {
			return nil, "", fmt.Errorf("reedsolomon reconstruct: %w", err)
		}
		rebuild.Add(baseline, v)
		ow := make([]io.Writer, len(lost))
		for k, i := range lost {
			if out[k] == nil {
				out[k] = make([]byte, 0, l.IndexSize(i))
			}
			out[k] = out[k][:0]
			ow[k] = (*sink)(&out[k])
		}
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		v, err = timed(size, func() error { return ec.Reconstruct(ctx, l, tab, src, avail, lost, ow) })
		runtime.ReadMemStats(&m1)
		if err != nil {
			return nil, "", fmt.Errorf("ec reconstruct: %w", err)
		}
		allocated = m1.TotalAlloc - m0.TotalAlloc
		rebuild.Add(subject, v)
	}
	for k, i := range lost {
		if !bytes.Equal(out[k], files[i-1]) {
			return nil, "", fmt.Errorf("ec reconstruct: index %d differs from its encoding", i)
		}
	}

	healthy := ec.NewReader(l, tab, src, seqFrom(1, sc.Total()))
	sick := ec.NewReader(l, tab, src, seqFrom(2, sc.Total()))
	got := make([]byte, size)
	for range reps {
		for _, rd := range []struct {
			impl string
			r    *ec.Reader
		}{{baseline, healthy}, {subject, sick}} {
			clear(got)
			v, err := timed(size, func() error { return readAll(ctx, rd.r, got) })
			if err != nil {
				return nil, "", fmt.Errorf("%s read: %w", rd.impl, err)
			}
			if !bytes.Equal(got, data) {
				return nil, "", fmt.Errorf("%s read: bytes differ from the container's", rd.impl)
			}
			degraded.Add(rd.impl, v)
		}
	}
	if healthy.Degraded() != 0 || sick.Degraded() != int64(reps)*l.Stripes() {
		return nil, "", fmt.Errorf("degraded stripes: %d healthy and %d with index 1 lost, want 0 and %d",
			healthy.Degraded(), sick.Degraded(), int64(reps)*l.Stripes())
	}
	note := fmt.Sprintf("%s: ec.Reconstruct of %d indexes allocated %.0f MiB in all for a %d MiB container "+
		"(batches of 4 MiB per index; the cell source hands out its own buffers, uncopied)", sc, len(lost),
		float64(allocated)/(1<<20), size>>20)
	return []*bench.Row{encode, rebuild, degraded}, note, nil
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
