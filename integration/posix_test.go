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
// as well (go-fuse v2.12.1, kernel 6.18, this machine), with the reason.
// TestPosix checks at run time that each listed test really fails on
// loopback; such a test is then skipped for cmfs, since cmfs cannot be
// expected to do better than the library it is built on.
var posixSkip = map[string]string{}

// probeEnv, set in a child's environment to "NAME\x00DIR", makes the test
// binary run one posixtest test against DIR (see TestPosixProbe).
const probeEnv = "CMFS_POSIX_PROBE"

// TestPosixProbe is TestPosix's child: one posixtest test in its own
// process, so that a failure on loopback can be recorded without failing
// the run, fd counts (FdLeak) see only the test's own descriptors, and a
// test that hangs can be killed.
func TestPosixProbe(t *testing.T) {
	spec := os.Getenv(probeEnv)
	if spec == "" {
		t.Skip("runs only as a child of TestPosix")
	}
	name, dir, _ := strings.Cut(spec, "\x00")
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
	cmd.Env = append(os.Environ(), probeEnv+"="+name+"\x00"+dir)
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
		res.Status, res.Output = probeFail, err.Error()
	case strings.Contains(string(out), "--- SKIP: TestPosixProbe"):
		res.Status = probeSkip
	}
	return res
}

// mountLoopback mounts plain go-fuse loopback over a fresh directory, in
// this process, configured as go-fuse's own TestPosix does.
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
		MountOptions: fuse.MountOptions{EnableLocks: true, FsName: orig, Name: "loopback"},
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
			fmt.Fprintf(&table, "  %-28s cmfs %-4s loopback %s\n", name, cm.Status, lb.Status)
			reason, listed := posixSkip[name]
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
