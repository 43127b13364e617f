// Command loopbackfs serves plain go-fuse loopback — fs.NewLoopbackRoot
// mounted by fs.Mount with default options — in the foreground, as the
// baseline cmfs is measured against. It runs in its own process so that the
// FUSE server never shares a Go runtime with the workload. It unmounts and
// exits on SIGINT or SIGTERM, and exits when unmounted from outside.
//
//	loopbackfs BACKING MOUNTPOINT
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: loopbackfs BACKING MOUNTPOINT")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "loopbackfs:", err)
		os.Exit(1)
	}
}

func run(backing, mnt string) error {
	root, err := gofs.NewLoopbackRoot(backing)
	if err != nil {
		return fmt.Errorf("loopback %s: %w", backing, err)
	}
	// nil options: go-fuse's defaults (1 s entry and attribute timeouts,
	// FUSE passthrough where the kernel and privileges allow it).
	server, err := gofs.Mount(mnt, root, nil)
	if err != nil {
		return fmt.Errorf("mount %s: %w", mnt, err)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case <-sig:
			if err := server.Unmount(); err != nil {
				fmt.Fprintln(os.Stderr, "loopbackfs: unmount:", err)
			}
		case <-done:
		}
	}()
	server.Wait()
	close(done)
	return nil
}
