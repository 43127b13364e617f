package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/cmfs-project/cmfs/internal/cli"
	"github.com/cmfs-project/cmfs/internal/procfs"
)

// findMount returns the mountinfo entry mounted at path (the last one:
// mounts stack).
func findMount(path string) (procfs.Mount, bool) {
	ms, err := procfs.Mounts()
	if err != nil {
		return procfs.Mount{}, false
	}
	var found procfs.Mount
	var ok bool
	for _, m := range ms {
		if m.Point == path {
			found, ok = m, true
		}
	}
	return found, ok
}

// isMountpoint says whether something is mounted on dir: its device
// differs from its parent's, or mountinfo lists it (a bind mount of the
// same filesystem). A dead FUSE mount (stat fails with ENOTCONN) counts.
func isMountpoint(dir string) (bool, error) {
	if _, ok := findMount(dir); ok {
		return true, nil
	}
	var st, parent syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		if errors.Is(err, syscall.ENOTCONN) {
			return true, nil
		}
		return false, err
	}
	if err := syscall.Stat(filepath.Dir(dir), &parent); err != nil {
		return false, err
	}
	return st.Dev != parent.Dev, nil
}

// within says whether p is base or lies below it (both clean and absolute).
func within(p, base string) bool {
	rel, err := filepath.Rel(base, p)
	if err != nil {
		return false
	}
	return rel == "." || (rel != ".." && !strings.HasPrefix(rel, "../"))
}

// checkMountpoint validates a mount's mountpoint against its backing and
// state directories (all absolute) and returns it symlink-free.
func checkMountpoint(mnt, backing, state string) (string, error) {
	abs, err := filepath.Abs(mnt)
	if err != nil {
		return "", err
	}
	var st syscall.Stat_t
	if err := syscall.Stat(abs, &st); errors.Is(err, syscall.ENOTCONN) {
		return "", fmt.Errorf("mountpoint %s is busy: a dead FUSE mount is still there (run: cmfs umount %s)", mnt, mnt)
	}
	dir, err := cli.Directory("mountpoint", mnt)
	if err != nil {
		return "", err
	}
	switch {
	case dir == backing:
		return "", fmt.Errorf("mountpoint %s is the backing directory; mount elsewhere", mnt)
	case within(dir, backing):
		return "", fmt.Errorf("mountpoint %s is inside the backing directory %s", mnt, backing)
	case within(backing, dir):
		return "", fmt.Errorf("backing directory %s is inside the mountpoint %s: the mount would hide it", backing, mnt)
	case within(state, dir):
		return "", fmt.Errorf("state directory %s is inside the mountpoint %s", state, mnt)
	}
	busy, err := isMountpoint(dir)
	if err != nil {
		return "", fmt.Errorf("mountpoint %s: %w", mnt, err)
	}
	if busy {
		return "", fmt.Errorf("mountpoint %s is busy: something is already mounted there", mnt)
	}
	return dir, nil
}

// checkStateDirs refuses a state directory or cmroot (all absolute) that
// the mount would show, or that a change through the mount could reach:
// equal to the backing directory or containing it, or inside it below a
// directory the mount shows (renaming that directory would move them). A
// state directory inside the backing directory must be one of its
// entries; a cmroot inside it must be one of its entries or inside such a
// state directory. Both are hidden from the mount then.
func checkStateDirs(backing, state, cmrootDir string) error {
	hiddenState := within(state, backing) && filepath.Dir(state) == backing
	for _, d := range []struct{ what, path string }{{"state directory", state}, {"cmroot", cmrootDir}} {
		switch {
		case d.path == backing:
			return fmt.Errorf("%s %s is the backing directory: the mount would show it; put it elsewhere", d.what, d.path)
		case within(backing, d.path):
			return fmt.Errorf("%s %s contains the backing directory %s; put it elsewhere", d.what, d.path, backing)
		case !within(d.path, backing), filepath.Dir(d.path) == backing:
		case d.what == "cmroot" && hiddenState && within(d.path, state):
		default:
			return fmt.Errorf("%s %s is inside the backing directory %s below %s, which the mount shows; put it directly in %s or outside it",
				d.what, d.path, backing, filepath.Join(backing, strings.SplitN(mustRel(backing, d.path), string(filepath.Separator), 2)[0]), backing)
		}
	}
	if cmrootDir == state {
		return fmt.Errorf("cmroot %s is the state directory; give it a directory of its own", cmrootDir)
	}
	return nil
}

func mustRel(base, p string) string {
	rel, err := filepath.Rel(base, p)
	if err != nil {
		return p
	}
	return rel
}
