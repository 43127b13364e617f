package loopfs

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestMakeXFS makes an XFS filesystem, tells a reflinked file's extents
// from a copy's, survives a crash with what was synced, and takes it all
// down again.
func TestMakeXFS(t *testing.T) {
	if why := Missing("xfs"); why != "" {
		t.Skip(why)
	}
	dir := t.TempDir()
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	fs, err := Make(filepath.Join(dir, "img"), mnt, "xfs", 512<<20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := fs.Close(); err != nil {
			t.Error(err)
		}
		if _, err := os.Stat(fs.Image); !os.IsNotExist(err) {
			t.Errorf("image left after Close: %v", err)
		}
	})

	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	a := filepath.Join(mnt, "a")
	if err := os.WriteFile(a, data, 0o644); err != nil {
		t.Fatal(err)
	}
	copied := filepath.Join(mnt, "copy")
	if err := os.WriteFile(copied, data, 0o644); err != nil {
		t.Fatal(err)
	}
	cloned := filepath.Join(mnt, "clone")
	src, err := os.Open(a)
	if err != nil {
		t.Fatal(err)
	}
	dst, err := os.Create(cloned)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.IoctlFileClone(int(dst.Fd()), int(src.Fd())); err != nil {
		t.Fatalf("FICLONE on XFS: %v", err)
	}
	if err := dst.Sync(); err != nil {
		t.Fatal(err)
	}
	src.Close()
	dst.Close()
	if n, err := SharedBytes(cloned); err != nil || n != int64(len(data)) {
		t.Errorf("SharedBytes(clone) = %d, %v; want %d", n, err, len(data))
	}
	if n, err := SharedBytes(copied); err != nil || n != 0 {
		t.Errorf("SharedBytes(copy) = %d, %v; want 0", n, err)
	}
	if used, err := UsedBytes(mnt); err != nil || used <= 0 {
		t.Errorf("UsedBytes = %d, %v", used, err)
	}

	if err := fs.Crash(); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(cloned); err != nil || !bytes.Equal(got, data) {
		t.Errorf("fsynced clone after the crash: %d bytes, %v", len(got), err)
	}
}
