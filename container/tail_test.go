package container

import (
	"bytes"
	"context"
	"errors"
	"github.com/cmfs-project/cmfs/internal/wait"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// writeTail writes data to t's file in pieces, telling t after each, and
// finishes with err.
func writeTail(t *tail, data []byte, piece int, err error) {
	for off := 0; off < len(data); off += piece {
		end := min(off+piece, len(data))
		t.f.WriteAt(data[off:end], int64(off))
		t.wrote(int64(end))
	}
	t.finish(err)
}

func newTestTail(t *testing.T) *tail {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(t.TempDir(), "tarball"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return newTail(f)
}

func TestTailReadsBehindTheWriter(t *testing.T) {
	tl := newTestTail(t)
	data := randBytes(1, 3<<20+77)
	go writeTail(tl, data, 4096+13, nil)
	got, err := io.ReadAll(tl)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read %d bytes (equal: %v), %v; want %d", len(got), bytes.Equal(got, data), err, len(data))
	}
}

func TestTailReceiverError(t *testing.T) {
	tl := newTestTail(t)
	boom := errors.New("stream cut")
	go writeTail(tl, randBytes(2, 100<<10), 1000, boom)
	got, err := io.ReadAll(tl)
	if !errors.Is(err, boom) || len(got) != 100<<10 {
		t.Fatalf("read %d bytes, %v; want all 102400 then %v", len(got), err, boom)
	}
	if tl.failure() != boom {
		t.Fatalf("failure() = %v", tl.failure())
	}
}

func TestTailSeek(t *testing.T) {
	tl := newTestTail(t)
	data := randBytes(3, 64<<10)
	go writeTail(tl, data, 1<<10, nil)
	// Past what is written: the read waits for it.
	if off, err := tl.Seek(50<<10, io.SeekCurrent); err != nil || off != 50<<10 {
		t.Fatalf("Seek = %d, %v", off, err)
	}
	b := make([]byte, 10)
	if _, err := io.ReadFull(tl, b); err != nil || !bytes.Equal(b, data[50<<10:50<<10+10]) {
		t.Fatalf("read after seek: %v", err)
	}
	if _, err := tl.Seek(0, io.SeekEnd); err == nil {
		t.Fatal("seek from the end of a stream worked")
	}
}

// punchable reports whether dir's filesystem punches holes.
func punchable(t *testing.T, dir string) bool {
	f, err := os.CreateTemp(dir, "probe")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.Write(make([]byte, 8192))
	return unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 0, 4096) == nil
}

func allocated(t *testing.T, f *os.File) int64 {
	t.Helper()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Blocks * 512
}

func TestTailPunchesWhatWasRead(t *testing.T) {
	tl := newTestTail(t)
	if !punchable(t, filepath.Dir(tl.f.Name())) {
		t.Skip("the filesystem of the temp dir does not punch holes")
	}
	data := randBytes(4, 3*punchEvery)
	writeTail(tl, data, 1<<20, nil)
	if _, err := io.CopyN(io.Discard, tl, 2*punchEvery+100); err != nil {
		t.Fatal(err)
	}
	if got := allocated(t, tl.f); got > punchEvery+4096 {
		t.Fatalf("%d bytes still allocated of %d, %d read", got, len(data), 2*punchEvery+100)
	}
	// What was not read is still there.
	rest, err := io.ReadAll(tl)
	if err != nil || !bytes.Equal(rest, data[2*punchEvery+100:]) {
		t.Fatalf("the unread rest: %d bytes, %v", len(rest), err)
	}
}

// TestImportExtractsAsItReceives: the extraction follows the stream, and
// the tarball in tmp keeps only what it has not read yet.
func TestImportExtractsAsItReceives(t *testing.T) {
	src := newTestStore(t, Options{})
	d, ids := closedContainer(t, src, randBytes(1, 20<<20), randBytes(2, 20<<20))
	tarball := export(t, src, d.ID, None)

	vol := filepath.Join(t.TempDir(), "vol")
	s := newTestStore(t, Options{}, vol)
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := s.Import(context.Background(), d.ID, d.Bytes, None, pr)
		done <- err
	}()
	half := 30 << 20
	if _, err := pw.Write(tarball[:half]); err != nil {
		t.Fatal(err)
	}
	chunk := func() int64 {
		var n int64
		for _, dir := range dirNames(t, filepath.Join(vol, extractDir)) {
			if fi, err := os.Stat(filepath.Join(vol, extractDir, dir, chunkName(0))); err == nil {
				n = fi.Size()
			}
		}
		return n
	}
	wait.For(t, 10*time.Second, "the first 20 MiB extracted before the stream ends", func() bool { return chunk() >= 20<<20 })
	if punchable(t, vol) {
		tars := dirNames(t, filepath.Join(vol, copyDir))
		f, err := os.Open(filepath.Join(vol, copyDir, tars[0]))
		if err != nil {
			t.Fatal(err)
		}
		if got := allocated(t, f); got > int64(half)-punchEvery {
			t.Errorf("the tarball holds %d bytes on disk of %d received", got, half)
		}
		f.Close()
	}
	if _, err := pw.Write(tarball[half:]); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got, err := s.WaitScan(context.Background(), d.ID); err != nil || got.State != Closed {
		t.Fatalf("after scan %s, %v", got.State, err)
	}
	if _, err := readBlock(t, s, ids[1]); err != nil {
		t.Fatal(err)
	}
}

// TestImportCutAfterTheDescriptor: a stream cut once extraction has begun
// fails with the stream's error and leaves nothing, in every compression.
func TestImportCutAfterTheDescriptor(t *testing.T) {
	src := newTestStore(t, Options{})
	d, _ := closedContainer(t, src, randBytes(1, 2<<20), textBytes(2, 2<<20))
	for _, c := range Compressions {
		t.Run(string(c), func(t *testing.T) {
			tarball := export(t, src, d.ID, c)
			s := newTestStore(t, Options{})
			boom := errors.New("peer went away")
			r := io.MultiReader(bytes.NewReader(tarball[:len(tarball)*2/3]), errReader{boom})
			if _, err := s.Import(context.Background(), d.ID, d.Bytes, c, r); !errors.Is(err, boom) {
				t.Fatalf("Import = %v, want %v", err, boom)
			}
			assertEmptyVolume(t, s)
		})
	}
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }
