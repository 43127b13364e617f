package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cmfs-project/cmfs/bench"
)

// --- failover of the coordinator with etcd against the leader lease ---

const (
	failoverCoords = 3
	failoverKills  = 3
	failoverLease  = 2 * time.Second
)

// failoverRows: three `--coordinator`s share one etcd (started here:
// Debian's etcd-server, the `etcd` binary); the leader is killed with
// SIGKILL, timed until a standby answers `admin status` as the leader
// (polled every 50 ms), then started again; three times. The baseline is
// --leader-lease: the dead leader's key lasts that long, so the ratio
// (lease ÷ failover) is about 1 when the standby takes over as soon as
// etcd expires it.
func (r *runner) failoverRows(ctx context.Context) []*bench.ReplRow {
	row := &bench.ReplRow{
		Name: fmt.Sprintf("failover with etcd: SIGKILL of the leader of %d coordinators until a standby answers as leader (%d kills)", failoverCoords, failoverKills),
		Unit: "s", Baseline: "--leader-lease " + failoverLease.String(),
		Target: bench.ReplTarget{MaxValue: 10, Text: "≤ 10 s"},
	}
	rows := []*bench.ReplRow{row}
	fail := func(err error) []*bench.ReplRow { return bench.FailRows(rows, err) }
	bin, err := exec.LookPath("etcd")
	if err != nil {
		return fail(errors.New("etcd is not installed (Debian: apt-get install etcd-server)"))
	}
	dir := filepath.Join(r.dir, "failover")
	endpoint, err := r.startEtcd(ctx, bin, dir)
	if err != nil {
		return fail(err)
	}
	coords := make([]*node, failoverCoords)
	defer func() {
		for _, n := range coords {
			if n != nil {
				n.stop()
			}
		}
	}()
	start := func(i int) error {
		flags := []string{"--coordinator", "--cluster-store", "etcd://" + endpoint, "--leader-lease", failoverLease.String(),
			"--heartbeat", "100ms", "--rm-interval", "200ms"}
		var joins []string
		for j, n := range coords {
			if j != i && n != nil {
				joins = append(joins, n.addr)
			}
		}
		if len(joins) > 0 {
			flags = append(flags, "--join", strings.Join(joins, ","))
		}
		name := fmt.Sprintf("c%d", i+1)
		n, err := r.serve(ctx, name, filepath.Join(dir, name), flags...)
		coords[i] = n
		return err
	}
	for i := range coords {
		if err := start(i); err != nil {
			return fail(err)
		}
	}
	leader, err := r.leaderOf(ctx, coords, 30*time.Second)
	if err != nil {
		return fail(err)
	}
	for k := range failoverKills {
		if ctx.Err() != nil {
			return rows
		}
		i := slices.Index(coords, leader)
		leader.p.Cmd.Process.Kill() // SIGKILL: no resignation
		killed := time.Now()
		<-leader.p.Done()
		leader.client.Close()
		coords[i] = nil
		next, err := r.leaderOf(ctx, slices.DeleteFunc(slices.Clone(coords), func(n *node) bool { return n == nil }), 30*time.Second)
		if err != nil {
			return fail(err)
		}
		took := time.Since(killed)
		row.Add(took.Seconds())
		row.AddBase(failoverLease.Seconds())
		r.logf("[failover] kill %d: %s led after %v", k+1, next.name, took.Round(time.Millisecond))
		if err := start(i); err != nil {
			return fail(err)
		}
		leader = next
	}
	return rows
}

// leaderOf polls `admin status` of each of ns every 50 ms until one
// answers as the leader.
func (r *runner) leaderOf(ctx context.Context, ns []*node, limit time.Duration) (*node, error) {
	deadline := time.Now().Add(limit)
	for {
		for _, n := range ns {
			var st struct {
				Leader string `json:"leader"`
			}
			out, err := r.cli(ctx, "admin", "status", "--server", n.addr, "--json")
			if err == nil && json.Unmarshal([]byte(out), &st) == nil && st.Leader == n.addr {
				return n, nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("failover: no leader among %d coordinators after %v", len(ns), limit)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// startEtcd starts one etcd member on loopback ports with its data in
// dir, electing and expiring leases in a fraction of a second, and
// returns its client address once it is healthy.
func (r *runner) startEtcd(ctx context.Context, bin, dir string) (string, error) {
	client, err := freeAddr()
	if err != nil {
		return "", err
	}
	peer, err := freeAddr()
	if err != nil {
		return "", err
	}
	p, err := r.procs.Start("etcd", bin,
		"--name", "bench", "--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", "http://"+client, "--advertise-client-urls", "http://"+client,
		"--listen-peer-urls", "http://"+peer, "--initial-advertise-peer-urls", "http://"+peer,
		"--initial-cluster", "bench=http://"+peer,
		"--heartbeat-interval", "50", "--election-timeout", "500")
	if err != nil {
		return "", err
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+client+"/health", nil)
		if err != nil {
			return "", err
		}
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return client, nil
			}
		}
		select {
		case <-p.Done():
			return "", fmt.Errorf("etcd exited: %s", p.Exited())
		default:
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return "", fmt.Errorf("etcd on %s not healthy after 20s", client)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
