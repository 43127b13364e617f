// Package durable is the one way this project makes a file durably: write
// a temporary file, fsync it, close it, rename it into place, fsync the
// directory — and remove the temporary file on every error, so nothing
// partial is ever visible under the final name.
package durable

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// Write makes a file durably. fill writes a new temporary file created
// with perm in tmpDir; the file is fsynced (when sync) and closed; place
// moves it into its final place and returns the final path, whose
// directory is then fsynced (when sync). On any error the temporary file is
// removed. sync false is for tests and benchmarks that measure something
// else.
func Write(tmpDir string, perm os.FileMode, sync bool, fill func(f *os.File) error, place func(tmp string) (string, error)) error {
	f, err := createTemp(tmpDir, perm)
	if err != nil {
		return err
	}
	tmp := f.Name()
	placed := false
	defer func() {
		if !placed {
			os.Remove(tmp)
		}
	}()
	if err := fill(f); err != nil {
		f.Close()
		return err
	}
	if sync {
		if err := f.Sync(); err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Close(); err != nil {
		return err
	}
	dst, err := place(tmp)
	if err != nil {
		return err
	}
	placed = true
	if sync {
		return SyncDir(filepath.Dir(dst))
	}
	return nil
}

// WriteFile replaces path with data, durably; the file gets perm.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	err := Write(filepath.Dir(path), perm, true,
		func(f *os.File) error {
			if _, err := f.Write(data); err != nil {
				return err
			}
			return f.Chmod(perm) // perm exactly, whatever the umask
		},
		func(tmp string) (string, error) { return path, os.Rename(tmp, path) })
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// SyncDir fsyncs a directory, so that the names created, renamed or
// removed in it survive a power loss.
func SyncDir(dir string) error { return SyncFile(dir) }

// SyncFile fsyncs the file (or directory) at path, written earlier
// through another descriptor.
func SyncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("fsync %s: %w", path, err)
	}
	return nil
}

// createTemp creates a new file with mode perm (before umask) in dir, named
// so that it is hidden and cannot collide with anything but its own kind.
func createTemp(dir string, perm os.FileMode) (*os.File, error) {
	for {
		name := filepath.Join(dir, ".tmp-"+strconv.FormatUint(rand.Uint64(), 36))
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, perm)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		return f, err
	}
}

// SyncFS makes everything written to the filesystem holding dir durable,
// with one syncfs: cheaper than an fsync per file when many were written.
func SyncFS(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := unix.Syncfs(int(d.Fd())); err != nil {
		return fmt.Errorf("syncfs %s: %w", dir, err)
	}
	return nil
}

// RenameNoReplace renames oldpath to newpath atomically, failing with
// EEXIST (an *os.LinkError; errors.Is(err, fs.ErrExist) holds) if newpath
// exists, so that a rename never replaces what another put there: a
// preserved original, an imported container. On a filesystem without
// RENAME_NOREPLACE it checks, then renames: the caller must keep two
// renames to one newpath apart itself (cmroot's stripe lock, the
// container store's importing set).
func RenameNoReplace(oldpath, newpath string) error {
	err := unix.Renameat2(unix.AT_FDCWD, oldpath, unix.AT_FDCWD, newpath, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.ENOTSUP) {
		if _, lerr := os.Lstat(newpath); lerr == nil {
			err = unix.EEXIST
		} else {
			return os.Rename(oldpath, newpath)
		}
	}
	if err != nil {
		return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: err}
	}
	return nil
}

// ClearDir removes everything inside dir, and keeps dir: what interrupted
// writes left in a temporary directory, or a half-made output.
func ClearDir(dir string) error {
	des, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, de := range des {
		if err := os.RemoveAll(filepath.Join(dir, de.Name())); err != nil {
			return err
		}
	}
	return nil
}
