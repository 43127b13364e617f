package integration

import (
	"encoding/json"
	"fmt"
	"github.com/cmfs-project/cmfs/internal/wait"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The cluster tests run six `replicad serve` nodes on three racks, dn1
// the coordinator, the others joined to it, with heartbeats and the
// replication manager's cycle in fractions of a second, and watch the
// cluster through `replicad admin ... --json`.

type clusterReplica struct {
	Node  string `json:"node"`
	Index int    `json:"index"`
	State string `json:"state"`
}

type clusterContainer struct {
	ID       string           `json:"id"`
	Class    string           `json:"class"`
	Reason   string           `json:"reason"`
	State    string           `json:"state"`
	Replicas []clusterReplica `json:"replicas"`
}

type clusterNode struct {
	ID         string `json:"id"`
	Rack       string `json:"rack"`
	Health     string `json:"health"`
	OpState    string `json:"opstate"`
	Containers int    `json:"containers"`
}

type testCluster struct {
	nodes map[string]*replNode
	coord *replNode
}

// clusterFlags are the short timings of every test cluster.
var clusterFlags = []string{"--heartbeat", "100ms", "--stale-after", "1s", "--dead-after", "2s", "--rm-interval", "200ms"}

// startCluster starts dn1…dn6 on racks r1 (dn1, dn2), r2, r3, with the
// extra serve flags, and waits until the coordinator knows all six.
func startCluster(t *testing.T, extra ...string) *testCluster {
	t.Helper()
	return startClusterOf(t, 6, rackOf, extra...)
}

// startClusterOf starts dn1…dn<n>, each on the rack rack names, dn1 the
// coordinator.
func startClusterOf(t *testing.T, count int, rack func(node string) string, extra ...string) *testCluster {
	t.Helper()
	c := &testCluster{nodes: map[string]*replNode{}}
	for i := 1; i <= count; i++ {
		name := fmt.Sprintf("dn%d", i)
		flags := append([]string{"--rack", rack(name)}, extra...)
		if i == 1 {
			flags = append(flags, "--coordinator", "--cluster-store", filepath.Join(t.TempDir(), "cluster.db"))
			flags = append(flags, clusterFlags...)
		} else {
			flags = append(flags, "--join", c.coord.Addr, "--heartbeat", "100ms")
		}
		n := startNode(t, name, flags...)
		t.Cleanup(func() {
			if !n.p.exited() {
				n.kill9(t)
			}
		})
		c.nodes[name] = n
		if i == 1 {
			c.coord = n
		}
	}
	c.waitHealthyNodes(t, count)
	return c
}

// admin runs `replicad admin SUB --server COORD --json ARGS...` and
// decodes its output into v.
func (c *testCluster) admin(t *testing.T, v any, sub string, args ...string) {
	t.Helper()
	res := replicad(t, append([]string{"admin", sub, "--server", c.coord.Addr, "--json"}, args...)...)
	if res.Code != 0 {
		t.Fatalf("replicad admin %s: %v", sub, res)
	}
	if err := json.Unmarshal([]byte(res.Stdout), v); err != nil {
		t.Fatalf("replicad admin %s --json: %v\n%s", sub, err, res.Stdout)
	}
}

func (c *testCluster) adminNodes(t *testing.T) map[string]clusterNode {
	t.Helper()
	var out struct{ Nodes []clusterNode }
	c.admin(t, &out, "nodes")
	m := map[string]clusterNode{}
	for _, n := range out.Nodes {
		m[n.ID] = n
	}
	return m
}

func (c *testCluster) containers(t *testing.T) map[string]clusterContainer {
	t.Helper()
	var out struct{ Containers []clusterContainer }
	c.admin(t, &out, "containers")
	m := map[string]clusterContainer{}
	for _, ct := range out.Containers {
		m[ct.ID] = ct
	}
	return m
}

// closedOn returns the nodes but those in not reporting a CLOSED replica
// of ct, and the racks they span.
func (c *testCluster) closedOn(ct clusterContainer, not []string) (nodes []string, racks map[string]bool) {
	racks = map[string]bool{}
	for _, r := range ct.Replicas {
		if r.State == "CLOSED" && !slices.Contains(not, r.Node) {
			nodes = append(nodes, r.Node)
			racks[rackOf(r.Node)] = true
		}
	}
	return nodes, racks
}

// rackOf is the rack startCluster gives a node.
func rackOf(node string) string {
	var i int
	fmt.Sscanf(node, "dn%d", &i)
	return fmt.Sprintf("r%d", (i+1)/2)
}

// waitHealthy waits until container id is HEALTHY with three CLOSED
// replicas on three racks besides those on the nodes in not (dead or
// decommissioned, which keep theirs), and no other, and checks each of
// those nodes holds it CLOSED.
func (c *testCluster) waitHealthy(t *testing.T, id string, not ...string) []string {
	t.Helper()
	return c.waitCopies(t, id, 3, not...)
}

// waitCopies is waitHealthy for a container of replica:copies.
func (c *testCluster) waitCopies(t *testing.T, id string, copies int, not ...string) []string {
	t.Helper()
	var last clusterContainer
	var nodes []string
	ok := wait.Until(60*time.Second, func() bool {
		last = c.containers(t)[id]
		var racks map[string]bool
		nodes, racks = c.closedOn(last, not)
		others := 0
		for _, r := range last.Replicas {
			if !slices.Contains(not, r.Node) {
				others++
			}
		}
		return last.Class == "HEALTHY" && len(nodes) == copies && others == copies && len(racks) == copies
	})
	if !ok {
		t.Fatalf("container %s not HEALTHY on %d racks (avoiding %v) within 60s: %+v", id, copies, not, last)
	}
	for _, n := range nodes {
		if ci, found := c.nodes[n].find(t, id); !found || ci.State != "CLOSED" {
			t.Errorf("admin says %s holds %s CLOSED; the node lists %+v (found %v)", n, id, ci, found)
		}
	}
	return nodes
}

// TestClusterReplicaThree: a replica:3 container closed on one node is
// copied by the coordinator's commands to two more, on the two other
// racks, in push mode and in pull mode (--push=false: the targets
// download).
func TestClusterReplicaThree(t *testing.T) {
	inModes(t, func(t *testing.T, c *testCluster) {
		dir := t.TempDir()
		src := c.nodes["dn3"]
		id := src.fill(t, randomFile(t, dir, "a", 300<<10), randomFile(t, dir, "b", 1<<20))
		nodes := c.waitHealthy(t, id)
		for _, n := range nodes {
			c.nodes[n].checkBlocks(t, filepath.Join(dir, "a"), filepath.Join(dir, "b"))
		}
		var st struct {
			Leader  string           `json:"leader"`
			Classes map[string]int64 `json:"classes"`
		}
		c.admin(t, &st, "status")
		if st.Leader != c.coord.Addr || st.Classes["HEALTHY"] != 1 {
			t.Errorf("status: %+v, want leader %s and 1 HEALTHY", st, c.coord.Addr)
		}
	})
}

// inModes runs f on a cluster in push mode and on one in pull mode
// (--push=false: targets download what the coordinator asks them to copy).
func inModes(t *testing.T, f func(t *testing.T, c *testCluster)) {
	inModesOf(t, startCluster, f)
}

// inModesOf is inModes on the clusters start starts.
func inModesOf(t *testing.T, start func(t *testing.T, extra ...string) *testCluster, f func(t *testing.T, c *testCluster)) {
	for _, mode := range []string{"push", "pull"} {
		t.Run(mode, func(t *testing.T) {
			var extra []string
			if mode == "pull" {
				extra = []string{"--push=false"}
			}
			f(t, start(t, extra...))
		})
	}
}

// TestClusterDeadNodeHealed: a node holding a copy is killed (-9); once
// DEAD its copy is made again elsewhere; started again, it reports its
// old copy and the coordinator deletes one extra. In push and pull mode.
func TestClusterDeadNodeHealed(t *testing.T) { inModes(t, testDeadNodeHealed) }

func testDeadNodeHealed(t *testing.T, c *testCluster) {
	dir := t.TempDir()
	id := c.nodes["dn3"].fill(t, randomFile(t, dir, "a", 500<<10))
	nodes := c.waitHealthy(t, id)
	var victim *replNode
	for _, n := range nodes {
		if n != "dn1" { // not the coordinator
			victim = c.nodes[n]
			break
		}
	}
	victim.kill9(t)
	wait.For(t, 20*time.Second, victim.name+" DEAD", func() bool {
		return c.adminNodes(t)[victim.name].Health == "DEAD"
	})
	c.waitHealthy(t, id, victim.name)

	victim.restart(t)
	wait.For(t, 20*time.Second, victim.name+" HEALTHY again", func() bool {
		return c.adminNodes(t)[victim.name].Health == "HEALTHY"
	})
	// Four copies now, one of them deleted: three remain, on three racks.
	nodes = c.waitHealthy(t, id)
	held := 0
	for _, n := range c.nodes {
		if _, ok := n.find(t, id); ok {
			held++
		}
	}
	if held != 3 {
		t.Errorf("%d nodes hold %s, want 3 (admin: %v)", held, id, nodes)
	}
}

// TestClusterDecommission: a node holding 20 containers is
// decommissioned; each gets its three copies on other nodes, and the
// node ends DECOMMISSIONED. At every look during the drain every
// container has at least three CLOSED copies on healthy nodes in service
// or decommissioning. In push and pull mode.
func TestClusterDecommission(t *testing.T) { inModes(t, testDecommission) }

func testDecommission(t *testing.T, c *testCluster) {
	ids := c.fillNode(t, "dn4", 20, 32<<10)
	res := replicad(t, "admin", "decommission", "--server", c.coord.Addr, "dn4")
	if res.Code != 0 || !strings.Contains(res.Stdout, "DECOMMISSIONING") {
		t.Fatalf("admin decommission dn4: %v", res)
	}
	samples := 0
	wait.For(t, 60*time.Second, "dn4 DECOMMISSIONED", func() bool {
		nodes := c.adminNodes(t)
		c.checkCopies(t, nodes, ids, 3)
		samples++
		return nodes["dn4"].OpState == "DECOMMISSIONED"
	})
	c.checkCopies(t, c.adminNodes(t), ids, 3)
	t.Logf("%d looks during the drain", samples)
	for _, id := range ids {
		c.waitHealthy(t, id, "dn4")
	}
	// An unknown node is refused in one line.
	res = replicad(t, "admin", "decommission", "--server", c.coord.Addr, "dn9")
	if res.Code == 0 || strings.Count(strings.TrimSpace(res.Stderr), "\n") != 0 || !strings.Contains(res.Stderr, "dn9") {
		t.Errorf("admin decommission dn9: %v, want one line naming dn9", res)
	}
}

// checkCopies fails t unless each of ids has at least min CLOSED
// replicas on nodes that are HEALTHY and IN_SERVICE or DECOMMISSIONING
// (nodes: what the coordinator said just before).
func (c *testCluster) checkCopies(t *testing.T, nodes map[string]clusterNode, ids []string, min int) {
	t.Helper()
	cts := c.containers(t)
	for _, id := range ids {
		good := 0
		for _, r := range cts[id].Replicas {
			n := nodes[r.Node]
			if r.State == "CLOSED" && n.Health == "HEALTHY" && (n.OpState == "IN_SERVICE" || n.OpState == "DECOMMISSIONING") {
				good++
			}
		}
		if good < min {
			t.Errorf("container %s: %d good copies, want at least %d: %+v (nodes %+v)", id, good, min, cts[id], nodes)
		}
	}
}

// TestClusterCorruptReplicaReplaced: a byte flipped in one node's chunk
// file of a CLOSED replica is found by that node's verify; its heartbeat
// reports it UNHEALTHY, and the coordinator copies a good replica to
// another node and deletes the bad one. In push and pull mode.
func TestClusterCorruptReplicaReplaced(t *testing.T) { inModes(t, testCorruptReplicaReplaced) }

func testCorruptReplicaReplaced(t *testing.T, c *testCluster) {
	dir := t.TempDir()
	file := randomFile(t, dir, "a", 200<<10)
	id := c.nodes["dn2"].fill(t, file)
	nodes := c.waitHealthy(t, id)
	var victim *replNode
	for _, n := range nodes {
		if n != "dn1" && n != "dn2" { // neither the coordinator nor the first copy
			victim = c.nodes[n]
			break
		}
	}
	chunk := filepath.Join(victim.Volume(), id, "chunks", "0.data")
	b, err := os.ReadFile(chunk)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(chunk, b, 0o644); err != nil {
		t.Fatal(err)
	}
	victim.run(t, "verify", id)
	if ci, _ := victim.find(t, id); ci.State != "UNHEALTHY" {
		t.Fatalf("after verify %s lists %s as %+v, want UNHEALTHY", victim.name, id, ci)
	}
	var sawBad bool
	wait.For(t, 20*time.Second, "the coordinator to act on the bad replica", func() bool {
		for _, r := range c.containers(t)[id].Replicas {
			if r.Node == victim.name {
				sawBad = sawBad || r.State == "UNHEALTHY"
				return false
			}
		}
		return true // deleted: the coordinator had its report
	})
	if !sawBad {
		t.Logf("the UNHEALTHY report went by between two looks")
	}
	nodes = c.waitHealthy(t, id)
	if slices.Contains(nodes, victim.name) {
		t.Errorf("copies on %v: %s holds the container again", nodes, victim.name)
	}
	if ci, ok := victim.find(t, id); ok {
		t.Errorf("%s still holds %s: %+v", victim.name, id, ci)
	}
	for _, n := range nodes {
		c.nodes[n].checkBlocks(t, file)
	}
}

// TestClusterPutReplication: files put with --replication replica:2 go
// into a container of their own, which the cluster keeps two copies of,
// on two racks; the files put beside them without it get three.
func TestClusterPutReplication(t *testing.T) {
	c := startCluster(t)
	dir := t.TempDir()
	n := c.nodes["dn3"]
	two := n.fillReplication(t, "replica:2", randomFile(t, dir, "a", 100<<10))
	three := n.fill(t, randomFile(t, dir, "b", 100<<10))
	if two == three {
		t.Fatalf("replica:2 and replica:3 files in one container %s", two)
	}
	if ci, _ := n.find(t, two); ci.Replication != "replica:2" {
		t.Errorf("container %s: %+v, want replication replica:2", two, ci)
	}
	for _, node := range c.waitCopies(t, two, 2) {
		if ci, _ := c.nodes[node].find(t, two); ci.Replication != "replica:2" {
			t.Errorf("copy of %s on %s: %+v, want replication replica:2", two, node, ci)
		}
	}
	c.waitHealthy(t, three)
	res := n.run(t, "put", "--replication", "replica:0", filepath.Join(dir, "a"))
	if res.Code == 0 || strings.Count(strings.TrimSpace(res.Stderr), "\n") != 0 || !strings.Contains(res.Stderr, "replica:N") {
		t.Errorf("put --replication replica:0: %v, want one line naming replica:N", res)
	}
}

// TestClusterCoordinatorRestart: the coordinator is killed (-9) right
// after a container closes and started again on its store; the nodes'
// heartbeats find it again and the container still converges.
func TestClusterCoordinatorRestart(t *testing.T) {
	c := startCluster(t)
	dir := t.TempDir()
	id := c.nodes["dn5"].fill(t, randomFile(t, dir, "a", 400<<10))
	wait.For(t, 20*time.Second, "the coordinator to know "+id, func() bool {
		_, ok := c.containers(t)[id]
		return ok
	})
	c.coord.kill9(t)
	c.coord.restart(t)
	c.waitHealthy(t, id)
	if n := c.adminNodes(t); len(n) != 6 {
		t.Errorf("after the restart the coordinator knows %d nodes, want 6", len(n))
	}
}

// TestClusterMaintenance: a node holding a copy enters maintenance: the
// other two copies keep 1+1 in service, so it is IN_MAINTENANCE at once,
// no copy is made while it is, and at --end it is IN_SERVICE again.
// Then two live nodes holding copies enter maintenance: one copy is made
// to keep 1+1 in service, and at their end they are IN_SERVICE and the
// extra copy is deleted. In push and pull mode.
func TestClusterMaintenance(t *testing.T) { inModes(t, testMaintenance) }

func testMaintenance(t *testing.T, c *testCluster) {
	dir := t.TempDir()
	id := c.nodes["dn6"].fill(t, randomFile(t, dir, "a", 100<<10))
	nodes := c.waitHealthy(t, id)
	node := nodes[0]
	if node == "dn1" {
		node = nodes[1]
	}
	c.maintenance(t, node, "6s")
	wait.For(t, 10*time.Second, node+" IN_MAINTENANCE", func() bool {
		return c.adminNodes(t)[node].OpState == "IN_MAINTENANCE"
	})
	c.nodes[node].kill9(t) // offline in maintenance: nothing to heal
	wait.For(t, 10*time.Second, node+" DEAD", func() bool {
		return c.adminNodes(t)[node].Health == "DEAD"
	})
	time.Sleep(time.Second) // not synchronization: cycles that must not copy
	if n := c.adminNodes(t)[node]; n.OpState != "IN_MAINTENANCE" {
		t.Fatalf("%s: %+v, want IN_MAINTENANCE until its end", node, n)
	}
	if ct := c.containers(t)[id]; len(ct.Replicas) != 3 {
		t.Errorf("while %s is offline in maintenance: %+v, want the same 3 replicas", node, ct)
	}
	wait.For(t, 20*time.Second, node+" back IN_SERVICE at its end", func() bool {
		return c.adminNodes(t)[node].OpState == "IN_SERVICE"
	})
	// Back in service but dead: now its copy is made again.
	nodes = c.waitHealthy(t, id, node)

	// Two of the three live copies in maintenance leave one in service:
	// one more copy is made for 1+1, then deleted at their end.
	dead := node
	both := nodes[:2]
	for _, n := range both {
		c.maintenance(t, n, "6s")
	}
	wait.For(t, 20*time.Second, "a fourth copy and "+strings.Join(both, ", ")+" IN_MAINTENANCE", func() bool {
		ns := c.adminNodes(t)
		live, _ := c.closedOn(c.containers(t)[id], []string{dead})
		return len(live) == 4 && ns[both[0]].OpState == "IN_MAINTENANCE" && ns[both[1]].OpState == "IN_MAINTENANCE"
	})
	wait.For(t, 20*time.Second, strings.Join(both, ", ")+" back IN_SERVICE at their end", func() bool {
		ns := c.adminNodes(t)
		return ns[both[0]].OpState == "IN_SERVICE" && ns[both[1]].OpState == "IN_SERVICE"
	})
	nodes = c.waitHealthy(t, id, dead)
	held := 0
	for name, n := range c.nodes {
		if name == dead {
			continue
		}
		if _, ok := n.find(t, id); ok {
			held++
		}
	}
	if held != 3 {
		t.Errorf("%d live nodes hold %s, want 3 (admin: %v)", held, id, nodes)
	}
}

// maintenance puts node in maintenance until end from now.
func (c *testCluster) maintenance(t *testing.T, node, end string) {
	t.Helper()
	res := replicad(t, "admin", "maintenance", "--server", c.coord.Addr, node, "--end", end)
	if res.Code != 0 || !strings.Contains(res.Stdout, "ENTERING_MAINTENANCE") {
		t.Fatalf("admin maintenance %s: %v", node, res)
	}
}

// TestClusterVanishedReplica: a CLOSED replica's directory removed
// behind its node's back (rm -rf VOLUME/<id>) is no longer claimed by
// the node's next full report; the coordinator sees the copy gone and
// makes it again, so three copies, each with its files, remain.
func TestClusterVanishedReplica(t *testing.T) {
	c := startCluster(t)
	dir := t.TempDir()
	file := randomFile(t, dir, "a", 200<<10)
	id := c.nodes["dn3"].fill(t, file)
	nodes := c.waitHealthy(t, id)
	var victim *replNode
	for _, n := range nodes {
		if n != "dn1" && n != "dn3" { // neither the coordinator nor the first copy
			victim = c.nodes[n]
			break
		}
	}
	if err := os.RemoveAll(filepath.Join(victim.Volume(), id)); err != nil {
		t.Fatal(err)
	}
	var last clusterContainer
	if !wait.Until(20*time.Second, func() bool {
		last = c.containers(t)[id]
		held, racks := c.closedOn(last, nil)
		if last.Class != "HEALTHY" || len(held) != 3 || len(last.Replicas) != 3 || len(racks) != 3 {
			return false
		}
		for _, n := range held {
			if _, err := os.Stat(filepath.Join(c.nodes[n].Volume(), id, "container.yaml")); err != nil {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("after rm -rf of %s on %s: %+v, want three copies whose directories exist", id, victim.name, last)
	}
	for _, n := range c.waitHealthy(t, id) {
		c.nodes[n].checkBlocks(t, file)
	}
	if _, err := os.Stat(filepath.Join(victim.Volume(), id)); err != nil {
		if ci, ok := victim.find(t, id); ok {
			t.Errorf("%s lists %s without its directory: %+v", victim.name, id, ci)
		}
	}
}

// fillNode fills node with n containers of size bytes each, one file
// apiece, and waits until the coordinator has each of them HEALTHY; it
// returns their ids.
func (c *testCluster) fillNode(t *testing.T, node string, n, size int) []string {
	t.Helper()
	dir := t.TempDir()
	var ids []string
	for i := range n {
		ids = append(ids, c.nodes[node].fill(t, randomFile(t, dir, fmt.Sprintf("f%d", i), size)))
	}
	for _, id := range ids {
		c.waitHealthy(t, id)
	}
	return ids
}

// waitHealthyNodes waits until the coordinator counts n HEALTHY nodes.
func (c *testCluster) waitHealthyNodes(t *testing.T, n int) {
	t.Helper()
	wait.For(t, 20*time.Second, fmt.Sprintf("%d healthy nodes", n), func() bool {
		healthy := 0
		for _, node := range c.adminNodes(t) {
			if node.Health == "HEALTHY" {
				healthy++
			}
		}
		return healthy == n
	})
}
