package cluster_test

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/cluster"
	"github.com/cmfs-project/cmfs/cluster/sim"
)

// fourRacks is a1 a2 a3 on rack A, b1… on B, c1… on C, d1… on D.
func fourRacks(mods nodeMods) []cluster.Node {
	var ns []cluster.Node
	for _, r := range []string{"a", "b", "c", "d"} {
		for i := 1; i <= 3; i++ {
			id := fmt.Sprintf("%s%d", r, i)
			ns = append(ns, node(id, "rack-"+r, mods[id]...))
		}
	}
	return ns
}

const rs63 = "ec:rs-6-3-1024k"

// spread63 is a converged rs-6-3 container on fourRacks: index k on
// spread63[k-1]; b3, c3 and d3 hold nothing.
var spread63 = []string{"a1", "b1", "c1", "d1", "a2", "b2", "c2", "d2", "a3"}

// ecReps are good CLOSED index replicas of c: index k+1 on nodes[k]
// ("" skips an index).
func ecReps(c cluster.ContainerID, nodes ...string) []cluster.Replica {
	var rs []cluster.Replica
	for k, n := range nodes {
		if n != "" {
			rs = append(rs, cluster.Replica{Container: c, Node: cluster.NodeID(n), Index: uint8(k + 1), State: cluster.Closed, Checksum: sum})
		}
	}
	return rs
}

// indexOn is one replica of index i of c on n.
func indexOn(c cluster.ContainerID, i uint8, n string, st cluster.ContainerState) cluster.Replica {
	return cluster.Replica{Container: c, Node: cluster.NodeID(n), Index: i, State: st, Checksum: sum}
}

// TestDecideEC checks one cycle's decision for an rs-6-3 container
// (1 GiB, index 1…9) on twelve equal nodes on four racks.
func TestDecideEC(t *testing.T) {
	dead, stale := health(cluster.Dead), health(cluster.Stale)
	decom, entering := op(cluster.Decommissioning), op(cluster.EnteringMaintenance)
	push := func(p bool) func(*cluster.Config) { return func(c *cluster.Config) { c.Push = p } }
	all := ecReps(1, spread63...)
	// rack A with a fourth node, a4, instead of d3
	fourOnA := slices.Concat(fourRacks(nil)[:11], []cluster.Node{node("a4", "rack-a")})
	tests := []struct {
		name        string
		nodes       []cluster.Node // default: fourRacks(mods)
		mods        nodeMods
		replicas    []cluster.Replica
		cfg         func(*cluster.Config)
		class       cluster.Class
		want        []string
		transitions []string
	}{
		{name: "whole copy: encoded into 9 indexes, at most 3 a rack",
			replicas: reps(1, "a1"), class: cluster.UnderReplicated,
			want: []string{"E 1 a1>1:a2,2:b1,3:c1,4:d1,5:a3,6:b2,7:c2,8:d2,9:b3"}},
		{name: "whole copy, pull mode: the same encode, pulled",
			replicas: reps(1, "a1"), cfg: push(false), class: cluster.UnderReplicated,
			want: []string{"E 1 a1>1:a2,2:b1,3:c1,4:d1,5:a3,6:b2,7:c2,8:d2,9:b3"}},
		{name: "whole copy and six indexes: the other three encoded",
			replicas: append(ecReps(1, spread63[:6]...), indexOn(1, 0, "d3", cluster.Closed)),
			class:    cluster.UnderReplicated, want: []string{"E 1 d3>7:c2,8:d2,9:a3"}},
		{name: "whole copy, not every index can have a node: waits",
			mods:     nodeMods{"a3": {free(1 << 20)}, "b3": {free(1 << 20)}, "c2": {free(1 << 20)}},
			replicas: append(ecReps(1, spread63[:6]...), indexOn(1, 0, "d3", cluster.Closed)),
			class:    cluster.UnderReplicated, want: []string{}},
		{name: "every index good: the whole copy is deleted",
			replicas: append(slices.Clone(all), indexOn(1, 0, "b3", cluster.Closed)),
			class:    cluster.OverReplicated, want: []string{"D 1 b3"}},
		{name: "converged",
			replicas: all, class: cluster.Replicated, want: []string{}},
		{name: "an index holder decommissioning: that index copied, one to one",
			mods: nodeMods{"b1": {decom}}, replicas: all,
			class: cluster.UnderReplicated, want: []string{"R 1/2 b1>b3"}},
		{name: "the decommissioning node's index copied: decommissioned, its copy kept",
			mods: nodeMods{"b1": {decom}}, replicas: append(slices.Clone(all), indexOn(1, 2, "b3", cluster.Closed)),
			class: cluster.Replicated, want: []string{}, transitions: []string{"b1 DECOMMISSIONING>DECOMMISSIONED"}},
		{name: "3 index holders dead, push: one reconstruct of the 3 from the other 6",
			mods: nodeMods{"a1": {dead}, "b1": {dead}, "c1": {dead}}, replicas: all, class: cluster.UnderReplicated,
			want: []string{"C 1 d1/4,a2/5,b2/6,c2/7,d2/8,a3/9>1:b3,2:c3,3:d3"}},
		{name: "3 index holders dead, pull: one reconstruct per index",
			mods: nodeMods{"a1": {dead}, "b1": {dead}, "c1": {dead}}, replicas: all, cfg: push(false),
			class: cluster.UnderReplicated, want: []string{
				"C 1 d1/4,a2/5,b2/6,c2/7,d2/8,a3/9>1:b3",
				"C 1 d1/4,a2/5,b2/6,c2/7,d2/8,a3/9>2:c3",
				"C 1 d1/4,a2/5,b2/6,c2/7,d2/8,a3/9>3:d3"}},
		{name: "pull, node limit 2: the sources serve two rebuilds, the third waits",
			mods: nodeMods{"a1": {dead}, "b1": {dead}, "c1": {dead}}, replicas: all,
			cfg:   func(c *cluster.Config) { c.Push, c.NodeLimit = false, 2 },
			class: cluster.UnderReplicated, want: []string{
				"C 1 d1/4,a2/5,b2/6,c2/7,d2/8,a3/9>1:b3",
				"C 1 d1/4,a2/5,b2/6,c2/7,d2/8,a3/9>2:c3"}},
		{name: "a dead holder's index also on a decommissioning node: copied, not rebuilt",
			mods:     nodeMods{"a1": {dead}, "b3": {decom}},
			replicas: append(slices.Clone(all), indexOn(1, 1, "b3", cluster.Closed)),
			class:    cluster.UnderReplicated, want: []string{"R 1/1 b3>c3"}},
		{name: "4 index holders dead: unrecoverable, nothing invented",
			mods:     nodeMods{"a1": {dead}, "b1": {dead}, "c1": {dead}, "d1": {dead}},
			replicas: all, class: cluster.Unrecoverable, want: []string{}},
		{name: "a stale index holder: no rebuild",
			mods: nodeMods{"a1": {stale}}, replicas: all, class: cluster.Replicated, want: []string{}},
		{name: "a stale index holder: its index's extra copies kept",
			mods:     nodeMods{"a1": {stale}},
			replicas: slices.Concat(all, []cluster.Replica{indexOn(1, 1, "b3", cluster.Closed), indexOn(1, 1, "c3", cluster.Closed)}),
			class:    cluster.Replicated, want: []string{}},
		{name: "a rack with 4 indexes: one moved to the emptiest rack",
			nodes: fourOnA, replicas: ecReps(1, "a1", "a2", "a3", "a4", "b1", "b2", "c1", "c2", "d1"),
			class: cluster.MisReplicated, want: []string{"R 1/1 a1>d2"}},
		{name: "the moved index in place: the crowded rack's copy deleted",
			nodes:    fourOnA,
			replicas: append(ecReps(1, "a1", "a2", "a3", "a4", "b1", "b2", "c1", "c2", "d1"), indexOn(1, 1, "d2", cluster.Closed)),
			class:    cluster.OverReplicated, want: []string{"D 1/1 a1"}},
		{name: "the move still coming: nothing deleted, nothing moved again",
			nodes:    fourOnA,
			replicas: append(ecReps(1, "a1", "a2", "a3", "a4", "b1", "b2", "c1", "c2", "d1"), indexOn(1, 1, "d2", cluster.Recovering)),
			class:    cluster.Replicated, want: []string{}},
		{name: "two copies of an index: the one on the fuller node goes",
			mods:     nodeMods{"c3": {free(1 << 39)}},
			replicas: slices.Concat(ecReps(1, "", "b1", "c1", "d1", "a2", "b2", "c2", "d2", "a3"), []cluster.Replica{indexOn(1, 1, "b3", cluster.Closed), indexOn(1, 1, "c3", cluster.Closed)}),
			class:    cluster.OverReplicated, want: []string{"D 1/1 c3"}},
		{name: "maintenance, redundancy 1, 3 indexes entering: one copied, 7 in service",
			mods: nodeMods{"a1": {entering}, "b1": {entering}, "c1": {entering}}, replicas: all,
			class: cluster.UnderReplicated, want: []string{"R 1/1 a1>b3"}},
		{name: "maintenance, redundancy 1, 4 indexes entering: two copied",
			mods: nodeMods{"a1": {entering}, "b1": {entering}, "c1": {entering}, "d1": {entering}}, replicas: all,
			class: cluster.UnderReplicated, want: []string{"R 1/1 a1>b3", "R 1/2 b1>c3"}},
		{name: "maintenance, 7 in service: safe",
			mods:     nodeMods{"a1": {entering}, "b1": {entering}, "c1": {entering}},
			replicas: append(slices.Clone(all), indexOn(1, 1, "b3", cluster.Closed)),
			class:    cluster.Replicated, want: []string{},
			transitions: []string{"a1 ENTERING_MAINTENANCE>IN_MAINTENANCE", "b1 ENTERING_MAINTENANCE>IN_MAINTENANCE",
				"c1 ENTERING_MAINTENANCE>IN_MAINTENANCE"}},
		{name: "maintenance, redundancy 0, 3 indexes entering: safe at once",
			mods: nodeMods{"a1": {entering}, "b1": {entering}, "c1": {entering}}, replicas: all,
			cfg:   func(c *cluster.Config) { c.MaintenanceRemainingRedundancy = 0 },
			class: cluster.Replicated, want: []string{},
			transitions: []string{"a1 ENTERING_MAINTENANCE>IN_MAINTENANCE", "b1 ENTERING_MAINTENANCE>IN_MAINTENANCE",
				"c1 ENTERING_MAINTENANCE>IN_MAINTENANCE"}},
		{name: "an unhealthy index replica: deleted, its index has a good copy",
			replicas: append(slices.Clone(all), indexOn(1, 1, "b3", cluster.Unhealthy)),
			class:    cluster.OverReplicated, want: []string{"D 1/1 b3"}},
		{name: "an unhealthy replica of a lost index: kept, the index rebuilt elsewhere",
			mods:     nodeMods{"a1": {dead}},
			replicas: append(slices.Clone(all), indexOn(1, 1, "b3", cluster.Unhealthy)),
			class:    cluster.UnderReplicated, want: []string{"C 1 b1/2,c1/3,d1/4,a2/5,b2/6,c2/7,d2/8,a3/9>1:c3"}},
		{name: "an index out of the scheme: deleted",
			replicas: append(slices.Clone(all), indexOn(1, 10, "b3", cluster.Closed)),
			class:    cluster.OverReplicated, want: []string{"D 1/10 b3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := cluster.State{Nodes: tt.nodes, Containers: []cluster.Container{ctr(1, rs63)}, Replicas: tt.replicas}
			if s.Nodes == nil {
				s.Nodes = fourRacks(tt.mods)
			}
			c := cfg()
			if tt.cfg != nil {
				tt.cfg(&c)
			}
			d := decide(t, s, c)
			if got := show(d.Commands); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("commands %q, want %q", got, tt.want)
			}
			if got, want := showTransitions(d.Transitions), append([]string{}, tt.transitions...); !reflect.DeepEqual(got, want) {
				t.Errorf("transitions %q, want %q", got, want)
			}
			st, err := cluster.Classify(s.Containers[0], s.Replicas, s.Nodes, c)
			if err != nil {
				t.Fatal(err)
			}
			if st.Class != tt.class {
				t.Errorf("class %v, want %v (%+v)", st.Class, tt.class, st)
			}
			checkECCommands(t, s, c, d)
		})
	}
}

// checkECCommands checks what every EC command must be, whatever the
// case: the configured mode (deletes none), a deadline, an index copy
// with its index, targets distinct and holding nothing of the
// container, no rack given more than ⌈9/4⌉ indexes by one command, a
// reconstruct with D distinct source indexes at least.
func checkECCommands(t *testing.T, s cluster.State, c cluster.Config, d cluster.Decision) {
	t.Helper()
	want := map[bool]cluster.Mode{false: cluster.Pull, true: cluster.Push}[c.Push]
	rack := map[cluster.NodeID]string{}
	for _, n := range s.Nodes {
		rack[n.ID] = n.Rack
	}
	holds := map[cluster.NodeID]bool{}
	for _, r := range s.Replicas {
		holds[r.Node] = true
	}
	for _, cmd := range d.Commands {
		if (cmd.Kind == cluster.Delete) != (cmd.Mode == 0) || cmd.Kind != cluster.Delete && cmd.Mode != want {
			t.Errorf("%v: mode %v, want %v", cmd, cmd.Mode, want)
		}
		if !cmd.Deadline.Equal(now.Add(c.Timeout)) {
			t.Errorf("%v: deadline %v", cmd, cmd.Deadline)
		}
		if cmd.Kind == cluster.Replicate && (cmd.Index == 0 || len(cmd.Sources) == 0) {
			t.Errorf("%v: an EC copy without its index or source", cmd)
		}
		perRack := map[string]int{}
		for _, g := range cmd.Gains() {
			if holds[g] {
				t.Errorf("%v: target %s holds a replica", cmd, g)
			}
			holds[g] = true
			if perRack[rack[g]]++; perRack[rack[g]] > 3 {
				t.Errorf("%v: more than 3 indexes onto %s", cmd, rack[g])
			}
		}
		if cmd.Kind == cluster.Reconstruct {
			if len(cmd.Sources) != len(cmd.SourceIndexes) || len(cmd.Sources) < 6 {
				t.Errorf("%v: %d sources for %d indexes, want 6 or more", cmd, len(cmd.Sources), len(cmd.SourceIndexes))
			}
			if seen := slices.Compact(slices.Sorted(slices.Values(cmd.SourceIndexes))); len(seen) != len(cmd.SourceIndexes) ||
				slices.ContainsFunc(cmd.Indexes, func(i uint8) bool { return slices.Contains(seen, i) }) {
				t.Errorf("%v: source indexes not distinct or among the rebuilt", cmd)
			}
			wantNode := cmd.Sources[0]
			if cmd.Mode == cluster.Pull {
				wantNode = cmd.Targets[0]
				if len(cmd.Targets) != 1 {
					t.Errorf("%v: a pull reconstruct of %d indexes, want one", cmd, len(cmd.Targets))
				}
			}
			if cmd.Node() != wantNode {
				t.Errorf("%v: runs on %s, want %s", cmd, cmd.Node(), wantNode)
			}
		}
	}
}

// TestECUnrecoverableReport: the reason says how many indexes are left.
func TestECUnrecoverableReport(t *testing.T) {
	s := cluster.State{Nodes: fourRacks(nodeMods{"a1": {health(cluster.Dead)}, "b1": {health(cluster.Dead)},
		"c1": {health(cluster.Dead)}, "d1": {health(cluster.Dead)}}),
		Containers: []cluster.Container{ctr(1, rs63)}, Replicas: ecReps(1, spread63...)}
	d := decide(t, s, cfg())
	if len(d.Unrecoverable) != 1 || !strings.Contains(d.Unrecoverable[0].Reason, "5 of 6+3 indexes") {
		t.Errorf("unrecoverable %v, want container 1 with 5 of 6+3 indexes", d.Unrecoverable)
	}
}

// TestECPriority: a command's priority is the redundancy lost, P less
// the indexes online beyond D; the most urgent container goes first.
func TestECPriority(t *testing.T) {
	s := cluster.State{Nodes: fourRacks(nodeMods{"a1": {health(cluster.Dead)}, "b1": {health(cluster.Dead)}}),
		Containers: []cluster.Container{ctr(1, rs63), ctr(2, rs63), ctr(3)},
		// 1 loses index 1 only (a1); 2 loses 1 and 2; 3 is a replica:3 with a copy on b1
		Replicas: slices.Concat(ecReps(1, "a1", "b2", "c1", "d1", "a2", "c3", "c2", "d2", "a3"),
			ecReps(2, spread63...), reps(3, "b1", "c1", "d1"))}
	d := decide(t, s, cfg(func(c *cluster.Config) { c.NodeLimit = 100 }))
	prio := map[cluster.ContainerID]int{}
	var order []cluster.ContainerID
	for _, c := range d.Commands {
		prio[c.Container] = c.Priority
		order = append(order, c.Container)
	}
	if want := map[cluster.ContainerID]int{1: 1, 2: 2, 3: 1}; !reflect.DeepEqual(prio, want) {
		t.Errorf("priorities %v, want %v", prio, want)
	}
	if order[0] != 2 {
		t.Errorf("order %v: want container 2 first", order)
	}
}

// TestECPendingPreventsDuplicates: an encode or reconstruct in flight
// counts as the indexes it makes and charges its nodes, until its
// deadline.
func TestECPendingPreventsDuplicates(t *testing.T) {
	dead := health(cluster.Dead)
	tests := []struct {
		name     string
		mods     nodeMods
		replicas []cluster.Replica
		push     bool
	}{
		{"encode", nil, reps(1, "a1"), true},
		{"reconstruct, push", nodeMods{"a1": {dead}, "b1": {dead}, "c1": {dead}}, ecReps(1, spread63...), true},
		{"reconstruct, pull", nodeMods{"a1": {dead}, "b1": {dead}, "c1": {dead}}, ecReps(1, spread63...), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := cluster.State{Nodes: fourRacks(tt.mods), Containers: []cluster.Container{ctr(1, rs63)}, Replicas: tt.replicas}
			c := cfg(func(c *cluster.Config) { c.Push = tt.push })
			first := decide(t, s, c)
			if len(first.Commands) == 0 {
				t.Fatal("first cycle: no command")
			}
			s.Pending = first.Commands
			if d := decide(t, s, c); len(d.Commands) != 0 || d.Waiting != 0 {
				t.Errorf("in flight: %q (%d waiting), want nothing", show(d.Commands), d.Waiting)
			}
			// The same state twice over with the first one's commands in
			// flight: a node limit of 1 leaves the second no node to use.
			s.Containers = append(s.Containers, ctr(2, rs63))
			for _, r := range tt.replicas {
				r.Container = 2
				s.Replicas = append(s.Replicas, r)
			}
			if d := decide(t, s, cfg(func(c *cluster.Config) { c.Push, c.NodeLimit = tt.push, 1 })); len(d.Commands) != 0 {
				t.Errorf("limit 1 with work in flight: %q, want nothing", show(d.Commands))
			}
			c.Now = now.Add(cluster.DefaultTimeout)
			s.Containers, s.Replicas = s.Containers[:1], tt.replicas
			if d := decide(t, s, c); !reflect.DeepEqual(show(d.Commands), show(first.Commands)) || len(d.Expired) != len(first.Commands) {
				t.Errorf("past the deadline: %q, %d expired; want %q again", show(d.Commands), len(d.Expired), show(first.Commands))
			}
		})
	}
}

// TestConvergeEC runs EC situations to a stable state through the
// simulator, in push and pull mode: every one ends with the nine indexes
// in service on nine nodes, no rack holding more than three, no whole
// copy, and no cycle leaving an index without a good copy it had.
func TestConvergeEC(t *testing.T) {
	dead := health(cluster.Dead)
	tests := []struct {
		name     string
		nodes    []cluster.Node // default: fourRacks(mods)
		mods     nodeMods
		replicas []cluster.Replica
		want     []string // the transitions, in order
	}{
		{name: "a whole copy", replicas: reps(1, "a1")},
		{name: "3 holders dead", mods: nodeMods{"a1": {dead}, "b1": {dead}, "c1": {dead}}, replicas: ecReps(1, spread63...)},
		{name: "2 holders decommissioning", mods: nodeMods{"a1": {op(cluster.Decommissioning)}, "b1": {op(cluster.Decommissioning)}},
			replicas: ecReps(1, spread63...),
			want:     []string{"a1 DECOMMISSIONING>DECOMMISSIONED", "b1 DECOMMISSIONING>DECOMMISSIONED"}},
		{name: "a rack with 4 indexes", nodes: slices.Concat(fourRacks(nil)[:11], []cluster.Node{node("a4", "rack-a")}),
			replicas: ecReps(1, "a1", "a2", "a3", "a4", "b1", "b2", "c1", "c2", "d1")},
		{name: "an extra copy and a bad replica",
			replicas: slices.Concat(ecReps(1, "a1", "b1", "c1", "d1", "a2", "b2", "c2", "d2", "b3"),
				[]cluster.Replica{indexOn(1, 9, "a3", cluster.Closed), indexOn(1, 5, "c3", cluster.Unhealthy)})},
	}
	for _, tt := range tests {
		for _, push := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/push=%v", tt.name, push), func(t *testing.T) {
				s := cluster.State{Nodes: tt.nodes, Containers: []cluster.Container{ctr(1, rs63)},
					Replicas: slices.Clone(tt.replicas)}
				if s.Nodes == nil {
					s.Nodes = fourRacks(tt.mods)
				}
				s.Nodes = slices.Clone(s.Nodes)
				sim.Sort(s.Replicas)
				c := cfg(func(c *cluster.Config) { c.Push = push })
				transitions := []string{}
				converge(t, &s, &c, 10, func(cycle int, d cluster.Decision) {
					transitions = append(transitions, showTransitions(d.Transitions)...)
				})
				if !reflect.DeepEqual(transitions, append([]string{}, tt.want...)) {
					t.Errorf("transitions %q, want %q", transitions, tt.want)
				}
				st, err := cluster.Classify(s.Containers[0], s.Replicas, s.Nodes, c)
				if err != nil || st.Class != cluster.Replicated || st.InService != 9 {
					t.Fatalf("ends %+v, %v; want HEALTHY with 9 indexes in service", st, err)
				}
				indexes, perRack := map[uint8]bool{}, map[string]int{}
				for _, r := range s.Replicas {
					n := s.Nodes[slices.IndexFunc(s.Nodes, func(n cluster.Node) bool { return n.ID == r.Node })]
					if n.Health != cluster.Healthy || n.OpState != cluster.InService {
						continue
					}
					if r.Index == 0 || r.Index > 9 || indexes[r.Index] || r.State != cluster.Closed {
						t.Errorf("replica %+v left", r)
					}
					indexes[r.Index] = true
					perRack[n.Rack]++
				}
				for rack, n := range perRack {
					if n > 3 {
						t.Errorf("%s holds %d indexes, want 3 at most", rack, n)
					}
				}
			})
		}
	}
}

// TestConvergeGeneratedEC: a generated cluster of replica:3 and rs-6-3
// containers with dead nodes, a decommissioning one and lost copies and
// indexes ends with every container HEALTHY (EC: nine indexes in
// service), the node DECOMMISSIONED, and no cycle's delete taking an
// index's last copy in service; the order of the input changes no
// decision.
func TestConvergeGeneratedEC(t *testing.T) {
	s := sim.Generate(sim.Spec{Nodes: 40, Racks: 5, Containers: 2000, UnderReplicated: 0.05, EC: 0.3, Dead: 2,
		Decommissioning: 1, Seed: 5})
	c := cfg(func(c *cluster.Config) { c.NodeLimit = 4 })
	first := decide(t, s, c)
	kinds := map[cluster.Kind]int{}
	for _, cmd := range first.Commands {
		kinds[cmd.Kind]++
	}
	if kinds[cluster.Reconstruct] == 0 || kinds[cluster.Replicate] == 0 {
		t.Fatalf("first cycle %v: want reconstructs and copies", kinds)
	}
	shuffled := cluster.State{Nodes: slices.Clone(s.Nodes), Containers: slices.Clone(s.Containers), Replicas: slices.Clone(s.Replicas)}
	slices.Reverse(shuffled.Nodes)
	slices.Reverse(shuffled.Containers)
	slices.Reverse(shuffled.Replicas)
	if got := decide(t, shuffled, c); !reflect.DeepEqual(got, first) {
		t.Fatalf("reversed input: %d commands, want the same %d", len(got.Commands), len(first.Commands))
	}
	cycles := converge(t, &s, &c, 200, func(cycle int, d cluster.Decision) {
		if d.Count(cluster.Unrecoverable) != 0 {
			t.Fatalf("cycle %d: %v unrecoverable", cycle, d.Unrecoverable)
		}
		for _, cmd := range d.Commands {
			if cmd.Kind != cluster.Delete {
				continue
			}
			ctr := s.Containers[cmd.Container-1]
			st, err := cluster.Classify(ctr, replicasOf(s, ctr.ID), s.Nodes, c)
			want := 3
			if ctr.Replication.Type == cluster.EC {
				want = 9
			}
			if err != nil || st.InService < want {
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
		if ctr.Replication.Type != cluster.EC {
			continue
		}
		st, err := cluster.Classify(ctr, replicasOf(s, ctr.ID), s.Nodes, c)
		if err != nil || st.InService != 9 {
			t.Fatalf("container %d: %+v, %v; want 9 indexes in service", ctr.ID, st, err)
		}
	}
}

// TestECSourceInFlightKept: an extra copy that a command in flight reads
// from is not deleted under it.
func TestECSourceInFlightKept(t *testing.T) {
	s := cluster.State{Nodes: fourRacks(nodeMods{"a3": {health(cluster.Dead)}}), Containers: []cluster.Container{ctr(1, rs63)},
		Replicas: append(ecReps(1, spread63...), indexOn(1, 1, "c3", cluster.Closed))}
	rebuild := cluster.Command{Kind: cluster.Reconstruct, Container: 1, Mode: cluster.Push, Deadline: now.Add(time.Minute),
		Sources: []cluster.NodeID{"c3", "b1", "c1", "d1", "a2", "b2"}, SourceIndexes: []uint8{1, 2, 3, 4, 5, 6},
		Indexes: []uint8{9}, Targets: []cluster.NodeID{"b3"}}
	for _, tt := range []struct {
		name    string
		sources []cluster.NodeID
		want    []string
	}{
		{"c3 a source", rebuild.Sources, []string{}},
		{"c3 not a source", []cluster.NodeID{"a1", "b1", "c1", "d1", "a2", "b2"}, []string{"D 1/1 c3"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := rebuild
			p.Sources = tt.sources
			s.Pending = []cluster.Command{p}
			if got := show(decide(t, s, cfg()).Commands); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("commands %q, want %q", got, tt.want)
			}
		})
	}
}
