package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cmfs-project/cmfs/internal/loopfs"
)

// Scratch is a filesystem made for a group of rows instead of the run's
// own: an image file (sparse, Size bytes) on a loop device, made with
// mkfs.Type. PerColumn gives every implementation a fresh one of its own,
// so that no column's runs start from what another's left on the disk
// (on ext4 without a journal, for one, a create skips every inode deleted
// in the last minutes, whoever deleted it).
type Scratch struct {
	Type      string // "xfs", "ext4"
	Size      int64
	PerColumn bool
}

// OnScratch runs workloads as Run does, with every implementation mounted
// over a backing directory of its own on a filesystem sc made for them in
// dir. The mounts, the filesystems, the loop devices and the images are
// all gone when OnScratch returns. Where the filesystem cannot be made
// here (not root, no mkfs) every row says why in every column, as does
// each implementation that does not mount.
func OnScratch(ctx context.Context, cfg Config, dir string, sc Scratch, impls []Impl, workloads []Workload, p Progress) (rows []*Row, err error) {
	failed := map[string]error{}
	defer func() {
		if len(rows) == 0 {
			for _, w := range workloads {
				rows = append(rows, &Row{Name: w.Name, Unit: w.Unit, Targets: w.Targets, Best: cfg.Best, Threads: w.Threads})
			}
		}
		for _, r := range rows {
			for name, ferr := range failed {
				r.Fail(name, ferr)
			}
		}
	}()
	if why := loopfs.Missing(sc.Type); why != "" {
		for _, impl := range impls {
			failed[impl.Name()] = fmt.Errorf("no %s: %s", sc.Type, why)
		}
		return nil, nil
	}
	var filesystems []*loopfs.FS
	var subjects []Subject
	defer func() {
		for i := len(subjects) - 1; i >= 0; i-- {
			if cerr := subjects[i].Mount.Close(); cerr != nil && err == nil {
				err = fmt.Errorf("%s over %s: %w", subjects[i].Name, sc.Type, cerr)
			}
		}
		for i := len(filesystems) - 1; i >= 0; i-- {
			if cerr := filesystems[i].Close(); cerr != nil && err == nil {
				err = cerr
			}
		}
	}()
	// fsFor returns the filesystem named name, made on first use.
	made := map[string]*loopfs.FS{}
	fsFor := func(name string) (*loopfs.FS, error) {
		if fs := made[name]; fs != nil {
			return fs, nil
		}
		mnt := filepath.Join(dir, name)
		if err := os.MkdirAll(mnt, 0o755); err != nil {
			return nil, err
		}
		fs, err := loopfs.Make(filepath.Join(dir, name+".img"), mnt, sc.Type, sc.Size)
		if err != nil {
			return nil, err
		}
		filesystems = append(filesystems, fs)
		made[name] = fs
		return fs, nil
	}
	for _, impl := range impls {
		name := sc.Type
		if sc.PerColumn {
			name += "-" + DirName(impl.Name())
		}
		fs, err := fsFor(name)
		if err != nil {
			failed[impl.Name()] = err
			continue
		}
		backing := filepath.Join(fs.Dir, DirName(impl.Name()))
		mp := filepath.Join(dir, "mnt-"+DirName(impl.Name()))
		for _, d := range []string{backing, mp} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return nil, err
			}
		}
		m, err := impl.Mount(ctx, backing, mp)
		if err != nil {
			failed[impl.Name()] = fmt.Errorf("mount over %s failed: %w", sc.Type, err)
			continue
		}
		subjects = append(subjects, Subject{Name: impl.Name(), Mount: m})
	}
	if len(subjects) == 0 {
		return nil, nil
	}
	return Run(ctx, cfg, workloads, subjects, p)
}

// XFSImageSize is room on the XFS image for one large file per column,
// and as much again for what copy-on-write and the state directories
// take meanwhile.
func XFSImageSize(cfg Config, columns int) int64 {
	return 2*cfg.FileSize*int64(columns) + 1<<30
}

// DirName is a column's name as a file name: "cmfs interval" is
// cmfs-interval.
func DirName(column string) string { return strings.ReplaceAll(column, " ", "-") }
