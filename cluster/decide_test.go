package cluster_test

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/cluster"
	"github.com/cmfs-project/cmfs/cluster/sim"
)

type nodeMods = map[string][]func(*cluster.Node)

// TestDecide checks one cycle's decision for one situation at a time, on
// nine equal nodes a1-a3, b1-b3, c1-c3 on racks A, B and C (ties go to
// the lowest id).
func TestDecide(t *testing.T) {
	dead, stale := health(cluster.Dead), health(cluster.Stale)
	decom := op(cluster.Decommissioning)
	entering, inMaint := op(cluster.EnteringMaintenance), op(cluster.InMaintenance)
	bad := func(c cluster.ContainerID, n string) cluster.Replica { return replicaIn(c, n, cluster.Unhealthy, sum) }
	join := func(rs ...[]cluster.Replica) []cluster.Replica { return slices.Concat(rs...) }
	tests := []struct {
		name        string
		nodes       []cluster.Node // default: threeRacks(mods)
		mods        nodeMods
		containers  []cluster.Container // default: container 1, replica:3
		replicas    []cluster.Replica
		cfg         func(*cluster.Config)
		class       cluster.Class // of container 1
		want        []string
		transitions []string
	}{
		{name: "written to one node: two copies on the other racks",
			replicas: reps(1, "a1"), class: cluster.UnderReplicated, want: []string{"R 1 a1>b1", "R 1 a1>c1"}},
		{name: "dead node: its copy is made again on its rack's free node",
			mods: nodeMods{"c1": {dead}}, replicas: reps(1, "a1", "b1", "c1"),
			class: cluster.UnderReplicated, want: []string{"R 1 a1>c2"}},
		{name: "healthy",
			replicas: reps(1, "a1", "b1", "c1"), class: cluster.Replicated, want: []string{}},
		{name: "node back: the extra goes from the rack with two",
			mods: nodeMods{"b1": {free(1 << 30)}}, replicas: reps(1, "a1", "a2", "b1", "c1"),
			class: cluster.OverReplicated, want: []string{"D 1 a1"}},
		{name: "node back: of two on a rack, the fuller node's goes",
			mods: nodeMods{"a1": {free(1 << 41)}}, replicas: reps(1, "a1", "a2", "b1", "c1"),
			class: cluster.OverReplicated, want: []string{"D 1 a2"}},
		{name: "two extras on four racks: spread kept at three",
			nodes:    []cluster.Node{node("a1", "A"), node("b1", "B"), node("c1", "C"), node("d1", "D"), node("d2", "D")},
			replicas: reps(1, "a1", "b1", "c1", "d1", "d2"), class: cluster.OverReplicated, want: []string{"D 1 a1", "D 1 d1"}},
		{name: "one rack: any nodes",
			nodes:    []cluster.Node{node("n1", "A"), node("n2", "A"), node("n3", "A")},
			replicas: reps(1, "n1"), class: cluster.UnderReplicated, want: []string{"R 1 n1>n2", "R 1 n1>n3"}},
		{name: "two racks: three copies on two racks is not mis-replicated",
			nodes:    []cluster.Node{node("a1", "A"), node("a2", "A"), node("b1", "B")},
			replicas: reps(1, "a1", "a2", "b1"), class: cluster.Replicated, want: []string{}},
		{name: "mis-replicated: copies to the racks not used, nothing deleted yet",
			replicas: reps(1, "a1", "a2", "a3"), class: cluster.MisReplicated, want: []string{"R 1 a1>b1", "R 1 a2>c1"}},
		{name: "mis-replicated copies done: the rack with three loses two",
			replicas: reps(1, "a1", "a2", "a3", "b1", "c1"), class: cluster.OverReplicated, want: []string{"D 1 a1", "D 1 a2"}},
		{name: "unhealthy replica kept while good copies are short, replaced on its rack",
			replicas: join(reps(1, "a1", "c1"), []cluster.Replica{bad(1, "b1")}),
			class:    cluster.UnderReplicated, want: []string{"R 1 a1>b2"}},
		{name: "unhealthy replica deleted once enough good copies exist",
			replicas: join(reps(1, "a1", "b2", "c1"), []cluster.Replica{bad(1, "b1")}),
			class:    cluster.OverReplicated, want: []string{"D 1 b1"}},
		{name: "a checksum out of the majority is a bad replica",
			replicas: join(reps(1, "a1", "b1"), []cluster.Replica{replicaIn(1, "c1", cluster.Closed, 1)}),
			class:    cluster.UnderReplicated, want: []string{"R 1 a1>c2"}},
		{name: "the container's recorded checksum decides",
			containers: []cluster.Container{func() cluster.Container { c := ctr(1); c.Checksum = 1; return c }()},
			replicas:   join(reps(1, "a1", "b1"), []cluster.Replica{replicaIn(1, "c1", cluster.Closed, 1)}),
			class:      cluster.UnderReplicated, want: []string{"R 1 c1>a2", "R 1 c1>b2"}},
		{name: "checksums tie: unrecoverable, untouched",
			replicas: []cluster.Replica{replicaIn(1, "a1", cluster.Closed, 1), replicaIn(1, "b1", cluster.Closed, 2)},
			class:    cluster.Unrecoverable, want: []string{}},
		{name: "every copy on dead nodes: unrecoverable",
			mods: nodeMods{"a1": {dead}, "b1": {dead}}, replicas: reps(1, "a1", "b1"),
			class: cluster.Unrecoverable, want: []string{}},
		{name: "only unhealthy copies: unrecoverable, not deleted",
			replicas: []cluster.Replica{bad(1, "a1"), bad(1, "b1")}, class: cluster.Unrecoverable, want: []string{}},
		{name: "EC whole copy with fewer free nodes than indexes: not encoded yet",
			containers: []cluster.Container{ctr(1, "ec:rs-6-3-1024k")}, replicas: reps(1, "a1"),
			class: cluster.UnderReplicated, want: []string{}},
		{name: "open container left alone",
			containers: []cluster.Container{func() cluster.Container { c := ctr(1); c.State = cluster.Open; return c }()},
			replicas:   reps(1, "a1"), class: cluster.Unmanaged, want: []string{}},
		{name: "a recovering copy counts as coming",
			replicas: join(reps(1, "a1", "b1"), []cluster.Replica{replicaIn(1, "c1", cluster.Recovering, 0)}),
			class:    cluster.Replicated, want: []string{}},
		{name: "stale copy: no new copy yet",
			mods: nodeMods{"c1": {stale}}, replicas: reps(1, "a1", "b1", "c1"), class: cluster.Replicated, want: []string{}},
		{name: "stale copy: the extra in service is kept",
			mods: nodeMods{"c2": {stale}}, replicas: reps(1, "a1", "a2", "b1", "c1", "c2"),
			class: cluster.Replicated, want: []string{}},
		{name: "stale nodes are neither sources nor targets",
			mods:     nodeMods{"b1": {stale}, "b2": {stale}, "b3": {stale}},
			replicas: reps(1, "a1", "b1"), class: cluster.UnderReplicated, want: []string{"R 1 a1>c1"}},
		{name: "stale rack: copies go to racks in service",
			mods:     nodeMods{"b1": {stale}, "b2": {stale}, "b3": {stale}},
			replicas: reps(1, "a1"), class: cluster.UnderReplicated, want: []string{"R 1 a1>a2", "R 1 a1>c1"}},
		{name: "decommissioning copy is a source, not a copy",
			mods: nodeMods{"c1": {decom}}, replicas: reps(1, "a1", "b1", "c1"),
			class: cluster.UnderReplicated, want: []string{"R 1 a1>c2"}},
		{name: "only copy on a decommissioning node: copied from it",
			mods: nodeMods{"c1": {decom}}, containers: []cluster.Container{ctr(1, "replica:1")}, replicas: reps(1, "c1"),
			class: cluster.UnderReplicated, want: []string{"R 1 c1>a1"}},
		{name: "decommissioning node nothing depends on: decommissioned",
			mods: nodeMods{"c1": {decom}}, replicas: reps(1, "a1", "b1", "c1", "c2"),
			class: cluster.Replicated, want: []string{}, transitions: []string{"c1 DECOMMISSIONING>DECOMMISSIONED"}},
		{name: "decommissioning node holding an EC whole copy: encoded from it, stays",
			mods: nodeMods{"c1": {decom}}, containers: []cluster.Container{ctr(1, "ec:rs-3-2-1024k")},
			replicas: reps(1, "c1"), class: cluster.UnderReplicated, want: []string{"E 1 c1>1:a1,2:b1,3:c2,4:a2,5:b2"}},
		{name: "maintenance with redundancy 1: no copy, safe at once",
			mods: nodeMods{"c1": {entering}}, replicas: reps(1, "a1", "b1", "c1"), class: cluster.Replicated,
			want: []string{}, transitions: []string{"c1 ENTERING_MAINTENANCE>IN_MAINTENANCE"}},
		{name: "maintenance with redundancy 2: a copy first, not safe yet",
			mods: nodeMods{"c1": {entering}}, replicas: reps(1, "a1", "b1", "c1"),
			cfg:   func(c *cluster.Config) { c.MaintenanceRemainingRedundancy = 2 },
			class: cluster.UnderReplicated, want: []string{"R 1 a1>a2"}},
		{name: "two of three entering maintenance: one copy",
			mods: nodeMods{"b1": {entering}, "c1": {entering}}, replicas: reps(1, "a1", "b1", "c1"),
			class: cluster.UnderReplicated, want: []string{"R 1 a1>a2"}},
		{name: "in maintenance and dead: no copies",
			mods: nodeMods{"c1": {inMaint, dead}}, replicas: reps(1, "a1", "b1", "c1"), class: cluster.Replicated, want: []string{}},
		{name: "only copy in maintenance, offline: waiting, not unrecoverable",
			mods: nodeMods{"c1": {inMaint, dead}}, replicas: reps(1, "c1"), class: cluster.UnderReplicated, want: []string{}},
		{name: "maintenance ends: back in service, extra kept this cycle",
			mods:     nodeMods{"c1": {inMaint, until(now.Add(-time.Minute))}, "c3": {entering, until(now.Add(time.Hour))}},
			replicas: reps(1, "a1", "b1", "c1", "c2"), class: cluster.Replicated, want: []string{},
			transitions: []string{"c1 IN_MAINTENANCE>IN_SERVICE", "c3 ENTERING_MAINTENANCE>IN_MAINTENANCE"}},
		{name: "fewest copies first when limits bind",
			containers: []cluster.Container{ctr(1), ctr(2)},
			replicas:   join(reps(1, "a1", "b1"), reps(2, "a2")),
			cfg:        func(c *cluster.Config) { c.NodeLimit = 1 },
			class:      cluster.UnderReplicated, want: []string{"R 2 a2>b1", "R 1 a1>c1"}},
		{name: "node at its limit is no target",
			mods:     nodeMods{"b1": {func(n *cluster.Node) { n.InFlight = 10 }}},
			replicas: reps(1, "a1", "c1"), class: cluster.UnderReplicated, want: []string{"R 1 a1>b2"}},
		{name: "node without room for the import is no target",
			mods:     nodeMods{"b1": {free(1<<31 - 1)}},
			replicas: reps(1, "a1", "c1"), class: cluster.UnderReplicated, want: []string{"R 1 a1>b2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := cluster.State{Nodes: tt.nodes, Containers: tt.containers, Replicas: tt.replicas}
			if s.Nodes == nil {
				s.Nodes = threeRacks(tt.mods)
			}
			if s.Containers == nil {
				s.Containers = []cluster.Container{ctr(1)}
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
			var reps1 []cluster.Replica
			for _, r := range s.Replicas {
				if r.Container == s.Containers[0].ID {
					reps1 = append(reps1, r)
				}
			}
			st, err := cluster.Classify(s.Containers[0], reps1, s.Nodes, c)
			if err != nil {
				t.Fatal(err)
			}
			if tt.name != "fewest copies first when limits bind" && st.Class != tt.class {
				t.Errorf("class %v, want %v (%+v)", st.Class, tt.class, st)
			}
			for _, cmd := range d.Commands {
				if cmd.Kind == cluster.Replicate && (cmd.Mode != cluster.Push || !cmd.Deadline.Equal(now.Add(c.Timeout))) {
					t.Errorf("%v: mode %v deadline %v, want push by %v", cmd, cmd.Mode, cmd.Deadline, now.Add(c.Timeout))
				}
			}
		})
	}
}

// TestDecideReports checks the classes, lists and priorities a decision
// reports besides its commands.
func TestDecideReports(t *testing.T) {
	s := cluster.State{
		Nodes: threeRacks(nodeMods{"c3": {health(cluster.Dead)}}),
		Containers: []cluster.Container{ctr(1), ctr(2), func() cluster.Container {
			c := ctr(3, "ec:rs-6-3-1024k")
			c.State = cluster.Open
			return c
		}(), ctr(4), ctr(5), ctr(6)},
		Replicas: slices.Concat(reps(1, "a1", "b1", "c1"), reps(2, "a2"), reps(3, "a3"), reps(4, "c3"),
			reps(5, "a1", "a2", "b1", "c1"), reps(6, "a1", "b1")),
	}
	d := decide(t, s, cfg())
	want := map[cluster.Class]int{cluster.Replicated: 1, cluster.UnderReplicated: 2, cluster.Unmanaged: 1,
		cluster.Unrecoverable: 1, cluster.OverReplicated: 1}
	for c := range cluster.Unmanaged + 1 {
		if got := d.Count(c); got != want[c] {
			t.Errorf("%v: %d containers, want %d", c, got, want[c])
		}
	}
	if want := []cluster.Report{{Container: 4, Reason: "no good replica left"}}; !reflect.DeepEqual(d.Unrecoverable, want) {
		t.Errorf("unrecoverable %v, want %v", d.Unrecoverable, want)
	}
	if len(d.Unmanaged) != 1 || d.Unmanaged[0].Container != 3 || !strings.Contains(d.Unmanaged[0].Reason, "not CLOSED") {
		t.Errorf("unmanaged %v, want container 3, not CLOSED", d.Unmanaged)
	}
	prio := map[cluster.ContainerID]int{}
	for _, c := range d.Commands {
		prio[c.Container] = c.Priority
	}
	if want := map[cluster.ContainerID]int{2: 2, 5: 0, 6: 1}; !reflect.DeepEqual(prio, want) {
		t.Errorf("priorities %v, want %v", prio, want)
	}
	if d.Commands[0].Container != 2 || d.Commands[len(d.Commands)-1].Container != 5 {
		t.Errorf("order %q: want the most urgent first", show(d.Commands))
	}
}

// TestPendingPreventsDuplicates: commands in flight count as the copies
// they make (and the deletes as done), until their deadline.
func TestPendingPreventsDuplicates(t *testing.T) {
	base := cluster.State{Nodes: threeRacks(nil), Containers: []cluster.Container{ctr(1), ctr(2)},
		Replicas: slices.Concat(reps(1, "a1"), reps(2, "a1", "a2", "b1", "c1"))}
	first := decide(t, base, cfg())
	if got, want := show(first.Commands), []string{"R 1 a1>b1", "R 1 a1>c1", "D 2 a1"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("first cycle %q, want %q", got, want)
	}
	tests := []struct {
		name        string
		at          time.Time
		want        []string
		wantExpired int
	}{
		{"in flight: nothing new", now.Add(time.Minute), []string{}, 0},
		{"past the deadline: sent again", now.Add(cluster.DefaultTimeout), []string{"R 1 a1>b1", "R 1 a1>c1", "D 2 a1"}, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := base
			s.Pending = first.Commands
			d := decide(t, s, cfg(func(c *cluster.Config) { c.Now = tt.at }))
			if got := show(d.Commands); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("commands %q, want %q", got, tt.want)
			}
			if len(d.Expired) != tt.wantExpired {
				t.Errorf("%d expired, want %d", len(d.Expired), tt.wantExpired)
			}
		})
	}
	t.Run("in flight: charged to the nodes' limits", func(t *testing.T) {
		s := base
		s.Pending = first.Commands
		s.Containers = append(s.Containers, ctr(3))
		s.Replicas = append(s.Replicas, reps(3, "a1", "b2")...)
		d := decide(t, s, cfg(func(c *cluster.Config) { c.NodeLimit = 2 }))
		// a1 is the source of both copies in flight: b2 must serve.
		if got, want := show(d.Commands), []string{"R 3 b2>c2"}; !reflect.DeepEqual(got, want) {
			t.Errorf("commands %q, want %q", got, want)
		}
	})
}

// TestPullMode: every replicate carries the mode the config says.
func TestPullMode(t *testing.T) {
	s := cluster.State{Nodes: threeRacks(nil), Containers: []cluster.Container{ctr(1), ctr(2), ctr(3)},
		Replicas: slices.Concat(reps(1, "a1"), reps(2, "b1", "b2", "b3"), reps(3, "a1", "b1", "c1", "c2"))}
	for _, push := range []bool{false, true} {
		want := map[bool]cluster.Mode{false: cluster.Pull, true: cluster.Push}[push]
		d := decide(t, s, cfg(func(c *cluster.Config) { c.Push = push }))
		n := 0
		for _, c := range d.Commands {
			if c.Kind == cluster.Replicate {
				n++
				if c.Mode != want {
					t.Errorf("push=%v: %v has mode %v", push, c, c.Mode)
				}
			} else if c.Mode != 0 {
				t.Errorf("%v: a delete with a mode", c)
			}
		}
		if n != 4 {
			t.Errorf("push=%v: %d replicates, want 4: %q", push, n, show(d.Commands))
		}
	}
}

// TestDeterministic: the order of the input does not change the output.
func TestDeterministic(t *testing.T) {
	s := sim.Generate(sim.Spec{Nodes: 40, Racks: 4, Containers: 2000, UnderReplicated: 0.05, Dead: 2, Decommissioning: 1, Seed: 7})
	c := cfg(func(c *cluster.Config) { c.NodeLimit = 3 })
	want := decide(t, s, c)
	if len(want.Commands) == 0 {
		t.Fatal("no commands: the generated state should need some")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 3 {
		sh := cluster.State{Nodes: slices.Clone(s.Nodes), Containers: slices.Clone(s.Containers), Replicas: slices.Clone(s.Replicas)}
		rng.Shuffle(len(sh.Nodes), func(i, j int) { sh.Nodes[i], sh.Nodes[j] = sh.Nodes[j], sh.Nodes[i] })
		rng.Shuffle(len(sh.Containers), func(i, j int) { sh.Containers[i], sh.Containers[j] = sh.Containers[j], sh.Containers[i] })
		rng.Shuffle(len(sh.Replicas), func(i, j int) { sh.Replicas[i], sh.Replicas[j] = sh.Replicas[j], sh.Replicas[i] })
		if got := decide(t, sh, c); !reflect.DeepEqual(got, want) {
			t.Fatalf("shuffle %d: decision differs: %d commands, want %d", i, len(got.Commands), len(want.Commands))
		}
	}
}
