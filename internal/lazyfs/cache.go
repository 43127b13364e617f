package lazyfs

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// cache is the volatile state of one mount: the overlays of its inodes,
// keyed by the mount's inode number (hard links share one). A crash drops
// it whole; a remount starts a new one.
type cache struct {
	// mu serialises every overlay operation: this is a test filesystem,
	// and one lock makes it plainly correct.
	mu       sync.Mutex
	overlays map[uint64]*overlay
	dead     bool
}

func newCache() *cache { return &cache{overlays: map[uint64]*overlay{}} }

// errCrashed is what a survivor of a crash gets from the old mount.
var errCrashed = syscall.EIO

// withOverlay runs fn on ino's overlay, made from the open file fd (or,
// with fd < 0, from path) if the inode has none yet.
func (c *cache) withOverlay(ino uint64, fd int, path string, fn func(*overlay) error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		return errCrashed
	}
	o := c.overlays[ino]
	if o == nil {
		if fd >= 0 {
			// The descriptor may be write-only, or its name gone.
			path = fmt.Sprintf("/proc/self/fd/%d", fd)
		}
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			return err
		}
		if o, err = newOverlay(f); err != nil {
			f.Close()
			return err
		}
		c.overlays[ino] = o
	}
	if err := fn(o); err != nil {
		return err
	}
	// A write takes its timestamps at once, like other metadata: cmfs,
	// for one, knows content by size, mtime and ctime.
	now := unix.Timespec{Nsec: unix.UTIME_NOW}
	omit := unix.Timespec{Nsec: unix.UTIME_OMIT}
	self := fmt.Sprintf("/proc/self/fd/%d", o.under.Fd())
	return unix.UtimesNanoAt(unix.AT_FDCWD, self, []unix.Timespec{omit, now}, 0)
}

// read reads ino through its overlay; ok is false if it has none.
func (c *cache) read(ino uint64, p []byte, off int64) (n int, ok bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	o := c.overlays[ino]
	if o == nil {
		return 0, false, nil
	}
	n, err = o.ReadAt(p, off)
	return n, true, err
}

// size returns ino's logical size; ok is false if it has no overlay.
func (c *cache) size(ino uint64) (size int64, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if o := c.overlays[ino]; o != nil {
		return o.size, true
	}
	return 0, false
}

// sync writes ino's overlay back, if it has one, and forgets it.
func (c *cache) sync(ino uint64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		return errCrashed
	}
	o := c.overlays[ino]
	if o == nil {
		return nil
	}
	if err := o.Sync(); err != nil {
		return err
	}
	delete(c.overlays, ino)
	return o.Close()
}

// forget drops ino's overlay unsynced: its inode number now names a new
// file.
func (c *cache) forget(ino uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if o := c.overlays[ino]; o != nil {
		o.Close()
		delete(c.overlays, ino)
	}
}

// syncAll writes every overlay back: a clean shutdown.
func (c *cache) syncAll() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for ino, o := range c.overlays {
		errs = append(errs, o.Sync(), o.Close())
		delete(c.overlays, ino)
	}
	return errors.Join(errs...)
}

// crash drops every overlay unsynced; from now on writes through the
// mount fail.
func (c *cache) crash() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dead = true
	for ino, o := range c.overlays {
		o.Close()
		delete(c.overlays, ino)
	}
}
