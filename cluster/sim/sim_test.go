package sim

import (
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
