package sim

import (
	"fmt"
	"hash/fnv"
	"strings"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/cluster"
)

func TestApply(t *testing.T) {
	base := func() cluster.State {
		return cluster.State{
			Nodes: []cluster.Node{{ID: "a", OpState: cluster.Decommissioning}, {ID: "b"}, {ID: "c"}},
			Replicas: []cluster.Replica{{Container: 1, Node: "a", State: cluster.Closed, Checksum: 9},
				{Container: 2, Node: "c", State: cluster.Closed, Checksum: 8}},
			Pending: []cluster.Command{{Kind: cluster.Delete, Container: 2, Target: "c", Deadline: time.Now()}},
		}
	}
	tests := []struct {
		name string
		d    cluster.Decision
		want []cluster.Replica
		err  string
	}{
		{name: "replicate copies the source's checksum, in order",
			d: cluster.Decision{Commands: []cluster.Command{{Kind: cluster.Replicate, Container: 1, Sources: []cluster.NodeID{"a"}, Target: "b"}}},
			want: []cluster.Replica{{Container: 1, Node: "a", State: cluster.Closed, Checksum: 9}, {Container: 1, Node: "b", State: cluster.Closed, Checksum: 9},
				{Container: 2, Node: "c", State: cluster.Closed, Checksum: 8}}},
		{name: "delete removes",
			d:    cluster.Decision{Commands: []cluster.Command{{Kind: cluster.Delete, Container: 1, Target: "a"}}},
			want: []cluster.Replica{{Container: 2, Node: "c", State: cluster.Closed, Checksum: 8}}},
		{name: "delete of nothing", err: "no such replica",
			d: cluster.Decision{Commands: []cluster.Command{{Kind: cluster.Delete, Container: 1, Target: "b"}}}},
		{name: "replicate from a node without the container", err: "source holds no replica",
			d: cluster.Decision{Commands: []cluster.Command{{Kind: cluster.Replicate, Container: 1, Sources: []cluster.NodeID{"b"}, Target: "c"}}}},
		{name: "replicate onto a holder", err: "target holds a replica already",
			d: cluster.Decision{Commands: []cluster.Command{{Kind: cluster.Replicate, Container: 2, Sources: []cluster.NodeID{"c"}, Target: "c"}}}},
		{name: "encode adds the indexes with the whole copy's checksum",
			d: cluster.Decision{Commands: []cluster.Command{{Kind: cluster.Encode, Container: 1, Sources: []cluster.NodeID{"a"},
				Indexes: []uint8{1, 2}, Targets: []cluster.NodeID{"c", "b"}}}},
			want: []cluster.Replica{{Container: 1, Node: "a", State: cluster.Closed, Checksum: 9},
				{Container: 1, Node: "b", Index: 2, State: cluster.Closed, Checksum: 9},
				{Container: 1, Node: "c", Index: 1, State: cluster.Closed, Checksum: 9},
				{Container: 2, Node: "c", State: cluster.Closed, Checksum: 8}}},
		{name: "reconstruct from a source without the index it names", err: "source a holds no index 3",
			d: cluster.Decision{Commands: []cluster.Command{{Kind: cluster.Reconstruct, Container: 1, Sources: []cluster.NodeID{"a"},
				SourceIndexes: []uint8{3}, Indexes: []uint8{1}, Targets: []cluster.NodeID{"b"}}}}},
		{name: "encode onto a holder", err: "target c holds a replica already",
			d: cluster.Decision{Commands: []cluster.Command{{Kind: cluster.Encode, Container: 2, Sources: []cluster.NodeID{"c"},
				Indexes: []uint8{1}, Targets: []cluster.NodeID{"c"}}}}},
		{name: "delete of another index", err: "the replica there is index 0",
			d: cluster.Decision{Commands: []cluster.Command{{Kind: cluster.Delete, Container: 1, Index: 4, Target: "a"}}}},
		{name: "copy of another index", err: "source holds index 0",
			d: cluster.Decision{Commands: []cluster.Command{{Kind: cluster.Replicate, Container: 1, Index: 4, Sources: []cluster.NodeID{"a"}, Target: "b"}}}},
		{name: "transition from the wrong state", err: "node not in IN_SERVICE",
			d: cluster.Decision{Transitions: []cluster.Transition{{Node: "b", From: cluster.InService, To: cluster.InMaintenance}}, Commands: nil}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := base()
			if tt.err == "node not in IN_SERVICE" {
				s.Nodes[1].OpState = cluster.Decommissioned
			}
			err := Apply(&s, tt.d)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(s.Replicas) != len(tt.want) {
				t.Fatalf("replicas %+v, want %+v", s.Replicas, tt.want)
			}
			for i := range tt.want {
				if s.Replicas[i] != tt.want[i] {
					t.Fatalf("replicas %+v, want %+v", s.Replicas, tt.want)
				}
			}
			if s.Pending != nil {
				t.Errorf("pending %v left", s.Pending)
			}
		})
	}
}

func TestGenerate(t *testing.T) {
	s := Generate(Spec{Nodes: 30, Racks: 5, Containers: 1000, UnderReplicated: 0.1, Dead: 2, Decommissioning: 1, Seed: 1})
	if len(s.Containers) != 1000 || s.Nodes[0].Health != cluster.Dead || s.Nodes[2].OpState != cluster.Decommissioning {
		t.Fatalf("%d containers, node 0 %v, node 2 %v", len(s.Containers), s.Nodes[0].Health, s.Nodes[2].OpState)
	}
	rack := map[cluster.NodeID]string{}
	for _, n := range s.Nodes {
		rack[n.ID] = n.Rack
	}
	short := Count(s)
	if short < 50 || short > 150 {
		t.Errorf("%d of 1000 containers with two copies, want about 100", short)
	}
	for i := 0; i < len(s.Replicas); {
		j, racks := i, map[string]bool{}
		for j < len(s.Replicas) && s.Replicas[j].Container == s.Replicas[i].Container {
			racks[rack[s.Replicas[j].Node]] = true
			j++
		}
		if len(racks) != j-i {
			t.Fatalf("container %d: %d copies on %d racks", s.Replicas[i].Container, j-i, len(racks))
		}
		i = j
	}
}

// TestGenerateEC: EC containers get their nine indexes (eight when
// under-replicated) on distinct nodes, no rack over ⌈9/5⌉, and a spec
// without EC draws what it always drew.
func TestGenerateEC(t *testing.T) {
	spec := Spec{Nodes: 30, Racks: 5, Containers: 1000, UnderReplicated: 0.1, Seed: 1, EC: 0.3}
	s := Generate(spec)
	rack := map[cluster.NodeID]string{}
	for _, n := range s.Nodes {
		rack[n.ID] = n.Rack
	}
	ec, short := 0, 0
	for _, c := range s.Containers {
		if c.Replication.Type != cluster.EC {
			continue
		}
		ec++
		nodes, indexes, perRack := map[cluster.NodeID]bool{}, map[uint8]bool{}, map[string]int{}
		for _, r := range s.Replicas {
			if r.Container == c.ID {
				nodes[r.Node], indexes[r.Index] = true, true
				perRack[rack[r.Node]]++
			}
		}
		if len(nodes) != len(indexes) || len(indexes) < 8 || indexes[0] {
			t.Fatalf("container %d: %d indexes on %d nodes", c.ID, len(indexes), len(nodes))
		}
		if len(indexes) == 8 {
			short++
		}
		for r, n := range perRack {
			if n > 2 {
				t.Fatalf("container %d: %d indexes on %s", c.ID, n, r)
			}
		}
	}
	if ec < 250 || ec > 350 || short < 10 || short > 60 {
		t.Errorf("%d EC containers, %d short; want about 300 and 30", ec, short)
	}
	if Count(s) < 50 {
		t.Errorf("Count %d: want the short EC and Ratis ones", Count(s))
	}
	// The digest of what Generate drew for this spec before it knew EC.
	old := Generate(Spec{Nodes: 30, Racks: 5, Containers: 1000, UnderReplicated: 0.1, Dead: 2, Decommissioning: 1, Seed: 1})
	h := fnv.New64a()
	for _, r := range old.Replicas {
		fmt.Fprint(h, r)
	}
	if got := h.Sum64(); got != 0xa53a904a2a0767f1 {
		t.Errorf("a spec without EC draws something else: digest %#x", got)
	}
}
