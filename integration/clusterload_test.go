package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/internal/wait"
)

// TestClusterLoad: history outlives its host. The source host (dn2, rack
// r1) runs `replicad serve --state --volume --ingest --join` next to a
// real cmfs mount, in a cluster of three more nodes on three racks (dn1
// the coordinator). Files written, overwritten, renamed and deleted
// through the mount become blocks — the new contents and the preserved
// originals — in containers of replica:3 that the coordinator copies to
// the other racks. Then the source host goes: its serve stops, and its
// state directory (journal, cmroot), its backing files and its volume are
// deleted. `replicad load --cluster COORD` alone brings a destination to
// a middle event and then to the latest ingested one, equal to the
// source's tree at each; a file written after the last ingest is refused
// with one line naming it and saying that neither the (dead) source nor
// the cluster had it, the target left at the event before.
func TestClusterLoad(t *testing.T) {
	replicadPath(t)
	m := mount(t)
	h := newHistory(t, m)

	c := &testCluster{nodes: map[string]*replNode{}}
	c.coord = startNode(t, "dn1", append([]string{"--rack", "r1", "--coordinator", "--cluster-store", filepath.Join(t.TempDir(), "cluster.db")}, clusterFlags...)...)
	c.nodes["dn1"] = c.coord
	for _, name := range []string{"dn3", "dn5"} {
		c.nodes[name] = startNode(t, name, "--rack", rackOf(name), "--join", c.coord.Addr, "--heartbeat", "100ms")
	}
	src := startNode(t, "dn2", "--rack", "r1", "--join", c.coord.Addr, "--heartbeat", "100ms",
		"--state", m.State, "--ingest", "--ingest-idle", "1s", "--ingest-replication", "replica:3")
	c.nodes["dn2"] = src
	wait.For(t, 20*time.Second, "four healthy nodes", func() bool {
		healthy := 0
		for _, n := range c.adminNodes(t) {
			if n.Health == "HEALTHY" {
				healthy++
			}
		}
		return healthy == 4
	})

	content := func(name string, n int) []byte {
		var b bytes.Buffer
		for b.Len() < n {
			fmt.Fprintf(&b, "%s line %d\n", name, b.Len())
		}
		return b.Bytes()
	}
	for _, d := range []string{"s.db", "s.db/t", "s.db/t/p=1", "s.db/t/p=2", "s.db/u"} {
		if err := os.Mkdir(m.path(d), 0o755); err != nil {
			t.Fatal(err)
		}
		h.record(t, "mkdir "+d)
	}
	write := func(rel string, data []byte) {
		t.Helper()
		writeFile(t, m.path(rel), data)
		h.record(t, "write "+rel)
	}
	write("s.db/t/p=1/part-0", content("v1", 300_000))
	write("s.db/t/p=1/part-1", content("p1", 120_000))
	write("s.db/u/part-0", content("u", 50_000))
	mid := h.last()
	write("s.db/t/p=1/part-0", content("v2", 200_000)) // v1 preserved in cmroot
	write("s.db/t/p=2/staged", content("renamed", 80_000))
	if err := os.Rename(m.path("s.db/t/p=2/staged"), m.path("s.db/t/p=2/part-0")); err != nil {
		t.Fatal(err)
	}
	h.record(t, "rename s.db/t/p=2/staged")
	if err := os.Remove(m.path("s.db/u/part-0")); err != nil { // preserved
		t.Fatal(err)
	}
	h.record(t, "rm s.db/u/part-0")
	write("s.db/t/p=1/part-1", content("p1 again", 90_000))
	write("s.db/t/p=2/part-1", content("new", 70_000))
	ingested := h.last()

	// Everything ingested, durably (the containers closed), and each
	// container on three racks.
	cursor := filepath.Join(m.State, "replicad-ingest.json")
	wait.For(t, 30*time.Second, "the ingest cursor to reach the last event, durably", func() bool {
		var cur struct{ Last, Durable uint64 }
		b, err := os.ReadFile(cursor)
		return err == nil && json.Unmarshal(b, &cur) == nil && cur.Durable == ingested
	})
	cs := src.list(t)
	if len(cs) == 0 {
		t.Fatal("the source node holds no container after the ingest")
	}
	for _, ct := range cs {
		c.waitHealthy(t, ct.ID)
	}
	var admin struct {
		Containers []struct {
			ID          string `json:"id"`
			Replication string `json:"replication"`
		}
	}
	c.admin(t, &admin, "containers")
	for _, ct := range admin.Containers {
		if ct.Replication != "replica:3" {
			t.Errorf("container %s has replication %q, want the --ingest-replication replica:3", ct.ID, ct.Replication)
		}
	}

	// A file written after the last ingest: no block of it anywhere.
	src.stop(t)
	write("s.db/t/p=2/late", content("late", 40_000))
	late := h.last()
	dumps := t.TempDir()
	dMid := incremental(t, m.State, dumps, 1, mid)
	dIngested := incremental(t, m.State, dumps, 1, ingested)
	dLate := incremental(t, m.State, dumps, 1, late)

	// The source host goes, and all it held.
	m.unmountAndCheck(t)
	m.NoCheck = true
	for _, dir := range []string{m.State, m.Backing, src.Volume()} {
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
	}

	target := filepath.Join(t.TempDir(), "target")
	load := func(d dumpInfo, target string, extra ...string) []string {
		return append([]string{"load", "--dump", d.Dump, "--target", target, "--json", "--cluster", c.coord.Addr}, extra...)
	}
	mustReplicad(t, load(dMid, target)...)
	checkTarget(t, fmt.Sprintf("loaded from the cluster alone to event %d", mid), target, h.at(t, mid))
	mustReplicad(t, load(dIngested, target)...)
	checkTarget(t, fmt.Sprintf("loaded from the cluster alone to event %d", ingested), target, h.at(t, ingested))

	// The late file: the source is down and the cluster never had it.
	// While the source host may be back (not DEAD yet), it is one of the
	// places that could not be asked.
	refused := filepath.Join(t.TempDir(), "refused")
	args := load(dLate, refused, "--source", src.Addr)
	expectReplicadRefusal(t, args, replicad(t, args...), "s.db/t/p=2/late", "neither the source nor the cluster had it", "dn2 could not be asked|none of the cluster's nodes")
	if st := statusOf(t, refused); st.LastReplID != ingested {
		t.Errorf("after the refusal the target is at event %d, want %d (the event before the late file)", st.LastReplID, ingested)
	}
	checkTarget(t, "after the refusal", refused, h.at(t, ingested))
	// With the cluster alone the refusal names the cluster; once the
	// source host is DEAD it is not asked, and no node has the block.
	wait.For(t, 20*time.Second, "the source host to be DEAD", func() bool { return c.adminNodes(t)["dn2"].Health == "DEAD" })
	args = load(dLate, refused)
	msg := expectReplicadRefusal(t, args, replicad(t, args...), "s.db/t/p=2/late", "the cluster did not have it", "none of the cluster's nodes")
	if strings.Contains(msg, "neither") {
		t.Errorf("a load without a source names one: %q", msg)
	}
}
