package store

import (
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/cluster"
)

func open(t *testing.T, path string) *Bolt {
	t.Helper()
	b, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// TestBoltSurvivesReopen records what a coordinator records and checks a
// second Open loads exactly that: the state a restarted coordinator
// resumes from.
func TestBoltSurvivesReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cluster.db")
	testSurvivesReopen(t, func() Store { return open(t, path) })
}

// testSurvivesReopen is TestBoltSurvivesReopen on any store: reopen
// returns a new Store on the same state.
func testSurvivesReopen(t *testing.T, reopen func() Store) {
	b := reopen()
	end := time.Unix(1700000000, 0).UTC()
	nodes := []Node{
		{ID: "dn1", Addr: "127.0.0.1:1", Rack: "r1", FreeBytes: 10},
		{ID: "dn2", Addr: "127.0.0.1:2", Rack: "r2", OpState: cluster.InMaintenance, MaintenanceEnd: end},
	}
	for _, n := range nodes {
		if err := b.PutNode(n); err != nil {
			t.Fatal(err)
		}
	}
	c1 := cluster.Container{ID: 1, Replication: cluster.MustReplication("replica:3"), State: cluster.Closed, Bytes: 5}
	c2 := cluster.Container{ID: 2, Replication: cluster.MustReplication("replica:3"), State: cluster.Closed, Bytes: 6}
	steps := []Report{
		{Node: "dn1", Full: true, Containers: []cluster.Container{c1, c2}, Replicas: []cluster.Replica{
			{Container: 1, Node: "dn1", State: cluster.Closed, Checksum: 7},
			{Container: 2, Node: "dn1", State: cluster.Closed, Checksum: 8},
		}},
		{Node: "dn2", Full: true, Replicas: []cluster.Replica{{Container: 2, Node: "dn2", State: cluster.Recovering}}},
		// Incremental: container 1 gone from dn1, 2 changed on dn2.
		{Node: "dn1", Removed: []cluster.ContainerID{1}},
		{Node: "dn2", Replicas: []cluster.Replica{{Container: 2, Node: "dn2", State: cluster.Closed, Checksum: 8}}},
		// A full report replaces: dn2 now holds 1 only.
		{Node: "dn2", Full: true, Replicas: []cluster.Replica{{Container: 1, Node: "dn2", State: cluster.Closed, Checksum: 7}}},
	}
	for _, r := range steps {
		if err := b.Report(r); err != nil {
			t.Fatal(err)
		}
	}
	cmds, err := b.AddCommands([]Command{
		{Node: "dn1", Command: cluster.Command{Kind: cluster.Replicate, Container: 2, Target: "dn2", Sources: []cluster.NodeID{"dn1"}, Mode: cluster.Push, Deadline: end}},
		{Node: "dn2", Command: cluster.Command{Kind: cluster.Delete, Container: 1, Target: "dn2"}},
		{Node: "dn2", Command: cluster.Command{Kind: cluster.Delete, Container: 2, Target: "dn2"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if cmds[0].ID == 0 || cmds[1].ID <= cmds[0].ID || cmds[2].ID <= cmds[1].ID {
		t.Fatalf("command ids %d %d %d: want increasing from 1", cmds[0].ID, cmds[1].ID, cmds[2].ID)
	}
	if err := b.RemoveCommands([]uint64{cmds[1].ID, 999}); err != nil {
		t.Fatal(err)
	}
	b.Close()

	got, err := reopen().Load()
	if err != nil {
		t.Fatal(err)
	}
	want := Snapshot{
		Nodes:      nodes,
		Containers: []cluster.Container{c1, c2},
		Replicas: []cluster.Replica{
			{Container: 1, Node: "dn2", State: cluster.Closed, Checksum: 7},
			{Container: 2, Node: "dn1", State: cluster.Closed, Checksum: 8},
		},
		Commands: []Command{cmds[0], cmds[2]},
	}
	for i := range got.Nodes {
		got.Nodes[i].MaintenanceEnd = got.Nodes[i].MaintenanceEnd.UTC()
	}
	for i := range got.Commands {
		got.Commands[i].Deadline = got.Commands[i].Deadline.UTC()
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("loaded\n%+v\nwant\n%+v", got, want)
	}
}
