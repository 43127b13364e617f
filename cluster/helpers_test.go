package cluster_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/cluster"
	"github.com/cmfs-project/cmfs/cluster/sim"
)

var now = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

const sum = 0xfeed // the checksum good replicas agree on

// node is a healthy in-service node "id" on rack, with 1 TiB free,
// changed by mods.
func node(id, rack string, mods ...func(*cluster.Node)) cluster.Node {
	n := cluster.Node{ID: cluster.NodeID(id), Addr: id + ":9860", Rack: rack, FreeBytes: 1 << 40}
	for _, m := range mods {
		m(&n)
	}
	return n
}

func health(h cluster.Health) func(*cluster.Node) { return func(n *cluster.Node) { n.Health = h } }
func op(s cluster.OpState) func(*cluster.Node)    { return func(n *cluster.Node) { n.OpState = s } }
func free(b int64) func(*cluster.Node)            { return func(n *cluster.Node) { n.FreeBytes = b } }
func until(t time.Time) func(*cluster.Node)       { return func(n *cluster.Node) { n.MaintenanceEnd = t } }

// threeRacks is a1 a2 a3 on rack A, b1… on B, c1… on C.
func threeRacks(mods map[string][]func(*cluster.Node)) []cluster.Node {
	var ns []cluster.Node
	for _, r := range []string{"a", "b", "c"} {
		for i := 1; i <= 3; i++ {
			id := fmt.Sprintf("%s%d", r, i)
			ns = append(ns, node(id, "rack-"+r, mods[id]...))
		}
	}
	return ns
}

// ctr is a CLOSED container of 1 GiB, replica:3 unless repl says.
func ctr(id cluster.ContainerID, repl ...string) cluster.Container {
	r := "replica:3"
	if len(repl) > 0 {
		r = repl[0]
	}
	return cluster.Container{ID: id, Replication: cluster.MustReplication(r), State: cluster.Closed, Bytes: 1 << 30}
}

// reps are good CLOSED replicas of c on nodes.
func reps(c cluster.ContainerID, nodes ...string) []cluster.Replica {
	var rs []cluster.Replica
	for _, n := range nodes {
		rs = append(rs, cluster.Replica{Container: c, Node: cluster.NodeID(n), State: cluster.Closed, Checksum: sum})
	}
	return rs
}

func replicaIn(c cluster.ContainerID, n string, st cluster.ContainerState, checksum uint64) cluster.Replica {
	return cluster.Replica{Container: c, Node: cluster.NodeID(n), State: st, Checksum: checksum}
}

func cfg(mods ...func(*cluster.Config)) cluster.Config {
	c := cluster.DefaultConfig()
	c.Now = now
	for _, m := range mods {
		m(&c)
	}
	return c
}

// show writes commands the way the tables expect them: "R 1 a1>b1" for a
// replicate of container 1 from a1 to b1, "D 1 a2" for a delete; with an
// EC index i, "R 1/i …" and "D 1/i …"; "E 1 a1>1:b1,2:c1" for an encode
// of a1's whole copy into index 1 on b1 and 2 on c1; "C 1 a1/1,b1/2>3:c1"
// for a reconstruct of index 3 onto c1 from index 1 on a1 and 2 on b1.
func show(cmds []cluster.Command) []string {
	out := []string{}
	for _, c := range cmds {
		id := fmt.Sprint(c.Container)
		if c.Index > 0 {
			id += fmt.Sprintf("/%d", c.Index)
		}
		var onto []string
		for k, n := range c.Targets {
			onto = append(onto, fmt.Sprintf("%d:%s", c.Indexes[k], n))
		}
		switch c.Kind {
		case cluster.Delete:
			out = append(out, fmt.Sprintf("D %s %s", id, c.Target))
		case cluster.Encode:
			out = append(out, fmt.Sprintf("E %s %s>%s", id, c.Sources[0], strings.Join(onto, ",")))
		case cluster.Reconstruct:
			var from []string
			for k, n := range c.Sources {
				from = append(from, fmt.Sprintf("%s/%d", n, c.SourceIndexes[k]))
			}
			out = append(out, fmt.Sprintf("C %s %s>%s", id, strings.Join(from, ","), strings.Join(onto, ",")))
		default:
			out = append(out, fmt.Sprintf("R %s %s>%s", id, c.Sources[0], c.Target))
		}
	}
	return out
}

func showTransitions(ts []cluster.Transition) []string {
	out := []string{}
	for _, t := range ts {
		out = append(out, fmt.Sprintf("%s %v>%v", t.Node, t.From, t.To))
	}
	return out
}

func decide(t *testing.T, s cluster.State, c cluster.Config) cluster.Decision {
	t.Helper()
	d, err := cluster.Decide(s, c)
	if err != nil {
		t.Fatalf("decide: %v", err)
	}
	return d
}

// converge runs Decide and applies its decision until a cycle decides
// nothing, calling check after every cycle (which may change *c for the
// next); it returns the cycles run.
func converge(t *testing.T, s *cluster.State, c *cluster.Config, max int, check func(cycle int, d cluster.Decision)) int {
	t.Helper()
	for cycle := 1; cycle <= max; cycle++ {
		d := decide(t, *s, *c)
		if len(d.Commands) == 0 && len(d.Transitions) == 0 {
			return cycle
		}
		if err := sim.Apply(s, d); err != nil {
			t.Fatalf("cycle %d: apply: %v", cycle, err)
		}
		if check != nil {
			check(cycle, d)
		}
	}
	t.Fatalf("no convergence in %d cycles", max)
	return 0
}

// goodCopies counts c's good replicas on healthy nodes in ops.
func goodCopies(s cluster.State, c cluster.ContainerID, ops ...cluster.OpState) int {
	n := 0
	for _, r := range s.Replicas {
		if r.Container != c || r.State != cluster.Closed || r.Checksum != sum {
			continue
		}
		for _, nd := range s.Nodes {
			if nd.ID == r.Node && nd.Health == cluster.Healthy {
				for _, o := range ops {
					if nd.OpState == o {
						n++
					}
				}
			}
		}
	}
	return n
}
