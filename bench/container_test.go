package bench

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"os"
	"testing"
	"time"
)

func TestJSONRows(t *testing.T) {
	const size = 1 << 20
	a, b := JSONRows(size, 7), JSONRows(size, 7)
	if len(a) != size {
		t.Fatalf("got %d bytes, want %d", len(a), size)
	}
	if !bytes.Equal(a, b) {
		t.Fatal("the same seed gave different rows")
	}
	if bytes.Equal(a, JSONRows(size, 8)) {
		t.Fatal("two seeds gave the same rows")
	}
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write(a)
	zw.Close()
	// Like real logs: compressible, but not a repeated block.
	if ratio := float64(len(a)) / float64(z.Len()); ratio < 2.5 || ratio > 20 {
		t.Fatalf("gzip ratio %.1f, want between 2.5 and 20", ratio)
	}
}

func TestWriteRandomFilesIncompressible(t *testing.T) {
	paths, err := WriteRandomFiles(t.TempDir(), 2, 256<<10)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(paths[0])
	b, _ := os.ReadFile(paths[1])
	if len(a) != 256<<10 || bytes.Equal(a, b) {
		t.Fatalf("got %d bytes, files equal: %v", len(a), bytes.Equal(a, b))
	}
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write(a)
	zw.Close()
	if z.Len() < len(a) {
		t.Fatalf("gzip made %d bytes of %d", z.Len(), len(a))
	}
}

func TestLoopbackPipe(t *testing.T) {
	want := Content(3<<20+17, 1, 2)
	var got bytes.Buffer
	n, err := LoopbackPipe(context.Background(), &got, bytes.NewReader(want))
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(len(want)) || !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("got %d bytes (equal: %v), want %d", n, bytes.Equal(got.Bytes(), want), len(want))
	}
}

type failingWriter struct{ n int }

func (f *failingWriter) Write(p []byte) (int, error) {
	if f.n += len(p); f.n > 1<<20 {
		return 0, errors.New("disk full")
	}
	return len(p), nil
}

func TestLoopbackPipeErrors(t *testing.T) {
	// A writer that fails must not leave the sender blocked.
	big := io.LimitReader(zeros{}, 64<<20)
	if _, err := LoopbackPipe(context.Background(), &failingWriter{}, big); err == nil {
		t.Fatal("no error from a failing writer")
	}
	readErr := errors.New("tar died")
	if _, err := LoopbackPipe(context.Background(), io.Discard, io.MultiReader(bytes.NewReader(make([]byte, 100)), errReader{readErr})); !errors.Is(err, readErr) {
		t.Fatalf("got %v, want %v", err, readErr)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

func TestProcStatusAndSampler(t *testing.T) {
	pid := os.Getpid()
	rss, err := ProcStatus(pid, "VmRSS")
	if err != nil || rss <= 0 {
		t.Fatalf("VmRSS %d, %v", rss, err)
	}
	if _, err := ProcStatus(pid, "NoSuchField"); err == nil {
		t.Fatal("no error for a missing field")
	}
	s := SampleRSS([]int{pid}, time.Millisecond)
	time.Sleep(5 * time.Millisecond) // lets a few ticks pass: not a wait, Stop samples once more anyway
	peak, err := s.Stop()
	if err != nil || peak[pid] <= 0 {
		t.Fatalf("peak %v, %v", peak, err)
	}
	if err := ResetPeakRSS(pid); err == nil {
		hwm, err := ProcStatus(pid, "VmHWM")
		if err != nil || hwm <= 0 {
			t.Fatalf("VmHWM %d, %v", hwm, err)
		}
	}
}

func TestDiskWritten(t *testing.T) {
	dir := t.TempDir()
	before, err := DiskWritten(dir)
	if err != nil {
		t.Skipf("no block device statistics for %s: %v", dir, err)
	}
	if err := os.WriteFile(dir+"/f", make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	f, _ := os.Open(dir + "/f")
	f.Sync()
	f.Close()
	after, err := DiskWritten(dir)
	if err != nil || after < before {
		t.Fatalf("before %d, after %d, %v", before, after, err)
	}
}
