package store

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/cluster"
	"github.com/cmfs-project/cmfs/internal/etcdtest"
)

// TestEtcdSurvivesReopen: what one client of a real etcd stored, a new
// client (a coordinator started elsewhere) loads.
func TestEtcdSurvivesReopen(t *testing.T) {
	srv := etcdtest.Start(t)
	testSurvivesReopen(t, func() Store { return NewEtcd(srv.Client(t), "/test/") })
}

// TestEtcdLargeReport: a report and a batch of commands beyond one
// transaction's writes are stored whole.
func TestEtcdLargeReport(t *testing.T) {
	srv := etcdtest.Start(t)
	e := NewEtcd(srv.Client(t), "/test/")
	const n = 3*etcdMaxOps + 7
	r := Report{Node: "dn1", Full: true}
	var cmds []Command
	for i := 1; i <= n; i++ {
		id := cluster.ContainerID(i)
		r.Containers = append(r.Containers, cluster.Container{ID: id, Replication: cluster.MustReplication("replica:3"), State: cluster.Closed})
		r.Replicas = append(r.Replicas, cluster.Replica{Container: id, Node: "dn1", State: cluster.Closed})
		cmds = append(cmds, Command{Node: "dn1", Command: cluster.Command{Kind: cluster.Delete, Container: id, Target: "dn1"}})
	}
	if err := e.Report(r); err != nil {
		t.Fatal(err)
	}
	got, err := e.AddCommands(cmds)
	if err != nil {
		t.Fatal(err)
	}
	if got[n-1].ID != n {
		t.Errorf("last command id %d, want %d", got[n-1].ID, n)
	}
	s, err := e.Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Containers) != n || len(s.Replicas) != n || len(s.Commands) != n {
		t.Errorf("loaded %d containers, %d replicas, %d commands; want %d of each", len(s.Containers), len(s.Replicas), len(s.Commands), n)
	}
}

// TestEtcdFence: of two coordinators campaigning, one leads; the other
// takes over when the first's term ends, and from then on the first's
// writes are refused.
func TestEtcdFence(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx := context.Background()
	a, b := NewEtcd(srv.Client(t), "/test/"), NewEtcd(srv.Client(t), "/test/")
	ta, err := a.Campaign(ctx, "a:1", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.PutNode(Node{ID: "dn1"}); err != nil {
		t.Fatalf("the leader's write: %v", err)
	}
	won := make(chan error, 1)
	go func() {
		_, err := b.Campaign(ctx, "b:1", time.Second)
		won <- err
	}()
	select {
	case err := <-won:
		t.Fatalf("b leads while a does (err %v)", err)
	case <-time.After(300 * time.Millisecond): // not synchronization: a window in which b must not win
	}
	if l, err := b.Leader(ctx); err != nil || l != "a:1" {
		t.Errorf("leader %q (%v), want a:1", l, err)
	}
	if err := ta.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-won:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("b does not lead 10s after a resigned")
	}
	if l, err := a.Leader(ctx); err != nil || l != "b:1" {
		t.Errorf("leader %q (%v), want b:1", l, err)
	}
	for i, write := range []func() error{
		func() error { return a.PutNode(Node{ID: "dn2"}) },
		func() error { return a.Report(Report{Node: "dn1", Full: true}) },
		func() error { _, err := a.AddCommands([]Command{{Node: "dn1"}}); return err },
		func() error { return a.RemoveCommands([]uint64{1}) },
	} {
		if err := write(); !errors.Is(err, ErrNotLeader) {
			t.Errorf("write %d of the old leader: %v, want ErrNotLeader", i, err)
		}
	}
	if err := b.PutNode(Node{ID: "dn3"}); err != nil {
		t.Errorf("the new leader's write: %v", err)
	}
	s, err := b.Load()
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(len(s.Nodes), len(s.Commands)); got != "2 0" {
		t.Errorf("nodes, commands stored: %s, want 2 0 (dn1, dn3)", got)
	}
}
