package integration

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/internal/procfs"
)

// TestDemo runs scripts/demo.sh (what make demo runs, without its
// installs) with the binaries under test, so that the story it tells
// keeps working: each chapter's closing line must be in its output, and
// it must leave neither its temporary directory nor a process behind.
func TestDemo(t *testing.T) {
	requireFUSE(t)
	t.Setenv("CMFS", cmfsBin)
	t.Setenv("REPLICAD", replicadPath(t))
	res := runTool(t, 2*time.Minute, "bash", filepath.Join(moduleRoot, "scripts", "demo.sh"))
	if res.Code != 0 {
		t.Fatalf("demo.sh: %v", res)
	}
	for _, want := range []string{
		`(?m)^the delete is event \d+$`,
		`(?m)^back: order-1,10\.00 order-2,25\.00 order-3,30\.00 $`,
		`(?m)^BOOTSTRAP up to event \d+$`,
		`(?m)^loaded \S+/bootstrap-\d+ into \S+/replica: events 0\.\.\d+`,
		`(?m)^replica's part-0: order-1,10\.00 order-2,25\.00 order-3,30\.00 $`,
		`(?m)^follow: replica/sales\.db/orders/dt=2024-01-03/part-0 appeared: order-4,40\.00$`,
		`(?m)^follow exited with status 0$`,
		`(?m)^container \d+ on 127\.0\.0\.1:\d+: CLOSED; push`,
		`(?m)^dn2 serves warehouse/sales\.db/orders/dt=2024-01-01/part-0 byte for byte$`,
		`(?m)^healed: dn[123] holds container \d+ after dn[23] died`,
		`== Done`,
	} {
		if !regexp.MustCompile(want).MatchString(res.Stdout) {
			t.Errorf("demo output has no line matching %s", want)
		}
	}
	if t.Failed() {
		t.Logf("demo output:\n%s\nstderr:\n%s", res.Stdout, res.Stderr)
	}
	m := regexp.MustCompile(`(?m)^working in (/tmp/cmfs-demo\.\w+), removed on exit$`).FindStringSubmatch(res.Stdout)
	if m == nil {
		t.Fatalf("demo output names no working directory")
	}
	if _, err := os.Stat(m[1]); !os.IsNotExist(err) {
		t.Errorf("demo left %s behind (stat: %v)", m[1], err)
	}
	if pids := processesIn(m[1]); len(pids) > 0 {
		t.Errorf("demo left processes %v running in or on %s; killing them", pids, m[1])
		for _, pid := range pids {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// processesIn returns the processes whose working directory is dir or below
// it (deleted or not), or whose command line names a path in it.
func processesIn(dir string) []int {
	byArgs := procfs.PIDs(func(args []string) bool {
		return slices.ContainsFunc(args, func(a string) bool { return strings.Contains(a, dir) })
	})
	var byCwd []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if cwd, err := os.Readlink(filepath.Join("/proc", e.Name(), "cwd")); err == nil && (cwd == dir || strings.HasPrefix(cwd, dir+"/") || strings.HasPrefix(cwd, dir+" ")) {
			byCwd = append(byCwd, pid)
		}
	}
	pids := append(byArgs, byCwd...)
	slices.Sort(pids)
	return slices.Compact(pids)
}
