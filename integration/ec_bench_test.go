package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestBenchEC is the EC part of `make bench` (CMFS_EC_BENCH=1; size in
// GiB by CMFS_EC_BENCH_GIB, default 6, the issue's): on the twelve-node
// cluster of TestClusterEC, one ec:rs-6-3-1024k container of that many
// 1 GiB files, in pull mode (every target rebuilds its own index):
// storage on disk against three whole copies, a healthy read of one
// 1 GiB block against a read with data index 1's node down, the bytes
// moved to rebuild one index against the container, and the peak RSS
// (VmHWM) of the nodes that rebuild three indexes against an idle node's.
// It asserts nothing about speed: it prints.
func TestBenchEC(t *testing.T) {
	if os.Getenv("CMFS_EC_BENCH") == "" {
		t.Skip("CMFS_EC_BENCH=1 runs it (make bench)")
	}
	gib := 6
	if v := os.Getenv("CMFS_EC_BENCH_GIB"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("CMFS_EC_BENCH_GIB=%q: want a whole number of GiB ≥ 1", v)
		}
		gib = n
	}
	c := startECCluster(t, "--push=false", "--container-size", fmt.Sprintf("%dGiB", gib+1))
	c.ecWait = 20 * time.Minute
	dir := t.TempDir()
	var files []string
	for i := range gib {
		files = append(files, randomFile(t, dir, fmt.Sprintf("f%d", i), 1<<30))
	}
	raw := int64(gib) << 30
	start := time.Now()
	id := c.nodes["dn2"].fillReplication(t, ecScheme, files...)
	put := time.Since(start)
	start = time.Now()
	holders := c.waitEC(t, id)
	encode := time.Since(start)

	var onDisk int64
	for _, n := range c.nodes {
		onDisk += duBytes(t, filepath.Join(n.Volume(), id))
	}
	row := func(name, value, base, ratio string) { t.Logf("| %s | %s | %s | %s |", name, value, base, ratio) }
	t.Logf("EC bench: ec:rs-6-3-1024k, %d GiB in %d files of 1 GiB, 12 nodes on 4 racks, pull mode; put %v, encoded and spread in %v",
		gib, gib, put.Round(time.Millisecond), encode.Round(time.Millisecond))
	t.Logf("| workload | ec | baseline | ratio |")
	t.Logf("|---|---:|---:|---:|")
	row("storage on disk ÷ data", fmt.Sprintf("%.3f×", float64(onDisk)/float64(raw)), "3.000× (replica:3)", fmt.Sprintf("%.2f of replica:3", float64(onDisk)/float64(3*raw)))

	read := func() time.Duration {
		t.Helper()
		start := time.Now()
		res, out := c.getCluster(t, files[0])
		d := time.Since(start)
		if res.Code != 0 {
			t.Fatalf("get --cluster: %v\ncoordinator (exited %v) stderr:\n%s", res, c.coord.p.exited(), c.coord.p.stderrNow())
		}
		os.Remove(out)
		return d
	}
	healthy := read()
	victim := holders[1]
	c.nodes[victim].kill9(t)
	degraded := read()
	c.nodes[victim].restart(t)
	holders = c.waitEC(t, id)
	mbps := func(d time.Duration) string { return fmt.Sprintf("%.0f MB/s", float64(1<<30)/1e6/d.Seconds()) }
	row("read of a 1 GiB block, index 1's node down", mbps(degraded), mbps(healthy)+" (healthy)", fmt.Sprintf("%.2f", healthy.Seconds()/degraded.Seconds()))

	idle := vmHWM(t, c.nodes["dn1"].p.cmd.Process.Pid)
	victims := pickHolders(holders, 3)
	var sizes []int64
	for _, v := range victims {
		ci, _ := c.nodes[v].find(t, id)
		sizes = append(sizes, ci.Bytes)
	}
	before := c.sentBytes(t, victims...)
	start = time.Now()
	for _, v := range victims {
		c.nodes[v].kill9(t)
	}
	after := c.waitEC(t, id, victims...)
	rebuild := time.Since(start)
	moved := c.sentBytes(t, victims...) - before
	var rebuilt []string
	for i, n := range after {
		if holders[i] != n {
			rebuilt = append(rebuilt, n)
		}
	}
	var peak int64
	for _, n := range rebuilt {
		peak = max(peak, vmHWM(t, c.nodes[n].p.cmd.Process.Pid))
	}
	var index int64
	for _, s := range sizes {
		index += s
	}
	index /= int64(len(sizes))
	row("bytes moved to rebuild 3 indexes ÷ one index", fmt.Sprintf("%.2f× (%.2f× per index)", float64(moved)/float64(index), float64(moved)/float64(index)/3), "6× per index (D)", "")
	row("bytes moved to rebuild 3 indexes ÷ container", fmt.Sprintf("%.2f×", float64(moved)/float64(raw)), "", "")
	row(fmt.Sprintf("peak RSS of the rebuilding nodes %v", rebuilt), fmt.Sprintf("%d MiB", peak>>20), fmt.Sprintf("%d MiB (idle coordinator)", idle>>20), "target ≤ 256 MiB")
	row("rebuild of 3 indexes, kill to HEALTHY", rebuild.Round(time.Millisecond).String(), "", "")
}

var hwmLine = regexp.MustCompile(`(?m)^VmHWM:\s+(\d+) kB`)

// vmHWM is a process's peak resident set, in bytes.
func vmHWM(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	m := hwmLine.FindSubmatch(b)
	if m == nil {
		t.Fatalf("/proc/%d/status has no VmHWM", pid)
	}
	kb, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return kb << 10
}

// duBytes is what `du` counts under path (0 if it is not there).
func duBytes(t *testing.T, path string) int64 {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		return 0
	}
	out, err := exec.Command("du", "-s", "-B1", path).Output()
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(out))
	n, _ := strconv.ParseInt(f[0], 10, 64)
	return n
}

