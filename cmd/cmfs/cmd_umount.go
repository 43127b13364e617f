package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/cmfs-project/cmfs/internal/cli"
	"github.com/cmfs-project/cmfs/internal/procfs"
	"github.com/cmfs-project/cmfs/internal/statedir"
)

type umountOptions struct{}

func newUmountCmd(g *globalOptions) *cobra.Command {
	var opts umountOptions
	return &cobra.Command{
		Use:   "umount MOUNTPOINT",
		Short: "Unmount a cmfs mount",
		Long: `Unmount the mount at MOUNTPOINT. The mount process flushes, closes the
journal and cmroot, and exits 0; umount waits for that (up to 10s) when it
can find the process.`,
		Example: "  cmfs umount /mnt/warehouse",
		Args:    exactArgs(1, "MOUNTPOINT"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runUmount(cmd.Context(), g, opts, args)
		},
	}
}

func runUmount(ctx context.Context, g *globalOptions, _ umountOptions, args []string) error {
	mnt, err := filepath.Abs(args[0])
	if err != nil {
		return err
	}
	// A dead mount answers stat with ENOTCONN: don't resolve symlinks
	// through it.
	if resolved, err := filepath.EvalSymlinks(mnt); err == nil {
		mnt = resolved
	}
	entry, listed := findMount(mnt)
	mounted, err := isMountpoint(mnt)
	if err != nil && !listed {
		return fmt.Errorf("%s: %w", args[0], cli.UnwrapPath(err))
	}
	if !mounted && !listed {
		return fmt.Errorf("%s is not mounted", args[0])
	}
	owner := mountOwner(entry, mnt)
	if err := unmount(mnt); err != nil {
		return err
	}
	if owner > 0 {
		waitExit(ctx, owner, 10*time.Second)
	}
	return nil
}

// unmount unmounts mnt: directly when root, else through fusermount3.
func unmount(mnt string) error {
	if os.Geteuid() == 0 {
		err := syscall.Unmount(mnt, 0)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, syscall.EBUSY):
			return fmt.Errorf("unmount %s: busy: files are open or a process works in it", mnt)
		case errors.Is(err, syscall.EINVAL):
			return fmt.Errorf("%s is not mounted", mnt)
		}
		// EPERM in a user namespace: fusermount3 may still do it.
	}
	out, err := exec.Command("fusermount3", "-u", mnt).CombinedOutput()
	if err != nil {
		return fmt.Errorf("unmount %s: %s", mnt, firstLine(out, err))
	}
	return nil
}

// mountOwner finds the pid of the cmfs process serving the mount at mnt,
// through the mount record in its state directory: the default one below
// the backing directory the mount names as its source. 0 if unknown.
func mountOwner(m procfs.Mount, mnt string) int {
	if !filepath.IsAbs(m.Source) {
		return 0
	}
	for _, state := range []string{filepath.Join(m.Source, statedir.Name), m.Source} {
		rec, err := statedir.ReadRecord(state)
		if err == nil && rec.Mountpoint == mnt && rec.PID > 0 {
			return rec.PID
		}
	}
	return 0
}

// waitExit polls until process pid is gone or the timeout passes.
func waitExit(ctx context.Context, pid int, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if !alive(pid) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// alive says whether process pid exists and is not a zombie waiting for
// its parent (a test harness, say) to reap it.
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return !errors.Is(err, os.ErrNotExist)
	}
	// "pid (comm) S ...": the state follows the last ')'.
	if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) {
		return b[i+2] != 'Z'
	}
	return true
}
