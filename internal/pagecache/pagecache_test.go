package pagecache

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

const testSize = 8 << 20

func resident(t *testing.T, f *os.File, size int64) int64 {
	t.Helper()
	n, err := Resident(f, size)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// coldFile writes a file of testSize bytes and drops it from the page
// cache; it skips where the filesystem keeps the pages (tmpfs).
func coldFile(t *testing.T) *os.File {
	t.Helper()
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, bytes.Repeat([]byte("page cache\n"), testSize/11+1)[:testSize], 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
	if n := resident(t, f, testSize); n > testSize/2 {
		t.Skipf("the filesystem of %s keeps %d bytes cached after FADV_DONTNEED", p, n)
	}
	return f
}

func readAll(t *testing.T, f *os.File) {
	t.Helper()
	if _, err := io.Copy(io.Discard, io.NewSectionReader(f, 0, testSize)); err != nil {
		t.Fatal(err)
	}
}

// TestDropWhatTheReadBroughtIn: a file no one had cached is not cached
// after a read between Note and Drop.
func TestDropWhatTheReadBroughtIn(t *testing.T) {
	f := coldFile(t)
	before := resident(t, f, testSize)
	a := Note(f, testSize)
	readAll(t, f)
	if n := resident(t, f, testSize); n < testSize/2 {
		t.Fatalf("after reading, only %d bytes are cached: the test cannot tell", n)
	}
	a.Drop()
	if n := resident(t, f, testSize); n > before+testSize/16 {
		t.Errorf("after Drop %d bytes of the file are cached, %d before the read", n, before)
	}
}

// TestKeepWhatWasCached: pages cached before Note stay after Drop, and
// the ones the read brought in go.
func TestKeepWhatWasCached(t *testing.T) {
	f := coldFile(t)
	// The first half is cached when the read begins (read without
	// readahead, which would bring in the rest).
	unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_RANDOM)
	if _, err := io.Copy(io.Discard, io.NewSectionReader(f, 0, testSize/2)); err != nil {
		t.Fatal(err)
	}
	unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_NORMAL)
	first, second := resident(t, f, testSize/2), resident(t, f, testSize)-resident(t, f, testSize/2)
	if first < testSize/4 || second > testSize/16 {
		t.Skipf("could not cache the first half alone: %d and %d bytes cached", first, second)
	}
	a := Note(f, testSize)
	readAll(t, f)
	a.Drop()
	if n := resident(t, f, testSize/2); n < first {
		t.Errorf("the first half had %d bytes cached before, %d after Drop", first, n)
	}
	if n := resident(t, f, testSize) - resident(t, f, testSize/2); n > second+testSize/16 {
		t.Errorf("the second half, which the read brought in, has %d bytes cached after Drop, %d before", n, second)
	}
}

// TestSmallFilesLeftAlone: Note records nothing below Min.
func TestSmallFilesLeftAlone(t *testing.T) {
	f := coldFile(t)
	if a := Note(f, Min-1); len(a.spans) != 0 {
		t.Errorf("Note of %d bytes recorded %d spans", Min-1, len(a.spans))
	}
}
