package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cmfs-project/cmfs/cluster"
	"github.com/cmfs-project/cmfs/cluster/store"
	"github.com/cmfs-project/cmfs/internal/etcdtest"
	"github.com/cmfs-project/cmfs/internal/wait"
)

// commandLog records every command the coordinators stored in etcd, from
// its first revision, to find one issued while another for the same
// container and target was pending.
type commandLog struct {
	mu    sync.Mutex
	live  map[string]store.Command
	dups  []string
	total int
	end   bool // the sentinel put at the end was seen
}

const sentinelKey = store.DefaultEtcdPrefix + "zz-test-end"

func watchCommands(t *testing.T, cli *clientv3.Client) *commandLog {
	t.Helper()
	l := &commandLog{live: map[string]store.Command{}}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ch := cli.Watch(ctx, store.DefaultEtcdPrefix, clientv3.WithPrefix(), clientv3.WithRev(1))
	go func() {
		for resp := range ch {
			for _, ev := range resp.Events {
				l.add(string(ev.Kv.Key), ev.Type == clientv3.EventTypeDelete, ev.Kv.Value)
			}
		}
	}()
	return l
}

func (l *commandLog) add(key string, deleted bool, value []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if key == sentinelKey {
		l.end = true
		return
	}
	if !strings.HasPrefix(key, store.DefaultEtcdPrefix+"commands/") {
		return
	}
	if deleted {
		delete(l.live, key)
		return
	}
	var cmd store.Command
	if err := json.Unmarshal(value, &cmd); err != nil {
		l.dups = append(l.dups, fmt.Sprintf("%s: %v", key, err))
		return
	}
	if _, ok := l.live[key]; ok {
		return
	}
	for _, o := range l.live {
		if o.Kind == cmd.Kind && o.Container == cmd.Container && o.Target == cmd.Target {
			l.dups = append(l.dups, fmt.Sprintf("command %d (%s) while %d was pending", cmd.ID, cmd.Command.String(), o.ID))
		}
	}
	l.live[key] = cmd
	if cmd.Kind == cluster.Replicate {
		l.total++
	}
}

// etcdStatus is `admin status --json` of a coordinator, or its refusal.
func etcdStatus(t *testing.T, n *replNode) (leader string, res result) {
	t.Helper()
	res = replicad(t, "admin", "status", "--server", n.Addr, "--json")
	var st struct {
		Leader string `json:"leader"`
	}
	if res.Code == 0 && json.Unmarshal([]byte(res.Stdout), &st) == nil {
		return st.Leader, res
	}
	return "", res
}

// TestClusterEtcdFailover: three coordinators share an etcd store; the
// leader is killed (-9) while a decommission it started is under way.
// Another leads within 10 s, the decommission completes, every
// container ends with its three copies, and no replicate was issued
// while one for the same container and target was pending. In push and
// pull mode.
func TestClusterEtcdFailover(t *testing.T) {
	for _, mode := range []string{"push", "pull"} {
		t.Run(mode, func(t *testing.T) { testEtcdFailover(t, mode == "push") })
	}
}

func testEtcdFailover(t *testing.T, push bool) {
	srv := etcdtest.Start(t)
	cmds := watchCommands(t, srv.Client(t))
	c := &testCluster{nodes: map[string]*replNode{}}
	storeFlags := []string{"--coordinator", "--cluster-store", "etcd://" + srv.Endpoint, "--leader-lease", "2s"}
	var coords []*replNode
	var joins []string
	for i := 1; i <= 6; i++ {
		name := fmt.Sprintf("dn%d", i)
		flags := []string{"--rack", rackOf(name), fmt.Sprintf("--push=%v", push)}
		if i <= 3 {
			flags = append(append(flags, storeFlags...), clusterFlags...)
			if len(joins) > 0 {
				flags = append(flags, "--join", strings.Join(joins, ","))
			}
		} else {
			flags = append(flags, "--join", strings.Join(joins, ","), "--heartbeat", "100ms")
		}
		n := startNode(t, name, flags...)
		t.Cleanup(func() {
			if !n.p.exited() {
				n.kill9(t)
			}
		})
		c.nodes[name] = n
		if i <= 3 {
			coords = append(coords, n)
			joins = append(joins, n.Addr)
		}
	}
	// leaderOf waits until one of ns answers status as the leader.
	leaderOf := func(ns []*replNode, within time.Duration) *replNode {
		t.Helper()
		var found *replNode
		var last []result
		ok := wait.Until(within, func() bool {
			last = last[:0]
			for _, n := range ns {
				l, res := etcdStatus(t, n)
				if l == n.Addr {
					found = n
					return true
				}
				last = append(last, res)
			}
			return false
		})
		if !ok {
			t.Fatalf("no leader among %d coordinators within %s: %v", len(ns), within, last)
		}
		return found
	}
	c.coord = leaderOf(coords, 20*time.Second)
	for _, n := range coords {
		if n == c.coord {
			continue
		}
		// A standby names the leader, in one line.
		_, res := etcdStatus(t, n)
		if res.Code == 0 || !strings.Contains(res.Stderr, "the leader is "+c.coord.Addr) || strings.Count(strings.TrimSpace(res.Stderr), "\n") != 0 {
			t.Errorf("admin status of standby %s: %v, want one line naming the leader %s", n.name, res, c.coord.Addr)
		}
	}
	c.waitHealthyNodes(t, 6)

	ids := c.fillNode(t, "dn4", 5, 200<<10)
	res := replicad(t, "admin", "decommission", "--server", c.coord.Addr, "dn4")
	if res.Code != 0 || !strings.Contains(res.Stdout, "DECOMMISSIONING") {
		t.Fatalf("admin decommission dn4: %v", res)
	}
	wait.For(t, 10*time.Second, "the leader's first decommission commands", func() bool {
		var st struct {
			Pending int `json:"pending_commands"`
		}
		c.admin(t, &st, "status")
		return st.Pending > 0
	})
	old := c.coord
	old.kill9(t)
	killed := time.Now()
	var rest []*replNode
	for _, n := range coords {
		if n != old {
			rest = append(rest, n)
		}
	}
	c.coord = leaderOf(rest, 10*time.Second)
	failover := time.Since(killed)
	t.Logf("failover: %s from kill -9 of %s to %s answering as leader (lease 2s)", failover.Round(time.Millisecond), old.name, c.coord.name)

	if !wait.Until(60*time.Second, func() bool { return c.adminNodes(t)["dn4"].OpState == "DECOMMISSIONED" }) {
		var st any
		c.admin(t, &st, "status")
		t.Fatalf("dn4 not DECOMMISSIONED within 60s of the failover: nodes %+v\ncontainers %+v\nstatus %+v\nthe leader's log:\n%s",
			c.adminNodes(t), c.containers(t), st, c.coord.p.stderrNow())
	}
	for _, id := range ids {
		c.waitHealthy(t, id, "dn4", old.name)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := srv.Client(t).Put(ctx, sentinelKey, "end"); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "the watch to reach the end", func() bool {
		cmds.mu.Lock()
		defer cmds.mu.Unlock()
		return cmds.end
	})
	cmds.mu.Lock()
	defer cmds.mu.Unlock()
	if len(cmds.dups) > 0 {
		t.Errorf("commands issued twice: %s", strings.Join(cmds.dups, "; "))
	}
	if cmds.total < len(ids) {
		t.Errorf("%d replicate commands stored, want at least %d (one per container of dn4)", cmds.total, len(ids))
	}
	t.Logf("%d replicate commands stored in all", cmds.total)
}
