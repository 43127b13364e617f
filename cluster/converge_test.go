package cluster_test

import (
	"cmp"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/cluster"
	"github.com/cmfs-project/cmfs/cluster/sim"
)

// TestDecommissionDrain: a node holding 20 containers drains over several
// cycles within the node limits, never leaving a container with fewer
// than three good copies in service and decommissioning, and ends
// DECOMMISSIONED with every container back to three copies on three racks.
func TestDecommissionDrain(t *testing.T) {
	const limit = 2
	s := cluster.State{Nodes: append(threeRacks(nil), node("x1", "rack-a", op(cluster.Decommissioning)))}
	others := []string{"b1", "b2", "b3", "c1", "c2", "c3"}
	for i := range 20 {
		id := cluster.ContainerID(i + 1)
		s.Containers = append(s.Containers, ctr(id))
		s.Replicas = append(s.Replicas, reps(id, others[i%3], others[3+(i/3)%3], "x1")...)
	}
	c := cfg(func(c *cluster.Config) { c.NodeLimit = limit })
	var transitions []string
	cycles := converge(t, &s, &c, 30, func(cycle int, d cluster.Decision) {
		load := map[cluster.NodeID]int{}
		for _, cmd := range d.Commands {
			if cmd.Kind != cluster.Replicate {
				t.Errorf("cycle %d: %v: a drain deletes nothing", cycle, cmd)
				continue
			}
			load[cmd.Sources[0]]++
			load[cmd.Target]++
		}
		for n, l := range load {
			max := limit
			if n == "x1" {
				max = 2 * limit
			}
			if l > max {
				t.Errorf("cycle %d: %s has %d commands, limit %d", cycle, n, l, max)
			}
		}
		for _, ctr := range s.Containers {
			if n := goodCopies(s, ctr.ID, cluster.InService, cluster.Decommissioning); n < 3 {
				t.Errorf("cycle %d: container %d has %d copies in service and decommissioning", cycle, ctr.ID, n)
			}
		}
		transitions = append(transitions, showTransitions(d.Transitions)...)
	})
	// 20 copies, 8 target slots a cycle (nine nodes, one source each):
	// three cycles at least, and the transition one more.
	if cycles < 4 || cycles > 8 {
		t.Errorf("converged in %d cycles, want 4 to 8", cycles)
	}
	if want := []string{"x1 DECOMMISSIONING>DECOMMISSIONED"}; !reflect.DeepEqual(transitions, want) {
		t.Errorf("transitions %q, want %q", transitions, want)
	}
	for _, ctr := range s.Containers {
		if n := goodCopies(s, ctr.ID, cluster.InService); n != 3 {
			t.Errorf("container %d: %d copies in service, want 3", ctr.ID, n)
		}
		if r := racksOf(s, ctr.ID, "x1"); r != 3 {
			t.Errorf("container %d on %d racks, want 3", ctr.ID, r)
		}
	}
}

// racksOf counts the racks c's replicas span, leaving out node skip.
func racksOf(s cluster.State, c cluster.ContainerID, skip cluster.NodeID) int {
	racks := map[string]bool{}
	for _, r := range s.Replicas {
		if r.Container == c && r.Node != skip {
			for _, n := range s.Nodes {
				if n.ID == r.Node {
					racks[n.Rack] = true
				}
			}
		}
	}
	return len(racks)
}

// TestConverge runs situations to a stable state through the simulator
// and checks where they end.
func TestConverge(t *testing.T) {
	tests := []struct {
		name     string
		mods     nodeMods
		replicas []cluster.Replica
		// after the first cycle is applied, before the next
		between func(*cluster.State)
		cfg     func(*cluster.Config)
		want    []string // every cycle's commands and transitions, in order
		final   []string // nodes holding container 1 at the end
	}{
		{name: "unhealthy replica: replaced, then deleted",
			replicas: append(reps(1, "a1", "c1"), replicaIn(1, "b1", cluster.Unhealthy, sum)),
			want:     []string{"1: R 1 a1>b2", "2: D 1 b1"}, final: []string{"a1", "b2", "c1"}},
		{name: "mis-replicated: copies, then the old rack's extras go",
			replicas: reps(1, "a1", "a2", "a3"),
			want:     []string{"1: R 1 a1>b1", "1: R 1 a2>c1", "2: D 1 a1", "2: D 1 a2"}, final: []string{"a3", "b1", "c1"}},
		{name: "dead node back after re-replication: the extra goes, not the rack's only copy",
			mods:     nodeMods{"c1": {health(cluster.Dead)}},
			replicas: reps(1, "a1", "b1", "c1"),
			between:  func(s *cluster.State) { setNode(s, "c1", func(n *cluster.Node) { n.Health = cluster.Healthy }) },
			want:     []string{"1: R 1 a1>c2", "2: D 1 c1"}, final: []string{"a1", "b1", "c2"}},
		{name: "maintenance with redundancy 2: copy, safe, end, extra deleted",
			mods:     nodeMods{"c1": {op(cluster.EnteringMaintenance), until(now.Add(90 * time.Minute))}},
			replicas: reps(1, "a1", "b1", "c1"),
			cfg:      func(c *cluster.Config) { c.MaintenanceRemainingRedundancy = 2 },
			want: []string{"1: R 1 a1>a2", "2: c1 ENTERING_MAINTENANCE>IN_MAINTENANCE",
				"3: c1 IN_MAINTENANCE>IN_SERVICE", "4: D 1 a1"},
			final: []string{"a2", "b1", "c1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := cluster.State{Nodes: threeRacks(tt.mods), Containers: []cluster.Container{ctr(1)}, Replicas: tt.replicas}
			sim.Sort(s.Replicas)
			c := cfg()
			if tt.cfg != nil {
				tt.cfg(&c)
			}
			var got []string
			converge(t, &s, &c, 10, func(cycle int, d cluster.Decision) {
				for _, l := range append(show(d.Commands), showTransitions(d.Transitions)...) {
					got = append(got, fmt.Sprintf("%d: %s", cycle, l))
				}
				if cycle == 1 && tt.between != nil {
					tt.between(&s)
				}
				// The maintenance case moves time on to the end.
				c.Now = c.Now.Add(time.Hour)
			})
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("cycles %q, want %q", got, tt.want)
			}
			var final []string
			for _, r := range s.Replicas {
				final = append(final, string(r.Node))
			}
			if !reflect.DeepEqual(final, tt.final) {
				t.Errorf("container 1 ends on %q, want %q", final, tt.final)
			}
		})
	}
}

func setNode(s *cluster.State, id cluster.NodeID, f func(*cluster.Node)) {
	for i := range s.Nodes {
		if s.Nodes[i].ID == id {
			f(&s.Nodes[i])
		}
	}
}

// TestConvergeGenerated: a generated cluster with dead nodes, a
// decommissioning one and under-replicated containers ends with every
// container HEALTHY, the node DECOMMISSIONED, and no cycle deleting a
// copy a container needed.
func TestConvergeGenerated(t *testing.T) {
	s := sim.Generate(sim.Spec{Nodes: 40, Racks: 5, Containers: 3000, UnderReplicated: 0.05, Dead: 2, Decommissioning: 1, Seed: 3})
	c := cfg(func(c *cluster.Config) { c.NodeLimit = 4 })
	cycles := converge(t, &s, &c, 200, func(cycle int, d cluster.Decision) {
		if d.Count(cluster.Unrecoverable) != 0 || d.Count(cluster.OverReplicated) != 0 && cycle == 1 {
			t.Fatalf("cycle %d: classes %v: the generator makes neither lost nor extra copies", cycle, d.Classes)
		}
		for _, cmd := range d.Commands {
			if cmd.Kind != cluster.Delete {
				continue
			}
			ctr := s.Containers[cmd.Container-1]
			st, err := cluster.Classify(ctr, replicasOf(s, ctr.ID), s.Nodes, c)
			if err != nil || st.InService < 3 || st.Racks < 3 {
				t.Fatalf("cycle %d: after %v: %+v, %v", cycle, cmd, st, err)
			}
		}
	})
	final := decide(t, s, c)
	if got := final.Count(cluster.Replicated); got != len(s.Containers) {
		t.Errorf("after %d cycles %d of %d containers healthy: %v", cycles, got, len(s.Containers), final.Classes)
	}
	if s.Nodes[2].OpState != cluster.Decommissioned {
		t.Errorf("node %s is %v, want DECOMMISSIONED", s.Nodes[2].ID, s.Nodes[2].OpState)
	}
	for _, ctr := range s.Containers {
		st, err := cluster.Classify(ctr, replicasOf(s, ctr.ID), s.Nodes, c)
		if err != nil || st.InService != 3 || st.Racks != 3 {
			t.Fatalf("container %d: %+v, %v; want 3 copies in service on 3 racks", ctr.ID, st, err)
		}
	}
}

// replicasOf returns c's replicas in s, whose replicas are sorted by
// container.
func replicasOf(s cluster.State, c cluster.ContainerID) []cluster.Replica {
	lo, _ := slices.BinarySearchFunc(s.Replicas, c, func(r cluster.Replica, c cluster.ContainerID) int { return cmp.Compare(r.Container, c) })
	hi := lo
	for hi < len(s.Replicas) && s.Replicas[hi].Container == c {
		hi++
	}
	return s.Replicas[lo:hi]
}
