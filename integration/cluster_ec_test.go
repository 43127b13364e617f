package integration

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/internal/wait"
)

// The EC tests run twelve nodes on four racks: r1 dn1…dn4, r2 dn5…dn8,
// r3 dn9 dn10, r4 dn11 dn12 (dn1 the coordinator), and one container of
// ec:rs-6-3-1024k: nine indexes, at most ceil(9/4) = 3 on a rack.

const (
	ecScheme  = "ec:rs-6-3-1024k"
	ecIndexes = 9
	ecData    = 6
	ecRackCap = 3
)

func ecRackOf(node string) string {
	var i int
	fmt.Sscanf(node, "dn%d", &i)
	switch {
	case i <= 4:
		return "r1"
	case i <= 8:
		return "r2"
	case i <= 10:
		return "r3"
	}
	return "r4"
}

func startECCluster(t *testing.T, extra ...string) *testCluster {
	t.Helper()
	return startClusterOf(t, 12, ecRackOf, append([]string{"--metrics", "127.0.0.1:0"}, extra...)...)
}

// ecFiles writes the files of the test container: sizes that fill one
// stripe and part of a second, and a 1-byte file.
func ecFiles(t *testing.T) []string {
	dir := t.TempDir()
	return []string{
		randomFile(t, dir, "a", 2<<20+1),
		randomFile(t, dir, "b", 3<<20),
		randomFile(t, dir, "c", 1<<20+512<<10+17),
		randomFile(t, dir, "d", 1),
	}
}

// waitEC waits until container id is HEALTHY with its nine indexes each
// CLOSED on its own node outside not, nothing else outside not, at most
// ecRackCap on a rack; it returns the node of each index.
func (c *testCluster) waitEC(t *testing.T, id string, not ...string) map[int]string {
	t.Helper()
	var last clusterContainer
	var holders map[int]string
	limit := ecRackCap
	ok := wait.Until(90*time.Second, func() bool {
		limit = c.rackCap(t)
		last = c.containers(t)[id]
		holders = map[int]string{}
		perRack := map[string]int{}
		others := 0
		for _, r := range last.Replicas {
			if slices.Contains(not, r.Node) {
				continue
			}
			others++
			if r.State == "CLOSED" && r.Index >= 1 && r.Index <= ecIndexes {
				holders[r.Index] = r.Node
				perRack[ecRackOf(r.Node)]++
			}
		}
		for _, n := range perRack {
			if n > limit {
				return false
			}
		}
		if last.Class != "HEALTHY" || len(holders) != ecIndexes || others != ecIndexes {
			return false
		}
		// The coordinator's view lags the nodes' by a heartbeat: each
		// holder must say so itself.
		for i, n := range holders {
			if ci, found := c.nodes[n].find(t, id); !found || ci.State != "CLOSED" || ci.ReplicaIndex != i || ci.Replication != ecScheme {
				return false
			}
		}
		return true
	})
	if !ok {
		var logs []string
		for name, n := range c.nodes {
			if l := grepLines(n.p.stderrNow(), "command"); l != "" {
				logs = append(logs, name+":\n"+l)
			}
		}
		slices.Sort(logs)
		t.Fatalf("container %s not HEALTHY with %d indexes on their own nodes (avoiding %v, ≤%d a rack) within 90s: %+v\ncommands in the nodes' logs:\n%s",
			id, ecIndexes, not, limit, last, strings.Join(logs, "\n"))
	}
	return holders
}

// settledEC waits until the nodes themselves, not only the coordinator,
// say container id is placed as a full cluster wants it: every node in
// service, nine CLOSED indexes on nine nodes, at most ecRackCap on a
// rack, and no copy of any kind (listed or on disk) anywhere else, the
// same for three heartbeat rounds in a row. It returns the node of each
// index. Use it before a step that needs the placement not to move.
func (c *testCluster) settledEC(t *testing.T, id string) map[int]string {
	t.Helper()
	var holders map[int]string
	var why string
	read := func() bool {
		if limit := c.rackCap(t); limit != ecRackCap {
			why = fmt.Sprintf("rack cap %d with the nodes in service now", limit)
			return false
		}
		holders = map[int]string{}
		perRack := map[string]int{}
		for i := 1; i <= len(c.nodes); i++ {
			name := fmt.Sprintf("dn%d", i)
			n := c.nodes[name]
			ci, listed := n.find(t, id)
			_, err := os.Stat(filepath.Join(n.Volume(), id))
			switch {
			case !listed && err == nil:
				why = name + " has an unlisted copy on disk"
				return false
			case !listed:
				continue
			case ci.State != "CLOSED" || ci.Replication != ecScheme || ci.ReplicaIndex < 1 || ci.ReplicaIndex > ecIndexes:
				why = fmt.Sprintf("%s holds %+v", name, ci)
				return false
			case holders[ci.ReplicaIndex] != "":
				why = fmt.Sprintf("index %d on %s and %s", ci.ReplicaIndex, holders[ci.ReplicaIndex], name)
				return false
			}
			holders[ci.ReplicaIndex] = name
			if perRack[ecRackOf(name)]++; perRack[ecRackOf(name)] > ecRackCap {
				why = "rack " + ecRackOf(name) + " over the cap"
				return false
			}
		}
		if len(holders) != ecIndexes {
			why = fmt.Sprintf("%d indexes held: %v", len(holders), holders)
			return false
		}
		return true
	}
	var prev map[int]string
	same := 0
	ok := wait.Until(90*time.Second, func() bool {
		if !read() {
			same = 0
			return false
		}
		if maps.Equal(prev, holders) {
			same++
		} else {
			prev, same = holders, 1
		}
		if same < 3 {
			time.Sleep(100 * time.Millisecond) // one heartbeat
			return false
		}
		return true
	})
	if !ok {
		t.Fatalf("container %s not settled on the nodes within 90s: %s", id, why)
	}
	return holders
}

// rackCap is the most indexes a rack may hold with the nodes in service
// now: ecRackCap, or more when racks lack the nodes for it (the fewest
// per rack that still gives every index a node of its own).
func (c *testCluster) rackCap(t *testing.T) int {
	room := map[string]int{}
	for _, n := range c.adminNodes(t) {
		if n.Health == "HEALTHY" && n.OpState == "IN_SERVICE" {
			room[n.Rack]++
		}
	}
	for m := ecRackCap; m < ecIndexes; m++ {
		sum := 0
		for _, n := range room {
			sum += min(m, n)
		}
		if sum >= ecIndexes {
			return m
		}
	}
	return ecIndexes
}

// getCluster runs `container get --cluster` for file's block.
func (c *testCluster) getCluster(t *testing.T, file string) (result, string) {
	t.Helper()
	fi, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "block")
	res := replicad(t, "container", "get", "--cluster", c.coord.Addr, fmt.Sprintf("%s-%d", xxhsum(t, file), fi.Size()), "-o", out)
	return res, out
}

// checkECReads reads every file back through the cluster: byte-identical.
func (c *testCluster) checkECReads(t *testing.T, what string, files []string) {
	t.Helper()
	for _, f := range files {
		res, out := c.getCluster(t, f)
		if res.Code != 0 {
			t.Errorf("%s: container get --cluster %s: %v", what, filepath.Base(f), res)
			continue
		}
		if got, want := readFile(t, out), readFile(t, f); !bytes.Equal(got, want) {
			t.Errorf("%s: block of %s: %d bytes differ from the file's %d", what, filepath.Base(f), len(got), len(want))
		}
	}
}

var sentLine = regexp.MustCompile(`(?m)^replicad_replication_bytes_total\{direction="sent"[^}]*\} (\S+)$`)

// sentBytes sums what the running nodes but those in not have sent to
// peers (give the nodes about to be killed, so that a sum before and one
// after count the same nodes).
func (c *testCluster) sentBytes(t *testing.T, not ...string) int64 {
	t.Helper()
	var sum int64
	for name, n := range c.nodes {
		if n.p.exited() || n.Metrics == "" || slices.Contains(not, name) {
			continue
		}
		resp, err := http.Get("http://" + n.Metrics + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if m := sentLine.FindStringSubmatch(string(body)); m != nil {
			v, _ := strconv.ParseFloat(m[1], 64)
			sum += int64(v)
		}
	}
	return sum
}

// pickHolders returns k nodes holding indexes, never the coordinator.
func pickHolders(holders map[int]string, k int) []string {
	var out []string
	for i := 1; i <= ecIndexes && len(out) < k; i++ {
		if n := holders[i]; n != "dn1" {
			out = append(out, n)
		}
	}
	return out
}

// TestClusterEC follows one ec:rs-6-3-1024k container through Ozone's
// scenarios, in push and in pull mode: written whole on dn2, encoded
// into nine indexes on nine nodes within the rack cap; a decommissioned
// holder's index copied one to one (the bytes moved are one index, not
// the container); three holders down for a moment → every read
// degraded, nothing rebuilt; three killed → the three indexes
// reconstructed (the bytes moved: D indexes read, not more); four killed → UNRECOVERABLE, reads
// refused, nothing invented; an index moved by hand onto a full rack →
// MIS_REPLICATED → moved back within the cap. Every file reads back
// byte-identical through `container get --cluster` at every step.
func TestClusterEC(t *testing.T) { inModesOf(t, startECCluster, testEC) }

func testEC(t *testing.T, c *testCluster) {
	files := ecFiles(t)
	var total int64
	for _, f := range files {
		fi, _ := os.Stat(f)
		total += fi.Size()
	}
	id := c.nodes["dn2"].fillReplication(t, ecScheme, files...)
	holders := c.waitEC(t, id)
	if _, ok := c.nodes["dn2"].find(t, id); ok && !slices.Contains(mapValues(holders), "dn2") {
		t.Errorf("dn2 still holds the whole copy of %s once encoded", id)
	}
	c.checkECReads(t, "encoded", files)
	// An index holds about a Dth of the container; the largest (index 1
	// and the parity) holds a whole cell of every stripe but the last
	// and the last's first cell.
	indexBytes := (total + ecData - 1) / ecData
	const cell, stripe = 1 << 20, ecData << 20
	stripes := (total + stripe - 1) / stripe
	largest := (stripes-1)*cell + min(cell, total-(stripes-1)*stripe)
	// Nodes restarted inside a subtest belong to the whole test: a
	// process started with a subtest's t ends with it.
	outer := t

	t.Run("decommission", func(t *testing.T) {
		victim := pickHolders(holders, 1)[0]
		ci, _ := c.nodes[victim].find(t, id)
		indexBytes := ci.Bytes
		before := c.sentBytes(t)
		if res := replicad(t, "admin", "decommission", "--server", c.coord.Addr, victim); res.Code != 0 {
			t.Fatalf("admin decommission %s: %v", victim, res)
		}
		wait.For(t, 60*time.Second, victim+" DECOMMISSIONED", func() bool {
			return c.adminNodes(t)[victim].OpState == "DECOMMISSIONED"
		})
		c.waitEC(t, id, victim)
		moved := c.sentBytes(t) - before
		t.Logf("decommission of %s moved %d bytes; the container is %d, its index %d", victim, moved, total, indexBytes)
		if moved < indexBytes || moved > 2*indexBytes {
			t.Errorf("decommission moved %d bytes: want one index (%d..%d), not the container's %d", moved, indexBytes, 2*indexBytes, total)
		}
		if res := replicad(t, "admin", "recommission", "--server", c.coord.Addr, victim); res.Code != 0 {
			t.Fatalf("admin recommission %s: %v", victim, res)
		}
		holders = c.waitEC(t, id) // the extra copy deleted
	})

	t.Run("degraded", func(t *testing.T) {
		// Three holders down for less than --dead-after: STALE, so nothing
		// is rebuilt, and every read decodes around them.
		victims := pickHolders(holders, 3)
		start := time.Now()
		for _, v := range victims {
			c.nodes[v].kill9(t)
		}
		c.checkECReads(t, "3 holders down", files)
		for _, v := range victims {
			c.nodes[v].restart(outer)
		}
		t.Logf("degraded reads of %d files took %v", len(files), time.Since(start).Round(time.Millisecond))
		holders = c.waitEC(t, id)
	})

	t.Run("reconstruct", func(t *testing.T) {
		victims := pickHolders(holders, 3)
		before := c.sentBytes(t, victims...)
		for _, v := range victims {
			c.nodes[v].kill9(t)
		}
		holders = c.waitEC(t, id, victims...)
		moved := c.sentBytes(t, victims...) - before
		t.Logf("reconstructing 3 indexes moved %d bytes (an index is %d..%d, the container %d)", moved, indexBytes, largest, total)
		// At least D-1 indexes' cells read from other nodes; at most D read
		// and one shipped for each index rebuilt, with room for the tar.
		if lo, hi := (ecData-1)*indexBytes, 3*(ecData+1)*largest*11/10; moved < lo || moved > hi {
			t.Errorf("reconstruction moved %d bytes: want %d..%d", moved, lo, hi)
		}
		c.checkECReads(t, "reconstructed", files)
		for _, v := range victims {
			c.nodes[v].restart(outer)
		}
		holders = c.waitEC(t, id) // the old copies back, the extras deleted
	})

	t.Run("unrecoverable", func(t *testing.T) {
		victims := pickHolders(holders, 4)
		for _, v := range victims {
			c.nodes[v].kill9(t)
		}
		var last clusterContainer
		wait.For(t, 30*time.Second, id+" UNRECOVERABLE", func() bool {
			last = c.containers(t)[id]
			return last.Class == "UNRECOVERABLE"
		})
		if !strings.Contains(last.Reason, "index") {
			t.Errorf("UNRECOVERABLE without saying why in indexes: %+v", last)
		}
		res, out := c.getCluster(t, files[1])
		if res.Code == 0 || strings.Count(strings.TrimSpace(res.Stderr), "\n") != 0 {
			t.Errorf("get with 5 of 9 indexes: %v, want one line and a failure", res)
		}
		if _, err := os.Stat(out); err == nil {
			t.Errorf("get with 5 of 9 indexes wrote %s", out)
		}
		for _, v := range victims {
			c.nodes[v].restart(outer)
		}
		holders = c.waitEC(t, id)
		c.checkECReads(t, "back from unrecoverable", files)
	})

	t.Run("misreplicated", func(t *testing.T) {
		// The move below must start from a placement that nothing else
		// is changing: every node in service, each index on the node the
		// nodes themselves report, no stray copy left by the restarts
		// above (the manager deletes those, so wait with it running), and
		// then the manager held off (a coordinator restarted with a long
		// cycle) while a command it sent before may still be finishing.
		holders = c.settledEC(t, id)
		coord := c.coord
		coord.kill9(t)
		normal := slices.Clone(coord.extra)
		coord.extra = append(coord.extra, "--rm-interval", "1h")
		coord.restart(outer)
		holders = c.settledEC(t, id)
		// A rack at the cap with a free node, and an index on r3 or r4.
		perRack := map[string][]int{}
		busy := map[string]bool{}
		for i, n := range holders {
			perRack[ecRackOf(n)] = append(perRack[ecRackOf(n)], i)
			busy[n] = true
		}
		var free, src string
		moved := 0
		for i := 1; i <= 12; i++ {
			n := fmt.Sprintf("dn%d", i)
			if r := ecRackOf(n); !busy[n] && len(perRack[r]) == ecRackCap && free == "" {
				free = n
			}
		}
		for i := 1; i <= ecIndexes; i++ {
			if r := ecRackOf(holders[i]); (r == "r3" || r == "r4") && holders[i] != "dn1" {
				src, moved = holders[i], i
				break
			}
		}
		if free == "" || src == "" {
			t.Fatalf("no rack at the cap with a free node, or no index on r3/r4: %v", holders)
		}
		// Move index `moved` from src to free by hand.
		if n := c.nodes[src]; n.p.exited() {
			t.Fatalf("%s has exited: %s", src, n.p.stderrNow())
		}
		c.nodes[src].must(t, "replicate", id, "--to", c.nodes[free].Addr)
		if err := os.RemoveAll(filepath.Join(c.nodes[src].Volume(), id)); err != nil {
			t.Fatal(err)
		}
		var last clusterContainer
		wait.For(t, 30*time.Second, id+" MIS_REPLICATED", func() bool {
			last = c.containers(t)[id]
			return last.Class == "MIS_REPLICATED"
		})
		coord.kill9(t)
		coord.extra = normal
		coord.restart(outer)
		holders = c.waitEC(t, id)
		if n := holders[moved]; ecRackOf(n) == ecRackOf(free) && len(perRack[ecRackOf(free)]) == ecRackCap {
			// waitEC checked the cap; say which way it was fixed.
			t.Logf("index %d stayed on %s; another index left rack %s", moved, n, ecRackOf(free))
		}
		c.checkECReads(t, "after the move", files)
	})
}

func mapValues(m map[int]string) []string {
	var out []string
	for _, v := range m {
		out = append(out, v)
	}
	return out
}
