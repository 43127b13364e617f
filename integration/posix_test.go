package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/hanwen/go-fuse/v2/posixtest"
)

// posixSkip lists the posixtest tests that fail on plain go-fuse loopback
// as well (go-fuse v2.12.1, kernel 6.18, ext4-backed /tmp), with the
// reason. TestPosix runs each listed test on loopback too and skips it
// for cmfs only while it fails there.
//
// Besides these, XAttrLarge skips itself on both cmfs and loopback (the
// backing file system refuses large xattrs; it skips natively too).
var posixSkip = map[string]string{
	// Takes an F_SETLK write lock and expects a second F_SETLK read lock
	// from the same process to fail with EAGAIN; POSIX record locks of
	// one process never conflict, so it fails natively as well (go-fuse's
	// own TestAll skips it: "TODO - fix this test").
	"FcntlFlockLocksFile": "expects two fcntl locks of one process to conflict; fails natively too",
}

// posixBeyondLoopback lists the posixtest tests that plain go-fuse
// loopback fails or skips and cmfs must pass, as the native filesystem
// does, with what makes cmfs pass them.
var posixBeyondLoopback = map[string]string{
	// fstat of an open directory that a rename replaced: the kernel
	// sends no handle, and the loopback has no path left for the node.
	"RenameOpenDir": "a node holds its directory open while it has handles (fusefs openDir)",
}

// probeEnv, set in a child's environment to a posixtest name, makes the
// test binary run that test against the directory in probeDirEnv (see
// TestPosixProbe).
const (
	probeEnv    = "CMFS_POSIX_PROBE"
	probeDirEnv = "CMFS_POSIX_PROBE_DIR"
)

// TestPosixProbe is TestPosix's child: one posixtest test in its own
// process, so that a failure on loopback can be recorded without failing
// the run, fd counts (FdLeak) see only the test's own descriptors, and a
// test that hangs can be killed.
func TestPosixProbe(t *testing.T) {
	name, dir := os.Getenv(probeEnv), os.Getenv(probeDirEnv)
	if name == "" {
		t.Skip("runs only as a child of TestPosix")
	}
	fn, ok := posixtest.All[name]
	if !ok {
		t.Fatalf("no posixtest %q", name)
	}
	fn(t, dir)
}

type probeStatus string

const (
	probePass probeStatus = "pass"
	probeFail probeStatus = "FAIL"
	probeSkip probeStatus = "skip"
)

type probeResult struct {
	Status probeStatus
	Output string
}

// probe runs posixtest test name against dir in a child process.
func probe(t *testing.T, name, dir string) probeResult {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return probeResult{probeFail, fmt.Sprintf("mkdir %s: %v", dir, err)}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestPosixProbe$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), probeEnv+"="+name, probeDirEnv+"="+dir)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	res := probeResult{Status: probePass, Output: string(out)}
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		res.Status, res.Output = probeFail, fmt.Sprintf("killed after 60s (hung?)\n%s", out)
	case errors.As(err, &exit):
		res.Status = probeFail
	case err != nil:
		t.Fatalf("run posixtest probe %s: %v", name, err)
	case strings.Contains(string(out), "--- SKIP: TestPosixProbe"):
		res.Status = probeSkip
	}
	return res
}

// mountLoopback mounts plain go-fuse loopback over a fresh directory, in
// this process, configured as go-fuse's example/loopback command is
// (1s entry and attribute timeouts, no lock forwarding). go-fuse's own
// TestPosix adds EnableLocks, with which FcntlFlockLocksFile passes
// although native file systems fail it (two F_SETLK locks of one process
// never conflict in POSIX).
func mountLoopback(t *testing.T) string {
	t.Helper()
	requireFUSE(t)
	dir := t.TempDir()
	orig, mnt := filepath.Join(dir, "orig"), filepath.Join(dir, "mnt")
	for _, d := range []string{orig, mnt} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	root, err := gofs.NewLoopbackRoot(orig)
	if err != nil {
		t.Fatal(err)
	}
	sec := time.Second
	server, err := gofs.Mount(mnt, root, &gofs.Options{
		EntryTimeout: &sec,
		AttrTimeout:  &sec,
		MountOptions: fuse.MountOptions{FsName: orig, Name: "loopback"},
	})
	if err != nil {
		t.Fatalf("mount loopback: %v", err)
	}
	t.Cleanup(func() {
		if err := server.Unmount(); err != nil {
			t.Errorf("unmount loopback %s: %v", mnt, err)
			forceUnmount(t, mnt)
		}
		server.Wait()
	})
	return mnt
}

func TestPosix(t *testing.T) {
	requireFUSE(t)
	loop := mountLoopback(t)
	m := mount(t)
	native := t.TempDir()
	var names []string
	for name := range posixtest.All {
		names = append(names, name)
	}
	sort.Strings(names)
	var table strings.Builder
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			lb := probe(t, name, filepath.Join(loop, name))
			cm := probe(t, name, filepath.Join(m.Mnt, name))
			// Native, for the record only.
			nat := probe(t, name, filepath.Join(native, name))
			fmt.Fprintf(&table, "  %-28s cmfs %-4s  loopback %-4s  native %s\n", name, cm.Status, lb.Status, nat.Status)
			reason, listed := posixSkip[name]
			if why, must := posixBeyondLoopback[name]; must && cm.Status != probePass {
				t.Errorf("%s on cmfs, must pass (%s):\n%s", cm.Status, why, cm.Output)
				return
			}
			switch {
			case cm.Status == probePass:
				if listed {
					t.Logf("skip list says %q, but it passes on cmfs (loopback: %s)", reason, lb.Status)
				}
			case cm.Status == probeSkip:
				if lb.Status == probePass {
					t.Errorf("skips itself on cmfs but passes on loopback:\n%s", cm.Output)
				} else {
					t.Skipf("skips itself on cmfs and on loopback:\n%s", cm.Output)
				}
			case lb.Status == probePass:
				t.Errorf("fails on cmfs, passes on plain go-fuse loopback:\n%s", cm.Output)
			case listed:
				t.Skipf("fails on plain go-fuse loopback too (%s)", reason)
			default:
				t.Errorf("fails on cmfs and on plain go-fuse loopback, and is not in posixSkip: add it with the reason\ncmfs:\n%s\nloopback:\n%s",
					cm.Output, lb.Output)
			}
			if cm.Status == probeFail && !isMounted(m.Mnt) {
				t.Fatalf("the cmfs mount is gone")
			}
		})
	}
	t.Logf("posixtest results:\n%s", table.String())
}
