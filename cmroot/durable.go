package cmroot

import (
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// renameNoReplace renames oldpath to newpath atomically, failing with
// EEXIST if newpath exists, so that two preservations of the same content
// can never replace one another's inode.
func renameNoReplace(oldpath, newpath string) error {
	err := unix.Renameat2(unix.AT_FDCWD, oldpath, unix.AT_FDCWD, newpath, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.ENOTSUP) {
		// The filesystem has no RENAME_NOREPLACE; the caller's stripe lock
		// makes check-then-rename safe within the store.
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

// writeDurable is the one way this package makes a file durably: fill
// writes a new temp file created with perm in tmpDir; the temp is fsynced
// (if sync) and closed; place moves it into its final place and returns the
// final path, whose directory is then fsynced (if sync). On any error the
// temp file is removed, so nothing partial is left behind.
func writeDurable(tmpDir string, perm os.FileMode, sync bool, fill func(f *os.File) error, place func(tmp string) (string, error)) (err error) {
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
		return syncDir(filepath.Dir(dst))
	}
	return nil
}

// createTemp creates a new file with mode perm (before umask) in dir.
// Unlike os.CreateTemp it needs no chmod afterwards.
func createTemp(dir string, perm os.FileMode) (*os.File, error) {
	for {
		name := filepath.Join(dir, ".cmroot-"+strconv.FormatUint(rand.Uint64(), 36))
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, perm)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		return f, err
	}
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// clearDir removes everything inside dir.
func clearDir(dir string) error {
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
