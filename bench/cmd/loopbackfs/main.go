// Command loopbackfs serves plain go-fuse loopback — fs.NewLoopbackRoot
// mounted by fs.Mount with default options — in the foreground, as the
// baseline cmfs is measured against. It runs in its own process so that the
// FUSE server never shares a Go runtime with the workload. It unmounts and
// exits on SIGINT or SIGTERM, and exits when unmounted from outside.
//
// With -killpriv it also asks for FUSE_HANDLE_KILLPRIV_V2, as cmfs does:
// without it the kernel asks the server for security.capability
// (GETXATTR) before every write, passthrough or not. That column measures
// what the kernel's passthrough path costs a write, with no server work.
//
//	loopbackfs [-killpriv] BACKING MOUNTPOINT
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

func main() {
	killpriv := flag.Bool("killpriv", false, "ask for FUSE_HANDLE_KILLPRIV_V2")
	flag.Parse()
	if flag.NArg() != 2 {
		fmt.Fprintln(os.Stderr, "usage: loopbackfs [-killpriv] BACKING MOUNTPOINT")
		os.Exit(2)
	}
	if err := run(flag.Arg(0), flag.Arg(1), *killpriv); err != nil {
		fmt.Fprintln(os.Stderr, "loopbackfs:", err)
		os.Exit(1)
	}
}

func run(backing, mnt string, killpriv bool) error {
	root, err := gofs.NewLoopbackRoot(backing)
	if err != nil {
		return fmt.Errorf("loopback %s: %w", backing, err)
	}
	// nil options: go-fuse's defaults (1 s entry and attribute timeouts,
	// FUSE passthrough where the kernel and privileges allow it).
	var opts *gofs.Options
	if killpriv {
		// Options of our own lose the defaults nil would give: ask for
		// them again.
		sec := time.Second
		opts = &gofs.Options{EntryTimeout: &sec, AttrTimeout: &sec,
			MountOptions: fuse.MountOptions{ExtraCapabilities: fuse.CAP_HANDLE_KILLPRIV_V2}}
	}
	server, err := gofs.Mount(mnt, root, opts)
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
