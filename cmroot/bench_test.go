package cmroot

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/internal/checksum"
)

// BenchmarkPreserveMove measures Preserve(move) of 10k small files against
// the plain os.Rename it is built on, side by side, and reports the ratio.
func BenchmarkPreserveMove(b *testing.B) {
	const files = 10000
	var renameT, preserveT time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		dir := b.TempDir()
		src := filepath.Join(dir, "src")
		plain := filepath.Join(dir, "plain")
		for _, d := range []string{src, plain} {
			if err := os.Mkdir(d, 0o755); err != nil {
				b.Fatal(err)
			}
		}
		s, err := Open(filepath.Join(dir, "cmroot"), Options{})
		if err != nil {
			b.Fatal(err)
		}
		paths := make([]string, files)
		sums := make([]string, files)
		sizes := make([]int64, files)
		for j := range files {
			content := []byte(fmt.Sprintf("file %d of iteration %d", j, i))
			paths[j] = filepath.Join(src, fmt.Sprint(j))
			sums[j] = checksum.Bytes(content)
			sizes[j] = int64(len(content))
			if err := os.WriteFile(paths[j], content, 0o644); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()

		start := time.Now()
		for j, p := range paths {
			if err := os.Rename(p, filepath.Join(plain, sums[j])); err != nil {
				b.Fatal(err)
			}
		}
		renameT += time.Since(start)
		for j, p := range paths { // put them back, untimed
			b.StopTimer()
			if err := os.Rename(filepath.Join(plain, sums[j]), p); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
		start = time.Now()
		for j, p := range paths {
			if _, _, err := s.Preserve(p, sums[j], sizes[j], true); err != nil {
				b.Fatal(err)
			}
		}
		preserveT += time.Since(start)

		b.StopTimer()
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	n := float64(b.N * files)
	b.ReportMetric(float64(renameT.Nanoseconds())/n, "rename-ns/file")
	b.ReportMetric(float64(preserveT.Nanoseconds())/n, "preserve-ns/file")
	b.ReportMetric(float64(preserveT)/float64(renameT), "ratio")
}
