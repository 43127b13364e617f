package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"time"

	"github.com/cmfs-project/cmfs/bench"
)

// --- drain of a decommissioning node against one replicate ---

// drainPeers is how many nodes take the decommissioning node's containers.
const drainPeers = 6

// drainRows: node D holds drainContainers replica:1 containers of
// drainSize bytes in all; `replicad admin decommission D` makes the
// coordinator copy each to one of six peers, D sending several at once
// (its stream limit doubled while decommissioning, as Ozone does). The
// time is from the decommission until the coordinator says
// DECOMMISSIONED, which it does once every copy is CLOSED (scanned) at
// its peer; the baseline is one `replicate` of the same bytes in one
// container from A to B, until CLOSED at B.
func (r *runner) drainRows(ctx context.Context) []*bench.ReplRow {
	c := r.cfg
	what := fmt.Sprintf("drain of %s in %d containers (incompressible, cold) to %d peers", bench.Size(c.drainSize), c.drainContainers, drainPeers)
	row := &bench.ReplRow{
		Name: what + ": decommission until DECOMMISSIONED (every copy CLOSED)", Unit: "MB/s", Higher: true,
		Baseline: "one container replicate A→B of the same bytes, until CLOSED at B",
	}
	rows := []*bench.ReplRow{row}
	fail := func(err error) []*bench.ReplRow { return bench.FailRows(rows, err) }
	dir := filepath.Join(r.dir, "drain")
	perContainer := c.drainFiles / c.drainContainers
	// A's one container must hold it all, whatever --drain-size.
	a, d, err := r.source(ctx, "drain", dir, bench.WriteRandomFiles, c.drainFiles, c.drainSize, "--container-size", fmt.Sprint(2*c.drainSize))
	if err != nil {
		return fail(err)
	}
	defer a.stop()
	files, err := filepath.Glob(filepath.Join(dir, "src", "*"))
	if err != nil || len(files) != c.drainFiles {
		return fail(fmt.Errorf("drain: %d source files (%v), want %d", len(files), err, c.drainFiles))
	}

	for rep := range c.reps {
		for k := range 2 {
			if ctx.Err() != nil {
				return rows
			}
			if (k+rep)%2 == 1 {
				b, err := r.serve(ctx, fmt.Sprintf("B%d", rep), filepath.Join(dir, fmt.Sprintf("b-%d", rep)))
				if err != nil {
					return fail(err)
				}
				r.cold()
				start := time.Now()
				_, _, err = r.replicate(ctx, a, b, d.ID, "")
				if err == nil {
					err = waitScanned(ctx, b, d.ID, c.drainSize)
				}
				took := time.Since(start)
				b.stop()
				if err != nil {
					row.FailBase(err)
					continue
				}
				row.AddBase(mbps(c.drainSize, took))
				r.logf("[drain] replicate run %d: %v (%.0f MB/s) until CLOSED", rep+1, took.Round(time.Millisecond), mbps(c.drainSize, took))
				continue
			}
			took, err := r.drainRun(ctx, filepath.Join(dir, fmt.Sprintf("cluster-%d", rep)), files, perContainer)
			if err != nil {
				return fail(err)
			}
			row.Add(mbps(c.drainSize, took))
			r.logf("[drain] decommission run %d: %v (%.0f MB/s)", rep+1, took.Round(time.Millisecond), mbps(c.drainSize, took))
		}
	}
	return rows
}

// drainRun starts a coordinator and drainPeers-1 more peers and node D,
// fills D with replica:1 containers of perContainer files each, and times
// D's decommission.
func (r *runner) drainRun(ctx context.Context, dir string, files []string, perContainer int) (time.Duration, error) {
	timing := []string{"--heartbeat", "100ms"}
	coord, err := r.serve(ctx, "p1", filepath.Join(dir, "p1"), append([]string{"--coordinator",
		"--cluster-store", filepath.Join(dir, "cluster.db"), "--rm-interval", "200ms"}, timing...)...)
	if err != nil {
		return 0, err
	}
	defer coord.stop()
	join := append([]string{"--join", coord.addr}, timing...)
	for i := 2; i <= drainPeers; i++ {
		p, err := r.serve(ctx, fmt.Sprintf("p%d", i), filepath.Join(dir, fmt.Sprintf("p%d", i)), join...)
		if err != nil {
			return 0, err
		}
		defer p.stop()
	}
	src, err := r.serve(ctx, "D", filepath.Join(dir, "d"), join...)
	if err != nil {
		return 0, err
	}
	defer src.stop()
	r.logf("[drain] filling D with %d replica:1 containers...", len(files)/perContainer)
	var ids []uint64
	for i := 0; i+perContainer <= len(files); i += perContainer {
		d, err := r.fill(ctx, src, files[i:i+perContainer], r.cfg.drainSize/int64(r.cfg.drainContainers), "--replication", "replica:1")
		if err != nil {
			return 0, err
		}
		ids = append(ids, d.ID)
	}
	// The coordinator must know every container before the drain starts,
	// or D would be declared DECOMMISSIONED before it reported them.
	if err := r.pollAdmin(ctx, coord, 30*time.Second, "D's containers known and HEALTHY", func(st adminState) bool {
		return st.healthy(ids) && st.nodes["D"].Health == "HEALTHY"
	}); err != nil {
		return 0, err
	}
	r.cold()
	start := time.Now()
	if _, err := r.cli(ctx, "admin", "decommission", "--server", coord.addr, "D"); err != nil {
		return 0, err
	}
	err = r.pollAdmin(ctx, coord, 30*time.Minute, "D DECOMMISSIONED", func(st adminState) bool {
		return st.nodes["D"].OpState == "DECOMMISSIONED"
	})
	return time.Since(start), err
}

// adminState is what `replicad admin nodes/containers --json` say.
type adminState struct {
	nodes      map[string]adminNode
	containers map[string]adminContainer
}

type adminNode struct {
	ID      string `json:"id"`
	Health  string `json:"health"`
	OpState string `json:"opstate"`
}

type adminContainer struct {
	ID       string         `json:"id"`
	Class    string         `json:"class"`
	Reason   string         `json:"reason"`
	Replicas []adminReplica `json:"replicas"`
}

type adminReplica struct {
	Node  string `json:"node"`
	Index int    `json:"index"`
	State string `json:"state"`
}

// healthy says whether the coordinator knows every one of ids as HEALTHY.
func (st adminState) healthy(ids []uint64) bool {
	for _, id := range ids {
		if st.containers[fmt.Sprint(id)].Class != "HEALTHY" {
			return false
		}
	}
	return true
}

// pollAdmin asks the coordinator every 50 ms until done says yes, or
// fails after limit.
func (r *runner) pollAdmin(ctx context.Context, coord *node, limit time.Duration, what string, done func(adminState) bool) error {
	deadline := time.Now().Add(limit)
	for {
		var nodes struct{ Nodes []adminNode }
		var cts struct{ Containers []adminContainer }
		st := adminState{nodes: map[string]adminNode{}, containers: map[string]adminContainer{}}
		err := r.adminJSON(ctx, coord, "nodes", &nodes)
		if err == nil {
			err = r.adminJSON(ctx, coord, "containers", &cts)
		}
		if err != nil {
			return err
		}
		for _, n := range nodes.Nodes {
			st.nodes[n.ID] = n
		}
		for _, c := range cts.Containers {
			st.containers[c.ID] = c
		}
		if done(st) {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("not %s after %v", what, limit)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (r *runner) adminJSON(ctx context.Context, coord *node, sub string, v any) error {
	out, err := r.cli(ctx, "admin", sub, "--server", coord.addr, "--json")
	if err != nil {
		return err
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		return fmt.Errorf("replicad admin %s --json: %w", sub, err)
	}
	return nil
}
