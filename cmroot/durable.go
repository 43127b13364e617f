package cmroot

import (
	"errors"
	"os"
	"path/filepath"

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
