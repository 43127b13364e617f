package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/cmfs-project/cmfs/bench"
	"github.com/cmfs-project/cmfs/container"
	"github.com/cmfs-project/cmfs/internal/checksum"
)

// --- EC: ec:rs-6-3-1024k containers in a cluster of twelve nodes ---
//
// Every EC workload starts its own cluster: dn1 (the coordinator) … dn12
// on four racks, r1 dn1…dn4, r2 dn5…dn8, r3 dn9 dn10, r4 dn11 dn12, with
// the integration tests' short timings, and puts its container on dn2,
// which the coordinator has encoded into nine indexes on nine nodes.

const (
	ecScheme  = "ec:rs-6-3-1024k"
	ecData    = 6
	ecIndexes = 9
	ecNodes   = 12
	ecStripe  = ecData << 20 // bytes of data in a stripe
)

func ecRack(i int) string {
	switch {
	case i <= 4:
		return "r1"
	case i <= 8:
		return "r2"
	case i <= 10:
		return "r3"
	}
	return "r4"
}

// ecCluster is a running EC cluster.
type ecCluster struct {
	nodes  []*node // dn1 first
	byName map[string]*node
	coord  *node
	idle   int64 // the highest VmRSS of a node once all had joined, bytes
}

func (c *ecCluster) stop() {
	for i := len(c.nodes) - 1; i >= 0; i-- {
		if c.nodes[i].alive() {
			c.nodes[i].stop()
		}
	}
}

// startEC starts an EC cluster in dir: push or pull mode, nodes DEAD
// after deadAfter without a heartbeat, containers closing at
// containerSize.
func (r *runner) startEC(ctx context.Context, dir string, push bool, deadAfter, rmInterval time.Duration, containerSize int64) (c *ecCluster, err error) {
	c = &ecCluster{byName: map[string]*node{}}
	defer func() {
		if err != nil {
			c.stop()
		}
	}()
	for i := 1; i <= ecNodes; i++ {
		name := fmt.Sprintf("dn%d", i)
		metrics, err := freeAddr()
		if err != nil {
			return nil, err
		}
		flags := []string{"--rack", ecRack(i), "--metrics", metrics, "--heartbeat", "100ms",
			"--container-size", fmt.Sprint(containerSize), fmt.Sprintf("--push=%t", push)}
		if i == 1 {
			flags = append(flags, "--coordinator", "--cluster-store", filepath.Join(dir, "cluster.db"),
				"--stale-after", "1s", "--dead-after", deadAfter.String(), "--rm-interval", rmInterval.String())
		} else {
			flags = append(flags, "--join", c.coord.addr)
		}
		n, err := r.serve(ctx, name, filepath.Join(dir, name), flags...)
		if err != nil {
			return nil, err
		}
		c.nodes = append(c.nodes, n)
		c.byName[name] = n
		if i == 1 {
			c.coord = n
		}
	}
	err = r.pollAdmin(ctx, c.coord, 30*time.Second, fmt.Sprintf("%d nodes HEALTHY", ecNodes), func(st adminState) bool {
		healthy := 0
		for _, n := range st.nodes {
			if n.Health == "HEALTHY" {
				healthy++
			}
		}
		return healthy == ecNodes
	})
	if err != nil {
		return nil, err
	}
	for _, n := range c.nodes {
		rss, err := bench.ProcStatus(n.pid(), "VmRSS")
		if err != nil {
			return nil, err
		}
		c.idle = max(c.idle, rss)
	}
	return c, nil
}

// restart starts a killed node again on its address and volume, and
// waits until the coordinator has it HEALTHY.
func (r *runner) restart(ctx context.Context, c *ecCluster, n *node) error {
	m, err := r.serveAt(ctx, n.name, n.addr, n.volume, n.extra...)
	if err != nil {
		return err
	}
	*n = *m
	return r.pollAdmin(ctx, c.coord, 30*time.Second, n.name+" HEALTHY again", func(st adminState) bool {
		return st.nodes[n.name].Health == "HEALTHY"
	})
}

// waitEC waits until container id is HEALTHY with its nine indexes
// CLOSED on nine nodes outside not and no other replica outside not, as
// the coordinator and every holder say, and returns the holder of each
// index.
func (r *runner) waitEC(ctx context.Context, c *ecCluster, id uint64, limit time.Duration, not ...string) (map[int]string, error) {
	var holders map[int]string
	err := r.pollAdmin(ctx, c.coord, limit, fmt.Sprintf("container %d HEALTHY with %d indexes outside %v", id, ecIndexes, not), func(st adminState) bool {
		ct := st.containers[fmt.Sprint(id)]
		holders = map[int]string{}
		others := 0
		for _, rep := range ct.Replicas {
			if slices.Contains(not, rep.Node) {
				continue
			}
			others++
			if rep.State == "CLOSED" && rep.Index >= 1 && rep.Index <= ecIndexes {
				holders[rep.Index] = rep.Node
			}
		}
		if ct.Class != "HEALTHY" || len(holders) != ecIndexes || others != ecIndexes {
			return false
		}
		// The coordinator's view lags the nodes' by a heartbeat.
		for i, name := range holders {
			d, err := describe(ctx, c.byName[name], id)
			if err != nil || d.State != container.Closed || d.ReplicaIndex != i || d.Replication != ecScheme {
				return false
			}
		}
		return true
	})
	return holders, err
}

// holderOf returns the first holder of indexes (in that order) that is
// neither the coordinator nor one of not.
func holderOf(holders map[int]string, indexes []int, not ...string) (string, error) {
	for _, i := range indexes {
		if n := holders[i]; n != "dn1" && !slices.Contains(not, n) {
			return n, nil
		}
	}
	return "", fmt.Errorf("no holder of indexes %v but dn1 and %v: %v", indexes, not, holders)
}

var (
	allIndexes  = []int{1, 2, 3, 4, 5, 6, 7, 8, 9}
	dataIndexes = []int{1, 2, 3, 4, 5, 6}
)

var sentLine = regexp.MustCompile(`(?m)^replicad_replication_bytes_total\{direction="sent"[^}]*\} (\S+)$`)

// sent reads what each running node has sent to peers so far
// (replicad_replication_bytes_total{direction="sent"}).
func (c *ecCluster) sent(ctx context.Context) (map[string]int64, error) {
	out := map[string]int64{}
	for _, n := range c.nodes {
		if !n.alive() {
			continue
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+n.metrics+"/metrics", nil)
		if err != nil {
			return nil, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, fmt.Errorf("metrics of %s: %w", n.name, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("metrics of %s: %w", n.name, err)
		}
		if m := sentLine.FindSubmatch(body); m != nil {
			v, err := strconv.ParseFloat(string(m[1]), 64)
			if err != nil {
				return nil, fmt.Errorf("metrics of %s: %w", n.name, err)
			}
			out[n.name] = int64(v)
		}
	}
	return out, nil
}

// sentSince is what each node sent between two readings of sent; a node
// killed in between sent nothing since its last reading.
func sentSince(before, after map[string]int64) (map[string]int64, int64) {
	delta := map[string]int64{}
	var sum int64
	for name, v := range after {
		delta[name] = v - before[name]
		sum += delta[name]
	}
	return delta, sum
}

// ecPut writes n files of size bytes in all into dir/src (unless there
// already), puts them into one EC container on dn2 and waits until it is
// encoded.
func (r *runner) ecPut(ctx context.Context, c *ecCluster, phase, src string, n int, size int64, limit time.Duration) (container.Descriptor, map[int]string, []string, error) {
	files, err := filepath.Glob(filepath.Join(src, "*"))
	if err != nil || len(files) != n {
		r.logf("[%s] writing %s in %d files...", phase, bench.Size(size), n)
		os.RemoveAll(src)
		if files, err = bench.WriteRandomFiles(src, n, int(size/int64(n))); err != nil {
			return container.Descriptor{}, nil, nil, err
		}
	}
	r.logf("[%s] container put --replication %s + close on dn2...", phase, ecScheme)
	d, err := r.fill(ctx, c.byName["dn2"], files, size, "--replication", ecScheme)
	if err != nil {
		return container.Descriptor{}, nil, nil, err
	}
	start := time.Now()
	holders, err := r.waitEC(ctx, c, d.ID, limit)
	if err == nil {
		r.logf("[%s] container %d encoded into %d indexes in %v: %v", phase, d.ID, ecIndexes, time.Since(start).Round(time.Millisecond), holders)
	}
	return d, holders, files, err
}

// modes are the cluster's replication modes, push first.
var modes = []struct {
	name string
	push bool
}{{"push", true}, {"pull", false}}

// --- bytes moved to recover one lost index ---

// ecRecoveryRows: in each mode, a container of ecRecoverySize (a multiple
// of the stripe, so every index holds a sixth of it) loses one index, to
// a decommission (the index copied one to one), and then another, to a
// kill (the index reconstructed from six others); once each, as bytes are
// counted, not timed. The value is the bytes every
// node sent (their replicad_replication_bytes_total{direction="sent"})
// from the decommission or the kill until the container is HEALTHY again,
// per byte of the lost index; the baseline is the container's bytes per
// byte of the index: what copying the whole container would move.
func (r *runner) ecRecoveryRows(ctx context.Context) []*bench.ReplRow {
	c := r.cfg
	var rows []*bench.ReplRow
	type pair struct{ copy, rebuild *bench.ReplRow }
	byMode := map[string]pair{}
	base := "the container's bytes (a whole copy moved)"
	for _, m := range modes {
		what := fmt.Sprintf("EC %s, %s container (%d files), %s mode: bytes sent to recover one lost index, per byte of the index", ecScheme, bench.Size(c.ecRecoverySize), ecRecoveryFiles, m.name)
		p := pair{
			copy: &bench.ReplRow{Name: what + ": by copy (its holder decommissioned)", Unit: "B/B", Baseline: base,
				Target: bench.ReplTarget{MaxValue: 1.1, Text: "≈ 1× the index"}},
			rebuild: &bench.ReplRow{Name: what + ": by reconstruction (its holder killed)", Unit: "B/B", Baseline: base,
				Target: bench.ReplTarget{MaxValue: ecData * 1.1, Text: fmt.Sprintf("≈ D = %d× the index", ecData)}},
		}
		byMode[m.name] = p
		rows = append(rows, p.copy, p.rebuild)
	}
	dir := filepath.Join(r.dir, "ec-recovery")
	for _, m := range modes {
		p := byMode[m.name]
		if ctx.Err() != nil {
			return rows
		}
		if err := r.ecRecoveryRun(ctx, filepath.Join(dir, m.name), filepath.Join(dir, "src"), m.push, p.copy, p.rebuild); err != nil {
			bench.FailRows([]*bench.ReplRow{p.copy, p.rebuild}, err)
		}
	}
	return rows
}

// ecRecoveryFiles is how many files the recovery's container is put as.
const ecRecoveryFiles = 8

func (r *runner) ecRecoveryRun(ctx context.Context, dir, src string, push bool, copyRow, rebuildRow *bench.ReplRow) error {
	size := r.cfg.ecRecoverySize
	cl, err := r.startEC(ctx, dir, push, 2*time.Second, 200*time.Millisecond, 2*size)
	if err != nil {
		return err
	}
	defer cl.stop()
	phase := "ec-recovery " + map[bool]string{true: "push", false: "pull"}[push]
	d, holders, _, err := r.ecPut(ctx, cl, phase, src, ecRecoveryFiles, size, 10*time.Minute)
	if err != nil {
		return err
	}
	coord := cl.coord.addr
	// Bytes are counted, not timed: one run of each way to lose an index.
	for rep := range 1 {
		for k := range 2 {
			if ctx.Err() != nil {
				return nil
			}
			victim, err := holderOf(holders, allIndexes[rep%ecIndexes:])
			if err != nil {
				return err
			}
			vd, err := describe(ctx, cl.byName[victim], d.ID)
			if err != nil {
				return err
			}
			before, err := cl.sent(ctx)
			if err != nil {
				return err
			}
			start := time.Now()
			byCopy := (k+rep)%2 == 0
			if byCopy {
				if _, err := r.cli(ctx, "admin", "decommission", "--server", coord, victim); err != nil {
					return err
				}
				if err := r.pollAdmin(ctx, cl.coord, 5*time.Minute, victim+" DECOMMISSIONED", func(st adminState) bool {
					return st.nodes[victim].OpState == "DECOMMISSIONED"
				}); err != nil {
					return err
				}
			} else {
				cl.byName[victim].kill9()
			}
			if _, err := r.waitEC(ctx, cl, d.ID, 10*time.Minute, victim); err != nil {
				return err
			}
			took := time.Since(start)
			after, err := cl.sent(ctx)
			if err != nil {
				return err
			}
			_, moved := sentSince(before, after)
			v := float64(moved) / float64(vd.Bytes)
			row := rebuildRow
			if byCopy {
				row = copyRow
			}
			row.Add(v)
			row.AddBase(float64(d.Bytes) / float64(vd.Bytes))
			r.logf("[%s] run %d: index %d (%s) lost to a %s: %d bytes sent (%.2f× the index's %d) in %v",
				phase, rep+1, vd.ReplicaIndex, victim, map[bool]string{true: "decommission", false: "kill"}[byCopy], moved, v, vd.Bytes, took.Round(time.Millisecond))
			// Back to nine indexes on the twelve nodes: the extra copy of
			// the index goes, as over-replication.
			if byCopy {
				_, err = r.cli(ctx, "admin", "recommission", "--server", coord, victim)
			} else {
				err = r.restart(ctx, cl, cl.byName[victim])
			}
			if err != nil {
				return err
			}
			if holders, err = r.waitEC(ctx, cl, d.ID, 5*time.Minute); err != nil {
				return err
			}
		}
	}
	return nil
}

// --- degraded reads and the storage on disk ---

// ecReadRows: one file of ecReadSize, one block, put into an EC container
// and, beside it, into a replica:3 container (from dn3). Reads: `container
// get --cluster` of the block, cold, with all nine indexes up (the
// baseline), with one data index holder killed and with three; the nodes
// are killed for less than --dead-after (1 h here), so nothing is rebuilt,
// and started again before the next run. Storage: the allocated bytes (du)
// of each container's directories on every volume, per byte of the file.
func (r *runner) ecReadRows(ctx context.Context) []*bench.ReplRow {
	c := r.cfg
	what := fmt.Sprintf("EC %s: container get --cluster of a %s block (cold)", ecScheme, bench.Size(c.ecReadSize))
	healthy := "the same get with all 9 indexes up"
	down1 := &bench.ReplRow{Name: what + ", 1 data index holder killed (degraded read)", Unit: "MB/s", Higher: true, Baseline: healthy}
	down3 := &bench.ReplRow{Name: what + ", 3 data index holders killed (degraded read)", Unit: "MB/s", Higher: true, Baseline: healthy}
	disk := &bench.ReplRow{Name: fmt.Sprintf("EC %s: storage on disk (du of every volume) of a %s file, per byte of it", ecScheme, bench.Size(c.ecReadSize)),
		Unit: "B/B", Baseline: "replica:3 of the same file", Target: bench.ReplTarget{MaxValue: 1.6, Text: "≈ (D+P)/D = 1.5×"}}
	rows := []*bench.ReplRow{down1, down3, disk}
	fail := func(err error) []*bench.ReplRow { return bench.FailRows(rows, err) }
	dir := filepath.Join(r.dir, "ec-read")
	cl, err := r.startEC(ctx, dir, true, time.Hour, 200*time.Millisecond, 2*c.ecReadSize)
	if err != nil {
		return fail(err)
	}
	defer cl.stop()
	d, holders, files, err := r.ecPut(ctx, cl, "ec-read", filepath.Join(dir, "src"), 1, c.ecReadSize, 10*time.Minute)
	if err != nil {
		return fail(err)
	}

	// Storage: the same file as replica:3.
	r3, err := r.fill(ctx, cl.byName["dn3"], files, c.ecReadSize, "--replication", "replica:3")
	if err == nil {
		err = r.pollAdmin(ctx, cl.coord, 5*time.Minute, "the replica:3 container HEALTHY with 3 copies", func(st adminState) bool {
			ct := st.containers[fmt.Sprint(r3.ID)]
			closed := 0
			for _, rep := range ct.Replicas {
				if rep.State == "CLOSED" {
					closed++
				}
			}
			return ct.Class == "HEALTHY" && closed == 3 && len(ct.Replicas) == 3
		})
	}
	if err != nil {
		disk.FailBase(err)
	} else {
		ecDisk, err1 := cl.du(d.ID)
		r3Disk, err2 := cl.du(r3.ID)
		switch {
		case err1 != nil:
			disk.Fail(err1)
		case err2 != nil:
			disk.Fail(err2)
		default:
			disk.Add(float64(ecDisk) / float64(c.ecReadSize))
			disk.AddBase(float64(r3Disk) / float64(c.ecReadSize))
			r.logf("[ec-read] on disk: EC %s, replica:3 %s, for %s of data", mibString(ecDisk), mibString(r3Disk), mibString(c.ecReadSize))
		}
	}

	sum, err := fileXXH64(files[0])
	if err != nil {
		return fail(err)
	}
	key := fmt.Sprintf("%s-%d", sum, c.ecReadSize)
	out := filepath.Join(dir, "block")
	get := func() (float64, error) {
		r.cold()
		start := time.Now()
		_, err := r.cli(ctx, "container", "get", "--cluster", cl.coord.addr, key, "-o", out)
		took := time.Since(start)
		if err == nil {
			var fi os.FileInfo
			if fi, err = os.Stat(out); err == nil && fi.Size() != c.ecReadSize {
				err = fmt.Errorf("container get --cluster wrote %d bytes, want %d", fi.Size(), c.ecReadSize)
			}
		}
		os.Remove(out)
		return mbps(c.ecReadSize, took), err
	}
	for rep := range c.reps {
		if ctx.Err() != nil {
			return rows
		}
		v, err := get()
		if err != nil {
			return fail(err)
		}
		down1.AddBase(v)
		down3.AddBase(v)
		r.logf("[ec-read] run %d: healthy read %.0f MB/s", rep+1, v)
		var killed []string
		for _, row := range []*bench.ReplRow{down1, down3} {
			for len(killed) < map[*bench.ReplRow]int{down1: 1, down3: 3}[row] {
				victim, err := holderOf(holders, dataIndexes, killed...)
				if err != nil {
					return fail(err)
				}
				cl.byName[victim].kill9()
				killed = append(killed, victim)
			}
			v, err := get()
			if err != nil {
				row.Fail(err)
				continue
			}
			row.Add(v)
			r.logf("[ec-read] run %d: read with %v killed %.0f MB/s", rep+1, killed, v)
		}
		for _, name := range killed {
			if err := r.restart(ctx, cl, cl.byName[name]); err != nil {
				return fail(err)
			}
		}
		if holders, err = r.waitEC(ctx, cl, d.ID, 5*time.Minute); err != nil {
			return fail(err)
		}
	}
	return rows
}

// du is the bytes allocated on disk to container id's directories on
// every node's volume.
func (c *ecCluster) du(id uint64) (int64, error) {
	var sum int64
	for _, n := range c.nodes {
		root := filepath.Join(n.volume, fmt.Sprint(id))
		err := filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			fi, err := e.Info()
			if err != nil {
				return err
			}
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				sum += st.Blocks * 512
			}
			return nil
		})
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return 0, err
		}
	}
	return sum, nil
}

// fileXXH64 is the file's xxh64 as `container get` takes it.
func fileXXH64(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	_, sum, err := checksum.Reader(f, nil)
	return sum, err
}

// --- peak RSS of the nodes reconstructing three indexes ---

// ecRSSRows: a container of ecRSSSize, encoded in a push-mode cluster,
// loses three index holders (killed; DEAD after 2 s), and the coordinator
// has the three indexes reconstructed: in push mode one holder of a good
// index rebuilds all three and pushes them. The three are then started
// again (the extra copies deleted), the coordinator is started again with
// --push=false, and three other holders are killed: in pull mode each
// target rebuilds its own index. VmHWM of every node is reset (to its
// VmRSS then) before the kill and read once the container is HEALTHY
// again. No node logs a command that succeeds, nor does the coordinator
// say which node ran one, so the row shows the highest VmHWM of any live
// node, the reconstructing ones among them; the log and the notes name
// the likely reconstructors (pull: the three new holders; push: the old
// holder that sent the most) and, in push mode, how many Reconstruct
// commands the bytes sent imply: (sent ÷ index − 3) ÷ (D − 1), each
// reading D − 1 indexes from other nodes and pushing its rebuilt ones.
// The baseline is the highest VmRSS of a node just started and joined,
// before any container.
func (r *runner) ecRSSRows(ctx context.Context) []*bench.ReplRow {
	c := r.cfg
	const mib = 1 << 20
	var rows []*bench.ReplRow
	for _, m := range modes {
		rows = append(rows, &bench.ReplRow{
			Name: fmt.Sprintf("EC %s, %s container: peak RSS of any node (the reconstructing ones among them) while 3 indexes are reconstructed, %s mode", ecScheme, bench.Size(c.ecRSSSize), m.name),
			Unit: "MiB", Baseline: "an idle node (joined, no container)",
			Target: bench.ReplTarget{MaxValue: float64(c.ecRSSLimit) / mib, Text: "≤ " + bench.Size(c.ecRSSLimit)},
		})
	}
	fail := func(err error) []*bench.ReplRow { return bench.FailRows(rows, err) }
	dir := filepath.Join(r.dir, "ec-rss")
	// About 3.5× the container on disk: gone once measured.
	defer os.RemoveAll(dir)
	// The three victims are declared DEAD a heartbeat (100 ms) apart at
	// most; a replication manager cycle of 1 s makes it likely that one
	// cycle sees all three, and so that push mode sends one Reconstruct
	// for the three, not one for two and another for the third.
	cl, err := r.startEC(ctx, dir, true, 2*time.Second, time.Second, c.ecRSSSize+c.ecRSSSize/2)
	if err != nil {
		return fail(err)
	}
	defer cl.stop()
	d, holders, _, err := r.ecPut(ctx, cl, "ec-rss", filepath.Join(dir, "src"), c.ecRSSFiles(), c.ecRSSSize, 20*time.Minute)
	if err != nil {
		return fail(err)
	}
	for k, m := range modes {
		if ctx.Err() != nil {
			return rows
		}
		if !m.push {
			coord := cl.coord
			coord.kill9()
			coord.extra = slices.Clone(coord.extra)
			for i, f := range coord.extra {
				if f == "--push=true" {
					coord.extra[i] = "--push=false"
				}
			}
			err := r.restart(ctx, cl, coord)
			if err == nil {
				holders, err = r.waitEC(ctx, cl, d.ID, 5*time.Minute)
			}
			if err != nil {
				rows[k].Fail(err)
				continue
			}
		}
		peak, err := r.ecRSSRun(ctx, cl, d, holders, m.name)
		if err == nil {
			holders, err = r.waitEC(ctx, cl, d.ID, 10*time.Minute) // the victims back, their copies deleted
		}
		if err != nil {
			rows[k].Fail(err)
			continue
		}
		rows[k].Add(float64(peak) / mib)
		rows[k].AddBase(float64(cl.idle) / mib)
	}
	return rows
}

// ecRSSFiles is how many files the RSS workload's container is put as.
func (c config) ecRSSFiles() int { return int(max(1, c.ecRSSSize/(128<<20))) }

// ecRSSRun kills three holders of d, waits until their indexes are
// reconstructed, returns the peak RSS of any live node meanwhile, and
// starts the three again.
func (r *runner) ecRSSRun(ctx context.Context, cl *ecCluster, d container.Descriptor, holders map[int]string, mode string) (peak int64, err error) {
	const mib = 1 << 20
	size := r.cfg.ecRSSSize
	phase := "ec-rss " + mode
	var victims []string
	for len(victims) < 3 {
		v, err := holderOf(holders, allIndexes, victims...)
		if err != nil {
			return 0, err
		}
		victims = append(victims, v)
	}
	atReset := map[string]int64{}
	for _, n := range cl.nodes {
		if err := bench.ResetPeakRSS(n.pid()); err != nil {
			return 0, fmt.Errorf("reset VmHWM of %s: %w", n.name, err)
		}
		if atReset[n.name], err = bench.ProcStatus(n.pid(), "VmRSS"); err != nil {
			return 0, err
		}
	}
	before, err := cl.sent(ctx)
	if err != nil {
		return 0, err
	}
	r.cold()
	start := time.Now()
	for _, v := range victims {
		cl.byName[v].kill9()
	}
	after, err := r.waitEC(ctx, cl, d.ID, 20*time.Minute, victims...)
	if err != nil {
		return 0, err
	}
	took := time.Since(start)
	sentAfter, err := cl.sent(ctx)
	if err != nil {
		return 0, err
	}
	delta, moved := sentSince(before, sentAfter)
	old := map[string]bool{}
	for _, n := range holders {
		old[n] = true
	}
	var builders []string
	if mode == "push" {
		top := ""
		for _, n := range after {
			if old[n] && (top == "" || delta[n] > delta[top]) {
				top = n
			}
		}
		builders = []string{top}
	} else {
		for _, n := range after {
			if !old[n] {
				builders = append(builders, n)
			}
		}
	}
	slices.Sort(builders)
	hwm := map[string]int64{}
	var highest string
	var resetInfo []string
	for _, n := range cl.nodes {
		if !n.alive() {
			continue
		}
		v, err := bench.ProcStatus(n.pid(), "VmHWM")
		if err != nil {
			return 0, err
		}
		hwm[n.name] = v
		if highest == "" || v > hwm[highest] {
			highest = n.name
		}
		if slices.Contains(builders, n.name) {
			resetInfo = append(resetInfo, fmt.Sprintf("%s %.0f MiB", n.name, float64(atReset[n.name])/mib))
		}
	}
	peak = hwm[highest]
	commands := "one per index"
	if mode == "push" {
		idx := float64(size) / ecData
		commands = fmt.Sprintf("%.1f implied by the bytes sent", (float64(moved)/idx-3)/(ecData-1))
	}
	r.logf("[%s] 3 indexes of %d (%v) reconstructed by %v in %v, %d bytes sent (%.2f× the container; Reconstruct commands: %s); RSS at the reset: %v; peak RSS of any node %.0f MiB (%s), idle %.0f MiB",
		phase, d.ID, victims, builders, took.Round(time.Millisecond), moved, float64(moved)/float64(size), commands, resetInfo, float64(peak)/mib, highest, float64(cl.idle)/mib)
	r.notes = append(r.notes, fmt.Sprintf("EC peak RSS, %s mode: %v reconstructed 3 indexes of %s in %v from the kill (%.0f MB/s of rebuilt index; DEAD after 2 s), %.2f× the container sent (Reconstruct commands: %s); VmHWM was reset to VmRSS (%v) before; the highest VmHWM of any node was %s's, %.0f MiB",
		mode, builders, bench.Size(size), took.Round(time.Second), float64(3*size/ecData)/1e6/took.Seconds(), float64(moved)/float64(size), commands, resetInfo, highest, float64(hwm[highest])/mib))
	for _, v := range victims {
		if err := r.restart(ctx, cl, cl.byName[v]); err != nil {
			return 0, err
		}
	}
	return peak, nil
}
