package lazyfs

import (
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// FS is a lazyfs mount of a directory.
type FS struct {
	under, mnt string

	mu     sync.Mutex
	c      *cache
	server *fuse.Server
	// detached counts servers of crashed mounts that something still
	// held, which serve on until the last user lets go.
	detached sync.WaitGroup
}

// Mount mounts under at mnt. It needs root and /dev/fuse.
func Mount(under, mnt string) (*FS, error) {
	f := &FS{under: under, mnt: mnt}
	if err := f.mount(); err != nil {
		return nil, err
	}
	return f, nil
}

// Mountpoint returns where f is mounted.
func (f *FS) Mountpoint() string { return f.mnt }

// Under returns the directory f keeps its durable state in.
func (f *FS) Under() string { return f.under }

func (f *FS) mount() error {
	lb, err := gofs.NewLoopbackRoot(f.under)
	if err != nil {
		return fmt.Errorf("lazyfs: mount %s: %w", f.under, err)
	}
	c := newCache()
	root := &node{LoopbackNode: lb.(*gofs.LoopbackNode), c: c}
	root.RootData.RootNode = root
	// Zero timeouts: stat must always ask, so it sees the overlay's size
	// and, after a crash, only what survived.
	var zero time.Duration
	opts := &gofs.Options{
		EntryTimeout:    &zero,
		AttrTimeout:     &zero,
		NegativeTimeout: &zero,
		MountOptions: fuse.MountOptions{
			FsName:      "lazyfs",
			Name:        "lazyfs",
			DirectMount: true,
			AllowOther:  true,
			// See the package doc: a filesystem stacked on this one
			// can then use passthrough itself.
			DisabledCapabilities: fuse.CAP_PASSTHROUGH,
		},
	}
	server, err := gofs.Mount(f.mnt, root, opts)
	if err != nil {
		return fmt.Errorf("lazyfs: mount %s on %s: %w", f.under, f.mnt, err)
	}
	f.c, f.server = c, server
	return nil
}

// Crash simulates a power failure: every byte not fsynced is lost, the
// mount is detached and mounted afresh at the same mountpoint. The
// processes that used it should be dead (kill -9) and any filesystem
// stacked on it unmounted; a mount something still holds is detached
// lazily, and writes through it fail with EIO.
func (f *FS) Crash() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.c.crash()
	if err := f.detach(); err != nil {
		return err
	}
	return f.mount()
}

// detach unmounts the current server, lazily if it is busy.
func (f *FS) detach() error {
	server := f.server
	f.server = nil
	if server.Unmount() == nil {
		return nil
	}
	if err := syscall.Unmount(f.mnt, syscall.MNT_DETACH); err != nil {
		return fmt.Errorf("lazyfs: detach %s: %w", f.mnt, err)
	}
	f.detached.Add(1)
	go func() {
		defer f.detached.Done()
		server.Wait()
	}()
	return nil
}

// Unmount shuts down cleanly: every overlay is written back first, as the
// kernel flushes dirty pages at umount. It waits up to ten seconds for the
// servers of crashed mounts that were still held.
func (f *FS) Unmount() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.server == nil {
		return nil
	}
	err := f.c.syncAll()
	f.c.crash()
	err = errors.Join(err, f.detach())
	done := make(chan struct{})
	go func() {
		f.detached.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		err = errors.Join(err, fmt.Errorf("lazyfs: %s: a crashed mount is still in use", f.mnt))
	}
	return err
}
