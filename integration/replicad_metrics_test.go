package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/internal/etcdtest"
	"github.com/cmfs-project/cmfs/internal/wait"
	"github.com/cmfs-project/cmfs/journal"
	"github.com/cmfs-project/cmfs/slot"
	"github.com/cmfs-project/cmfs/source"
)

// The replicad metrics tests: each replicad process serves exactly the
// replicad_* metrics its sections of docs/metrics.md list, and they move
// under a load: a source serving a follow, a node's volumes taking
// containers, a coordinator's cluster healing and losing a node.

// anyMetricsAddr finds the metrics address serve ("metrics http://…")
// and follow ("metrics on http://…") announce.
var anyMetricsAddr = regexp.MustCompile(`metrics (?:on )?http://(\S+)/metrics`)

// announced waits for p's "listening on" line (serve) or metrics line
// (follow) and returns the gRPC address ("" for follow) and the metrics
// address it names.
func announced(t *testing.T, p *proc, serves bool) (addr, metrics string) {
	t.Helper()
	var line, m []string
	wait.For(t, 15*time.Second, p.name+" to say where it listens", func() bool {
		b, _ := os.ReadFile(p.stdout)
		line, m = listeningLine.FindStringSubmatch(string(b)), anyMetricsAddr.FindStringSubmatch(string(b))
		return m != nil && (line != nil || !serves) || p.exited()
	})
	if m == nil || serves && line == nil {
		t.Fatalf("%s did not say where it listens: %v; stderr: %s", p.name, p.res, p.stderrNow())
	}
	if serves {
		addr = line[1]
	}
	return addr, m[1]
}

// fetchMissing asks the source at addr for content nobody has, which it
// refuses with NotFound.
func fetchMissing(t *testing.T, addr string) {
	t.Helper()
	ctx := context.Background()
	c, err := source.Dial(ctx, addr, source.WithToken(testToken(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	data := []byte("never written")
	if _, err := c.Fetch(ctx, journal.File{Path: "w.db/t/p=1/missing", Size: int64(len(data)), XXH64: journal.Sum(data)}); !errors.Is(err, source.ErrNotFound) {
		t.Fatalf("fetch of a file nobody has: %v, want ErrNotFound", err)
	}
}

// TestReplicadMetricsSource: `replicad serve` of a warehouse counts what
// a follow fetches from it (calls by method and result, events, files,
// bytes), and serves every metric of its section, the slot's included;
// the follow serves those of its own; a node serving the same warehouse
// serves the source's beside its own, and counts what it serves.
func TestReplicadMetricsSource(t *testing.T) {
	m := mount(t)
	for _, d := range []string{"w.db", "w.db/t", "w.db/t/p=1"} {
		if err := os.Mkdir(m.path(d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	sizes := []int{1000, 2000, 3000}
	for i, n := range sizes {
		writeFile(t, m.path(fmt.Sprintf("w.db/t/p=1/part-%d", i)), []byte(strings.Repeat(string(rune('a'+i)), n)))
	}
	srv := startProc(t, replicadPath(t), "serve", "--state", m.State, "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0")
	t.Cleanup(srv.kill)
	addr, metrics := announced(t, srv, true)

	target := filepath.Join(t.TempDir(), "target")
	follow := startProc(t, replicadPath(t), "follow", "--source", addr, "--target", target, "--interval", "100ms", "--metrics", "127.0.0.1:0")
	t.Cleanup(follow.kill)
	_, followMetrics := announced(t, follow, false)
	last := awaitFollow(t, "the first files", m, target, follow, 30*time.Second)
	fetchMissing(t, addr)

	// The slot's position is confirmed after the round that applied the
	// events. The first scrape comes after, as it reads the slots for
	// the next 10s. The source started with this test: every count
	// began at 0.
	wait.For(t, 10*time.Second, "the follow's slot at the last event", func() bool {
		var rs struct {
			Slots []slot.Report `json:"slots"`
		}
		res := mustReplicad(t, "slots", "--source", addr, "--json")
		if err := json.Unmarshal([]byte(res.Stdout), &rs); err != nil {
			t.Fatalf("replicad slots --json: %v: %s", err, res.Stdout)
		}
		return len(rs.Slots) == 1 && rs.Slots[0].Position == last
	})
	after := scrapeMetrics(t, metrics)
	checkDocumented(t, after, "replicad_", docWarehouse)
	if v := after.get("replicad_slot_position", "slot="+slotOf(t, after)); v != float64(last) {
		t.Errorf("replicad_slot_position %g, want %d", v, last)
	}
	if v, ok := after.value("replicad_source_requests_total", "method=DropSlot", "result=ok"); !ok || v != 0 {
		t.Errorf("replicad_source_requests_total{method=\"DropSlot\",result=\"ok\"} %g (present %v) never called, want 0", v, ok)
	}
	total := 0
	for _, n := range sizes {
		total += n
	}
	if d := after.get("replicad_source_requests_total", "method=ReadFile", "result=ok"); d != float64(len(sizes)) {
		t.Errorf("ReadFile ok %g, want %d (a fetch per file)", d, len(sizes))
	}
	if d := after.get("replicad_source_requests_total", "method=ReadFile", "result=NotFound"); d != 1 {
		t.Errorf("ReadFile NotFound %g, want 1:\n%s", d, grepLines(after.raw, "replicad_source_requests_total"))
	}
	for _, method := range []string{"Status", "Confirm", "Slots"} {
		if d := after.get("replicad_source_requests_total", "method="+method, "result=ok"); d < 1 {
			t.Errorf("%s ok %g under a follow, want at least 1", method, d)
		}
	}
	if d := after.get("replicad_source_events_sent_total"); d < float64(last) {
		t.Errorf("replicad_source_events_sent_total %g, want at least the %d events the follow applied", d, last)
	}
	// Nothing changed under the follow: each file was sent once.
	if d := after.get("replicad_source_files_sent_total"); d != float64(len(sizes)) {
		t.Errorf("replicad_source_files_sent_total %g, want %d", d, len(sizes))
	}
	if d := after.get("replicad_source_bytes_sent_total"); d != float64(total) {
		t.Errorf("replicad_source_bytes_sent_total %g, want %d", d, total)
	}
	fs := scrapeMetrics(t, followMetrics)
	checkDocumented(t, fs, "replicad_", docFollow)
	if got := fs.get("replicad_follow_bytes_total"); got != float64(total) {
		t.Errorf("follow placed %g bytes, want the %d the source sent", got, total)
	}

	// A node serving the same warehouse: its slot, the source's counts
	// of what it serves, its own replication and volumes.
	follow.kill()
	n := startNode(t, "n1", "--state", m.State, "--rack", "r1", "--metrics", "127.0.0.1:0")
	t.Cleanup(func() { n.kill9(t) })
	fetchMissing(t, n.Addr)
	ns := scrapeMetrics(t, n.Metrics)
	checkDocumented(t, ns, "replicad_", docWarehouse, docNode)
	if v := ns.get("replicad_source_requests_total", "method=ReadFile", "result=NotFound"); v != 1 {
		t.Errorf("the node's ReadFile NotFound: %g, want 1", v)
	}
	if v := ns.get("replicad_slot_position", "slot="+slotOf(t, ns)); v != float64(last) {
		t.Errorf("the node's replicad_slot_position %g, want %d", v, last)
	}
}

// without is s less the families whose names start with prefix, for
// checkDocumented.
func (s scrape) without(prefix string) scrape {
	out := scrape{types: map[string]string{}, labels: map[string][]string{}}
	for name, typ := range s.types {
		if !strings.HasPrefix(name, prefix) {
			out.types[name], out.labels[name] = typ, s.labels[name]
		}
	}
	return out
}

// slotOf is the one slot s reports.
func slotOf(t *testing.T, s scrape) string {
	t.Helper()
	keys := s.series["replicad_slot_position"]
	if len(keys) != 1 {
		t.Fatalf("slots %v, want one", keys)
	}
	m := labelRE.FindStringSubmatch(keys[0])
	return m[2]
}

// TestReplicadMetricsVolume: a node's volume metrics follow its
// containers, an open one, then the same closed, then a second open,
// and the bytes they take.
func TestReplicadMetricsVolume(t *testing.T) {
	n := startNode(t, "v1", "--rack", "r1", "--metrics", "127.0.0.1:0")
	t.Cleanup(func() { n.kill9(t) })
	vol := "volume=" + n.Volume()
	labels := func(more ...string) []string { return append([]string{"node=v1", "rack=r1"}, more...) }
	before := scrapeMetrics(t, n.Metrics)
	checkDocumented(t, before, "replicad_", docNode)
	if v := before.get("replicad_volume_capacity_bytes", labels(vol)...); v <= 0 {
		t.Errorf("replicad_volume_capacity_bytes %g, want the filesystem's size:\n%s", v, grepLines(before.raw, "replicad_volume"))
	}
	if v := before.get("replicad_volume_free_bytes", labels(vol)...); v <= 0 || v > before.get("replicad_volume_capacity_bytes", labels(vol)...) {
		t.Errorf("replicad_volume_free_bytes %g, want within the capacity", v)
	}
	states := func(s scrape, want map[string]float64) {
		t.Helper()
		for _, st := range []string{"open", "closing", "closed", "recovering", "unhealthy", "deleted"} {
			if v, ok := s.value("replicad_volume_containers", labels("state="+st)...); !ok || v != want[st] {
				t.Errorf("replicad_volume_containers{state=%q} %g (present %v), want %g", st, v, ok, want[st])
			}
		}
	}
	states(before, nil)

	dir := t.TempDir()
	n.fill(t, randomFile(t, dir, "a", 300<<10), randomFile(t, dir, "b", 200<<10))
	closed := scrapeMetrics(t, n.Metrics)
	states(closed, map[string]float64{"closed": 1})
	if v := closed.get("replicad_volume_used_bytes", labels(vol)...); v < 500<<10 {
		t.Errorf("replicad_volume_used_bytes %g after 500 KiB put, want at least that", v)
	}
	n.must(t, "put", randomFile(t, dir, "c", 100<<10))
	open := scrapeMetrics(t, n.Metrics)
	states(open, map[string]float64{"closed": 1, "open": 1})
	if u, was := open.get("replicad_volume_used_bytes", labels(vol)...), closed.get("replicad_volume_used_bytes", labels(vol)...); u < was+100<<10 {
		t.Errorf("replicad_volume_used_bytes %g after 100 KiB more into an open container, was %g", u, was)
	}
	checkDocumented(t, open, "replicad_", docNode)
}

// TestReplicadMetricsCluster: on three nodes on three racks, the
// coordinator's cluster gauges say three healthy nodes in service, then
// one container healthy once the replication manager's two replicates
// made its copies; a node put in maintenance and killed shows as such.
// A member serves no cluster metrics.
func TestReplicadMetricsCluster(t *testing.T) {
	c := startClusterOf(t, 3, func(node string) string { return "r" + strings.TrimPrefix(node, "dn") }, "--metrics", "127.0.0.1:0")
	coord := c.coord
	nodes := func(s scrape, health, op string) float64 {
		return s.get("replicad_cluster_nodes", "node=dn1", "rack=r1", "health="+health, "op_state="+op)
	}
	// sum adds up the family's samples.
	sum := func(s scrape, family string) float64 {
		total := 0.0
		for _, k := range s.series[family] {
			total += s.samples[k]
		}
		return total
	}
	first := scrapeMetrics(t, coord.Metrics)
	checkDocumented(t, first, "replicad_", docNode, docCoordinator)
	if v := first.get("replicad_cluster_leader", "node=dn1", "rack=r1"); v != 1 {
		t.Errorf("replicad_cluster_leader %g, want 1 on the coordinator", v)
	}
	if got, all := nodes(first, "healthy", "in_service"), sum(first, "replicad_cluster_nodes"); got != 3 || all != 3 {
		t.Errorf("nodes healthy and in service: %g of %g, want 3 of 3:\n%s", got, all, grepLines(first.raw, "replicad_cluster_nodes"))
	}
	member := scrapeMetrics(t, c.nodes["dn2"].Metrics)
	checkDocumented(t, member, "replicad_", docNode)

	id := c.nodes["dn2"].fill(t, randomFile(t, t.TempDir(), "a", 100<<10))
	wait.For(t, 30*time.Second, "the container healthy with 3 copies", func() bool {
		ct := c.containers(t)[id]
		copies, _ := c.closedOn(ct, nil)
		return ct.Class == "HEALTHY" && len(copies) == 3
	})
	var healed scrape
	wait.For(t, 10*time.Second, "a cycle that finds the container healthy", func() bool {
		healed = scrapeMetrics(t, coord.Metrics)
		return healed.get("replicad_cluster_containers", "node=dn1", "rack=r1", "class=healthy") == 1 &&
			healed.get("replicad_cluster_pending_commands", "node=dn1", "rack=r1") == 0
	})
	if v := sum(healed, "replicad_cluster_containers"); v != 1 {
		t.Errorf("containers by class add up to %g, want 1:\n%s", v, grepLines(healed.raw, "replicad_cluster_containers"))
	}
	if v := healed.get("replicad_cluster_commands_total", "node=dn1", "rack=r1", "type=replicate"); v < 2 {
		t.Errorf("replicad_cluster_commands_total{type=\"replicate\"} %g, want at least the 2 copies made", v)
	}
	if v := healed.get("replicad_cluster_commands_total", "node=dn1", "rack=r1", "type=delete"); v != 0 {
		t.Errorf("replicad_cluster_commands_total{type=\"delete\"} %g, want 0", v)
	}
	if ts := healed.get("replicad_cluster_last_cycle_timestamp_seconds", "node=dn1", "rack=r1"); time.Since(time.Unix(int64(ts), 0)) > 10*time.Second {
		t.Errorf("replicad_cluster_last_cycle_timestamp_seconds %g, want a cycle within the last seconds", ts)
	}
	checkDocumented(t, healed, "replicad_", docNode, docCoordinator)

	// dn3 in maintenance (two copies stay in service), then offline.
	c.maintenance(t, "dn3", "60s")
	wait.For(t, 10*time.Second, "dn3 in maintenance in the metrics", func() bool {
		s := scrapeMetrics(t, coord.Metrics)
		return nodes(s, "healthy", "in_maintenance") == 1 && nodes(s, "healthy", "in_service") == 2
	})
	c.nodes["dn3"].kill9(t)
	wait.For(t, 10*time.Second, "dn3 dead in the metrics", func() bool {
		s := scrapeMetrics(t, coord.Metrics)
		return nodes(s, "dead", "in_maintenance") == 1 && nodes(s, "healthy", "in_service") == 2 && sum(s, "replicad_cluster_nodes") == 3
	})
}

// TestReplicadMetricsStandby: of two coordinators sharing an etcd store,
// the one standing by serves replicad_cluster_leader 0 and no other
// cluster metric; once the leader is killed, it leads and serves them
// all, counting the nodes it hears from.
func TestReplicadMetricsStandby(t *testing.T) {
	srv := etcdtest.Start(t)
	flags := append([]string{"--coordinator", "--cluster-store", "etcd://" + srv.Endpoint, "--leader-lease", "2s", "--metrics", "127.0.0.1:0"}, clusterFlags...)
	a := startNode(t, "dn1", append([]string{"--rack", "r1"}, flags...)...)
	t.Cleanup(func() { a.kill9(t) })
	b := startNode(t, "dn2", append([]string{"--rack", "r2", "--join", a.Addr}, flags...)...)
	t.Cleanup(func() { b.kill9(t) })

	// cluster returns n's replicad_cluster_* families and its leader gauge.
	cluster := func(n *replNode) (scrape, []string, float64) {
		s := scrapeMetrics(t, n.Metrics)
		var families []string
		for name := range s.types {
			if strings.HasPrefix(name, "replicad_cluster_") {
				families = append(families, name)
			}
		}
		return s, families, s.get("replicad_cluster_leader", "node="+n.name, "rack="+flagValue(n.extra, "--rack"))
	}
	var leader, standby *replNode
	wait.For(t, 20*time.Second, "one of the two to lead", func() bool {
		_, _, la := cluster(a)
		_, _, lb := cluster(b)
		switch {
		case la == 1 && lb == 0:
			leader, standby = a, b
		case la == 0 && lb == 1:
			leader, standby = b, a
		}
		return leader != nil
	})
	s, families, _ := cluster(standby)
	if len(families) != 1 || families[0] != "replicad_cluster_leader" {
		t.Errorf("standby %s serves %v, want replicad_cluster_leader alone", standby.name, families)
	}
	checkDocumented(t, s.without("replicad_cluster_"), "replicad_", docNode)
	leader.kill9(t)
	wait.For(t, 20*time.Second, standby.name+" to lead, hearing from itself", func() bool {
		s, _, l := cluster(standby)
		return l == 1 && s.get("replicad_cluster_nodes", "node="+standby.name, "rack="+flagValue(standby.extra, "--rack"), "health=healthy", "op_state=in_service") >= 1
	})
	s, _, _ = cluster(standby)
	checkDocumented(t, s, "replicad_", docNode, docCoordinator)
}
