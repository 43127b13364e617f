package container

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/cmfs-project/cmfs/internal/durable"
)

// VolumeInfo describes one volume of a Store.
type VolumeInfo struct {
	Path string
	// Capacity and Free are the filesystem's, as statfs reports them (Free
	// is what an unprivileged writer may still use).
	Capacity int64
	Free     int64
	// Used is what the containers on this volume take; Reserved what
	// imports in flight have set aside (2× their size each).
	Used       int64
	Reserved   int64
	Containers int
}

// Names under a volume. A container directory is its id in decimal, which
// none of these can be.
const (
	lockName    = ".lock"
	tmpName     = "tmp"
	copyDir     = "tmp/container-copy"    // tarballs being received
	extractDir  = "tmp/container-extract" // tarballs being unpacked
	newDir      = "tmp/container-new"     // containers being created
	deleteDir   = "tmp/container-delete"  // containers being removed
	stageDir    = "tmp/ec-stage"          // EC index replicas being built (Staged)
	copyBufSize = 1 << 20
)

// tmpDirs are emptied by OpenStore: whatever is in them was left by a
// process that died mid-way.
var tmpDirs = []string{copyDir, extractDir, newDir, deleteDir, stageDir}

// volume is one directory a Store keeps containers in. reserved and used
// are guarded by Store.mu.
type volume struct {
	dir      string
	lock     *os.File
	reserved int64
	used     int64
	n        int
}

// StatfsFunc reports a volume's capacity and free bytes.
type StatfsFunc func(dir string) (capacity, free int64, err error)

// Statfs is the default StatfsFunc: statfs(2), free as non-root sees it.
func Statfs(dir string) (capacity, free int64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, 0, fmt.Errorf("statfs %s: %w", dir, err)
	}
	return int64(st.Blocks) * st.Bsize, int64(st.Bavail) * st.Bsize, nil
}

// openVolume creates dir's layout if needed, takes its lock and empties
// its temp directories.
func openVolume(dir string) (*volume, error) {
	dir = filepath.Clean(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	lf, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(lf.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		lf.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("volume %s: %w", dir, ErrInUse)
		}
		return nil, fmt.Errorf("lock volume %s: %w", dir, err)
	}
	v := &volume{dir: dir, lock: lf}
	for _, d := range tmpDirs {
		p := filepath.Join(dir, d)
		if err := os.MkdirAll(p, 0o755); err != nil {
			lf.Close()
			return nil, err
		}
		// Nobody else holds the volume, so this is what a kill -9 left:
		// a partial tarball, a half-extracted or half-deleted container.
		if err := durable.ClearDir(p); err != nil {
			lf.Close()
			return nil, err
		}
	}
	return v, nil
}

func (v *volume) path(name string) string { return filepath.Join(v.dir, name) }

// dirSize returns the bytes of the regular files under dir.
func dirSize(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, de os.DirEntry, err error) error {
		if err == nil && de.Type().IsRegular() {
			if fi, err := de.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}
