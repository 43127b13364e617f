package container

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/internal/durable"
)

// BenchmarkExportImport moves a 256 MiB container (half random, half
// text, in 4 MiB blocks) through Export | Import, durably, per compression
// and per way of syncing the import (an fsync per file, or one syncfs).
// The baseline, measured in the same run, is the floor any import pays:
// copying the container's files on the same disk and syncing them. MB/s
// counts the container's data; x-baseline is the time ratio to the copy
// (lower is better); scan-ms is the post-import scan, which Import does
// not wait for; wire-ratio the tarball's size over the data's. The
// nosync case shows the CPU and page-cache cost alone.
func BenchmarkExportImport(b *testing.B) {
	const total, blockSize = 256 << 20, 4 << 20
	src, err := OpenStore([]string{filepath.Join(b.TempDir(), "src")}, Options{ChunkSize: 64 << 20})
	if err != nil {
		b.Fatal(err)
	}
	defer src.Close()
	var id uint64
	for i := range total / blockSize {
		data := randBytes(uint64(i), blockSize)
		if i%2 == 1 {
			data = textBytes(uint64(i), blockSize)
		}
		if id, _, err = src.Put(bytes.NewReader(data)); err != nil {
			b.Fatal(err)
		}
	}
	d, err := src.CloseContainer(id)
	if err != nil {
		b.Fatal(err)
	}
	srcDir := filepath.Join(src.Volumes()[0].Path, strconv.FormatUint(id, 10))

	cases := []struct {
		name   string
		c      Compression
		syncFS bool
		noSync bool
	}{
		{name: "none/nosync", c: None, noSync: true},
		{name: "none/fsync-each", c: None},
		{name: "none/syncfs", c: None, syncFS: true},
		{name: "gzip", c: Gzip},
		{name: "snappy", c: Snappy},
		{name: "lz4", c: LZ4},
		{name: "zstd", c: Zstd},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			dst, err := OpenStore([]string{filepath.Join(b.TempDir(), "dst")}, Options{syncFS: tc.syncFS, NoSync: tc.noSync})
			if err != nil {
				b.Fatal(err)
			}
			defer dst.Close()
			b.SetBytes(d.Bytes)
			var elapsed, scan, baseline time.Duration
			var wire int64
			for i := 0; i < b.N; i++ {
				// The baseline in every round, so both see the same
				// neighbours on a shared disk.
				b.StopTimer()
				baseline += copyBaseline(b, srcDir, filepath.Join(b.TempDir(), "copy"))
				b.StartTimer()
				start := time.Now()
				pr, pw := io.Pipe()
				cw := &countingWriter{w: pw}
				go func() { pw.CloseWithError(src.Export(context.Background(), id, tc.c, cw)) }()
				if _, err := dst.Import(context.Background(), id, d.Bytes, tc.c, pr); err != nil {
					b.Fatal(err)
				}
				elapsed += time.Since(start)
				wire = cw.n
				b.StopTimer()
				start = time.Now()
				got, err := dst.WaitScan(context.Background(), id)
				if err != nil || got.State != Closed {
					b.Fatalf("scan: %s, %v", got.State, err)
				}
				scan += time.Since(start)
				if err := dst.Delete(id); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(elapsed)/float64(baseline), "x-baseline")
			b.ReportMetric(float64(d.Bytes)/baseline.Seconds()*float64(b.N)/1e6, "baseline-MB/s")
			b.ReportMetric(float64(scan.Milliseconds())/float64(b.N), "scan-ms")
			b.ReportMetric(float64(wire)/float64(d.Bytes), "wire-ratio")
		})
	}
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// copyBaseline copies every file under src into dst and syncs the
// filesystem: what the plainest import would cost.
func copyBaseline(b *testing.B, src, dst string) time.Duration {
	b.Helper()
	start := time.Now()
	buf := make([]byte, copyBufSize)
	err := filepath.WalkDir(src, func(p string, de os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if de.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(target)
		if err != nil {
			return err
		}
		if _, err := io.CopyBuffer(struct{ io.Writer }{out}, struct{ io.Reader }{in}, buf); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
	if err == nil {
		err = durable.SyncFS(dst)
	}
	if err != nil {
		b.Fatal(err)
	}
	elapsed := time.Since(start)
	os.RemoveAll(dst)
	return elapsed
}
