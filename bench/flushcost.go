package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// FlushCosts is what making a small change durable costs on a filesystem,
// without FUSE: the bounds of an operation that waits for its durability.
type FlushCosts struct {
	// Flush is one device flush: a 4 KiB pwrite over an allocated block
	// of a file and an fdatasync of it, what the commit path's
	// write-ahead file does once per group and nothing else.
	Flush time.Duration
	// Commit is a new file made durable: create, 4 KiB write, fdatasync,
	// fsync of its directory, close. On a journaling filesystem that is
	// a commit of its journal, which a change cmfs journals under
	// --sync=always also waits for.
	Commit time.Duration
}

// FlushCost measures FlushCosts in dir, each the median of n rounds, and
// removes what it made.
func FlushCost(dir string, n int) (FlushCosts, error) {
	if n < 1 {
		return FlushCosts{}, fmt.Errorf("flush cost: %d rounds", n)
	}
	work, err := os.MkdirTemp(dir, ".flushcost-")
	if err != nil {
		return FlushCosts{}, err
	}
	defer os.RemoveAll(work)
	d, err := os.Open(work)
	if err != nil {
		return FlushCosts{}, err
	}
	defer d.Close()
	block := make([]byte, 4096)
	f, err := os.Create(filepath.Join(work, "flush"))
	if err != nil {
		return FlushCosts{}, err
	}
	defer f.Close()
	// Allocated and on disk before the first timed round, so that each
	// round's fdatasync flushes data alone.
	if _, err := f.Write(block); err != nil {
		return FlushCosts{}, err
	}
	if err := f.Sync(); err != nil {
		return FlushCosts{}, err
	}
	if err := d.Sync(); err != nil {
		return FlushCosts{}, err
	}
	var c FlushCosts
	if c.Flush, err = medianTime(n, func(i int) error {
		block[0] = byte(i)
		if _, err := f.WriteAt(block, 0); err != nil {
			return err
		}
		return unix.Fdatasync(int(f.Fd()))
	}); err != nil {
		return FlushCosts{}, fmt.Errorf("flush cost: %w", err)
	}
	if c.Commit, err = medianTime(n, func(i int) error {
		fd, err := unix.Open(filepath.Join(work, fmt.Sprintf("c%d", i)), unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		if _, err := unix.Write(fd, block); err != nil {
			return err
		}
		if err := unix.Fdatasync(fd); err != nil {
			return err
		}
		return d.Sync()
	}); err != nil {
		return FlushCosts{}, fmt.Errorf("commit cost: %w", err)
	}
	return c, nil
}

// medianTime times n rounds of fn and returns the median.
func medianTime(n int, fn func(i int) error) (time.Duration, error) {
	var l Latencies
	for i := range n {
		start := time.Now()
		if err := fn(i); err != nil {
			return 0, err
		}
		l.Record(time.Since(start))
	}
	return l.Quantile(0.5), nil
}
