package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cmfs-project/cmfs/internal/loopfs"
)

// OnXFS runs workloads as Run does, with every implementation mounted
// over a backing directory of its own on one XFS filesystem made for
// them: an image file in dir (sparse, size bytes) on a loop device, with
// reflinks. The mounts, the filesystem, the loop device and the image are
// all gone when OnXFS returns. Where XFS cannot be made here (not root, no
// mkfs.xfs) every row says why in every column, as does each
// implementation that does not mount.
func OnXFS(ctx context.Context, cfg Config, dir string, size int64, impls []Impl, workloads []Workload, p Progress) (rows []*Row, err error) {
	failed := map[string]error{}
	defer func() {
		if len(rows) == 0 {
			for _, w := range workloads {
				rows = append(rows, &Row{Name: w.Name, Unit: w.Unit, Targets: w.Targets, Best: cfg.Best})
			}
		}
		for _, r := range rows {
			for name, ferr := range failed {
				r.Fail(name, ferr)
			}
		}
	}()
	failAll := func(why error) {
		for _, impl := range impls {
			failed[impl.Name()] = why
		}
	}
	if why := loopfs.Missing("xfs"); why != "" {
		failAll(errors.New("no XFS: " + why))
		return nil, nil
	}
	mnt := filepath.Join(dir, "xfs")
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		return nil, err
	}
	fs, err := loopfs.Make(filepath.Join(dir, "xfs.img"), mnt, "xfs", size)
	if err != nil {
		failAll(err)
		return nil, nil
	}
	defer func() {
		if cerr := fs.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	var subjects []Subject
	defer func() {
		for i := len(subjects) - 1; i >= 0; i-- {
			if cerr := subjects[i].Mount.Close(); cerr != nil && err == nil {
				err = fmt.Errorf("%s over XFS: %w", subjects[i].Name, cerr)
			}
		}
	}()
	for _, impl := range impls {
		backing := filepath.Join(mnt, impl.Name())
		mp := filepath.Join(dir, "mnt-"+impl.Name())
		for _, d := range []string{backing, mp} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return nil, err
			}
		}
		m, err := impl.Mount(ctx, backing, mp)
		if err != nil {
			failed[impl.Name()] = fmt.Errorf("mount over XFS failed: %w", err)
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
