package mapped

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func mapTemp(t *testing.T, fileSize, mapSize int64) (*os.File, *Region) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(t.TempDir(), "m"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if err := f.Truncate(fileSize); err != nil {
		t.Fatal(err)
	}
	r, err := Map(f, mapSize)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return f, r
}

// What is stored is what a read of the file returns, at once: the page
// cache holds it, not the process.
func TestStoresAreTheFile(t *testing.T) {
	f, r := mapTemp(t, 64<<10, 64<<10)
	rec := []byte("a record of some bytes")
	if err := r.Write(8192+5, rec); err != nil {
		t.Fatal(err)
	}
	if err := r.StoreUint32(8192, 0xdeadbeef); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 5+len(rec))
	if _, err := f.ReadAt(got, 8192); err != nil {
		t.Fatal(err)
	}
	if v := binary.LittleEndian.Uint32(got); v != 0xdeadbeef {
		t.Errorf("stored %#x, the file holds %#x", 0xdeadbeef, v)
	}
	if !bytes.Equal(got[5:], rec) {
		t.Errorf("file holds %q, want %q", got[5:], rec)
	}
	// And a write(2) is seen through the mapping.
	if _, err := f.WriteAt([]byte{0, 0, 0, 0}, 8192); err != nil {
		t.Fatal(err)
	}
	if v := binary.LittleEndian.Uint32(r.data[8192:]); v != 0 {
		t.Errorf("after a write of zeros the mapping holds %#x", v)
	}
}

// A store past the file's end faults; it comes back as EIO and the process
// goes on, with the file unchanged.
func TestFaultIsAnError(t *testing.T) {
	f, r := mapTemp(t, 4096, 64<<10)
	err := r.Write(32<<10, []byte("beyond the end"))
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("store past the end: %v, want EIO", err)
	}
	if err := r.StoreUint32(16<<10, 1); !errors.Is(err, syscall.EIO) {
		t.Fatalf("4-byte store past the end: %v, want EIO", err)
	}
	if fi, err := f.Stat(); err != nil || fi.Size() != 4096 {
		t.Fatalf("file after the faults: %v, %v", fi, err)
	}
	// The goroutine's fault setting is back: a store inside still works.
	if err := r.Write(0, []byte("inside")); err != nil {
		t.Fatal(err)
	}
}

func TestBounds(t *testing.T) {
	_, r := mapTemp(t, 8192, 8192)
	for _, err := range []error{
		r.Write(8190, []byte("abc")),
		r.Write(-1, []byte("a")),
		r.StoreUint32(8192, 1),
		r.StoreUint32(2, 1),
	} {
		if !errors.Is(err, syscall.EINVAL) {
			t.Errorf("got %v, want EINVAL", err)
		}
	}
}
