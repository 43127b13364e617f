package coord

import (
	"maps"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/cluster"
	"github.com/cmfs-project/cmfs/cluster/store"
)

// clock is a settable clock for the coordinator.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func newCoord(t *testing.T, path string, clk *clock) *Coordinator {
	t.Helper()
	st, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cfg := cluster.DefaultConfig()
	c, err := New(Config{Store: st, StaleAfter: 10 * time.Second, DeadAfter: 20 * time.Second, Decide: cfg, Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

var r3 = cluster.MustReplication("replica:3")

func closed(id cluster.ContainerID) ReplicaReport {
	return ReplicaReport{Replica: cluster.Replica{Container: id, State: cluster.Closed, Checksum: 42}, Replication: r3, Bytes: 100}
}

func beat(t *testing.T, c *Coordinator, id string, full bool, reps ...ReplicaReport) Reply {
	t.Helper()
	r, err := c.Heartbeat(Beat{Node: store.Node{ID: cluster.NodeID(id), Addr: "addr-" + id, Rack: "r" + id[len(id)-1:], FreeBytes: 1 << 30}, Full: full, Replicas: reps})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestCoordinatorHealsAndResumes walks one container through the
// coordinator: reported on one node of four on four racks, it gets two
// replicate commands from that node, handed out once; a coordinator
// started again on the same store hands them out again; once the targets
// report the copies the commands are done; a node whose heartbeats stop
// goes STALE then DEAD and its copy is made again elsewhere.
func TestCoordinatorHealsAndResumes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cluster.db")
	clk := &clock{t: time.Unix(1000, 0)}
	c := newCoord(t, path, clk)
	beat(t, c, "n1", true, closed(7))
	for _, n := range []string{"n2", "n3", "n4"} {
		beat(t, c, n, true)
	}
	if err := c.Cycle(); err != nil {
		t.Fatal(err)
	}
	r := beat(t, c, "n1", false)
	if len(r.Commands) != 2 {
		t.Fatalf("n1 got %d commands, want 2 replicates: %+v", len(r.Commands), r.Commands)
	}
	targets := map[cluster.NodeID]bool{}
	for _, cmd := range r.Commands {
		if cmd.Kind != cluster.Replicate || cmd.Container != 7 || cmd.Mode != cluster.Push {
			t.Errorf("command %v: want a push replicate of 7", cmd.Command)
		}
		targets[cmd.Target] = true
	}
	if r := beat(t, c, "n1", false); len(r.Commands) != 0 {
		t.Errorf("commands handed out twice: %+v", r.Commands)
	}

	// kill -9 and start again: the pending commands come back.
	c.cfg.Store.Close()
	c = newCoord(t, path, clk)
	if got := c.Status().Pending; got != 2 {
		t.Fatalf("pending after restart: %d, want 2", got)
	}
	if r := beat(t, c, "n1", false); len(r.Commands) != 2 {
		t.Fatalf("after restart n1 got %d commands, want the 2 pending", len(r.Commands))
	}
	for n := range targets {
		beat(t, c, string(n), false, closed(7))
	}
	if err := c.Cycle(); err != nil {
		t.Fatal(err)
	}
	if got := c.Status().Pending; got != 0 {
		t.Errorf("pending once the copies are reported: %d, want 0", got)
	}
	cs, err := c.Containers()
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 1 || cs[0].Class != cluster.Replicated || len(cs[0].Replicas) != 3 {
		t.Fatalf("containers: %+v, want 7 HEALTHY with 3 replicas", cs)
	}

	// One target stops heartbeating.
	var lost cluster.NodeID
	for n := range targets {
		lost = n
		break
	}
	health := func() cluster.Health {
		for _, n := range c.Nodes() {
			if n.ID == lost {
				return n.Health
			}
		}
		t.Fatalf("node %s gone", lost)
		return 0
	}
	alive := func() {
		for _, n := range []string{"n1", "n2", "n3", "n4"} {
			if cluster.NodeID(n) != lost {
				beat(t, c, n, false)
			}
		}
	}
	clk.add(11 * time.Second)
	alive()
	if h := health(); h != cluster.Stale {
		t.Errorf("after 11s: %v, want STALE", h)
	}
	clk.add(10 * time.Second)
	alive()
	if h := health(); h != cluster.Dead {
		t.Errorf("after 21s: %v, want DEAD", h)
	}
	if err := c.Cycle(); err != nil {
		t.Fatal(err)
	}
	var got []store.Command
	for _, n := range []string{"n1", "n2", "n3", "n4"} {
		if cluster.NodeID(n) != lost {
			got = append(got, beat(t, c, n, false).Commands...)
		}
	}
	if len(got) != 1 || got[0].Kind != cluster.Replicate || got[0].Target == lost || targets[got[0].Target] {
		t.Fatalf("after %s died: %+v, want one replicate to the fourth node", lost, got)
	}
}

// TestCoordinatorOpState checks what the operator may set.
func TestCoordinatorOpState(t *testing.T) {
	clk := &clock{t: time.Unix(1000, 0)}
	c := newCoord(t, filepath.Join(t.TempDir(), "cluster.db"), clk)
	beat(t, c, "n1", true)
	tests := []struct {
		node string
		to   cluster.OpState
		ok   bool
	}{
		{"n1", cluster.Decommissioning, true},
		{"n1", cluster.InService, true},
		{"n1", cluster.EnteringMaintenance, true},
		{"n1", cluster.Decommissioned, false},
		{"n9", cluster.Decommissioning, false},
	}
	for _, tt := range tests {
		t.Run(tt.node+"-"+tt.to.String(), func(t *testing.T) {
			n, err := c.SetOpState(cluster.NodeID(tt.node), tt.to, time.Time{})
			if (err == nil) != tt.ok {
				t.Fatalf("err %v, want ok %v", err, tt.ok)
			}
			if tt.ok && n.OpState != tt.to {
				t.Errorf("state %v, want %v", n.OpState, tt.to)
			}
		})
	}
}

// twoCopies is a coordinator that knows n1 and n2 each holding a copy of
// container 7 (replica:3), and n3 holding none, on three racks.
func twoCopies(t *testing.T) (*Coordinator, *clock) {
	t.Helper()
	clk := &clock{t: time.Unix(1000, 0)}
	c := newCoord(t, filepath.Join(t.TempDir(), "cluster.db"), clk)
	beat(t, c, "n1", true, closed(7))
	beat(t, c, "n2", true, closed(7))
	beat(t, c, "n3", true)
	return c, clk
}

// TestCoordinatorDropsDeadCarrier: a replicate whose source node dies
// before it reports is not waited for until its deadline: the next cycle
// drops it and sends the copy from a node alive.
func TestCoordinatorDropsDeadCarrier(t *testing.T) {
	c, clk := twoCopies(t)
	if err := c.Cycle(); err != nil {
		t.Fatal(err)
	}
	r := beat(t, c, "n1", false)
	if len(r.Commands) != 1 || r.Commands[0].Target != "n3" {
		t.Fatalf("n1 got %+v, want one replicate to n3", r.Commands)
	}
	// n1 dies with it: n2 and n3 beat on, n1 does not.
	for range 3 {
		clk.add(10 * time.Second)
		beat(t, c, "n2", false)
		beat(t, c, "n3", false)
	}
	if err := c.Cycle(); err != nil {
		t.Fatal(err)
	}
	r = beat(t, c, "n2", false)
	if len(r.Commands) != 1 || r.Commands[0].Target != "n3" || r.Commands[0].Container != 7 {
		t.Fatalf("after n1 died n2 got %+v, want the replicate of 7 to n3", r.Commands)
	}
	if st := c.Status(); st.Pending != 1 {
		t.Errorf("%d commands pending, want 1 (n1's dropped)", st.Pending)
	}
}

// TestCoordinatorStatusCounts: Status counts the nodes by health and
// operational state, the commands issued by kind, and those dropped
// unfinished by why: a failure reported, a deadline passed, a node dead.
func TestCoordinatorStatusCounts(t *testing.T) {
	c, clk := twoCopies(t)
	if _, err := c.SetOpState("n3", cluster.Decommissioning, time.Time{}); err != nil {
		t.Fatal(err)
	}
	beat(t, c, "n4", true)
	st := c.Status()
	if len(st.Issued) != 0 || len(st.Dropped) != 0 {
		t.Errorf("before a cycle: issued %v, dropped %v; want none", st.Issued, st.Dropped)
	}
	want := map[NodeState]int{{cluster.Healthy, cluster.InService}: 3, {cluster.Healthy, cluster.Decommissioning}: 1}
	if !maps.Equal(st.NodeStates, want) {
		t.Errorf("node states %v, want %v", st.NodeStates, want)
	}

	cycle := func() {
		t.Helper()
		if err := c.Cycle(); err != nil {
			t.Fatal(err)
		}
	}
	// commands hands out the commands of the nodes alive.
	commands := func(alive ...string) []store.Command {
		t.Helper()
		var out []store.Command
		for _, n := range alive {
			out = append(out, beat(t, c, n, false).Commands...)
		}
		return out
	}
	cycle()
	cmds := commands("n1", "n2", "n3", "n4")
	if len(cmds) != 1 || cmds[0].Kind != cluster.Replicate {
		t.Fatalf("first cycle: %+v, want one replicate", cmds)
	}
	// Its node reports it failed.
	if _, err := c.Heartbeat(Beat{Node: store.Node{ID: cmds[0].Node, Addr: "addr-" + string(cmds[0].Node), Rack: "r" + string(cmds[0].Node[1:])},
		Results: []Result{{Command: cmds[0].ID, Err: "disk on fire"}}}); err != nil {
		t.Fatal(err)
	}
	cycle()
	cmds = commands("n1", "n2", "n3", "n4")
	if len(cmds) != 1 {
		t.Fatalf("after the failure: %+v, want the replicate again", cmds)
	}
	// It passes its deadline, all nodes beating on.
	clk.add(cluster.DefaultTimeout + time.Second)
	commands("n1", "n2", "n3", "n4")
	cycle()
	cmds = commands("n1", "n2", "n3", "n4")
	if len(cmds) != 1 {
		t.Fatalf("after the deadline: %+v, want the replicate again", cmds)
	}
	// Its node dies.
	carrier := string(cmds[0].Node)
	var alive []string
	for _, n := range []string{"n1", "n2", "n3", "n4"} {
		if n != carrier {
			alive = append(alive, n)
		}
	}
	for range 3 {
		clk.add(10 * time.Second)
		commands(alive...)
	}
	cycle()

	st = c.Status()
	if want := map[cluster.Kind]uint64{cluster.Replicate: 4}; !maps.Equal(st.Issued, want) {
		t.Errorf("issued %v, want %v", st.Issued, want)
	}
	wantDropped := map[Drop]uint64{{cluster.Replicate, Failed}: 1, {cluster.Replicate, Expired}: 1, {cluster.Replicate, NodeDead}: 1}
	if !maps.Equal(st.Dropped, wantDropped) {
		t.Errorf("dropped %v, want %v", st.Dropped, wantDropped)
	}
	deadState := cluster.InService
	if carrier == "n3" {
		deadState = cluster.Decommissioning
	}
	dead := 0
	for s, n := range st.NodeStates {
		if s.Health == cluster.Dead {
			dead += n
			if s.OpState != deadState || n != 1 {
				t.Errorf("dead: %d in %v, want %s alone, %v", n, s.OpState, carrier, deadState)
			}
		}
	}
	if dead != 1 || st.Nodes != 4 {
		t.Errorf("node states %v, want %s DEAD of 4", st.NodeStates, carrier)
	}
}
