package main

import (
	"bytes"
	"context"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"

	"github.com/cmfs-project/cmfs/cluster"
	"github.com/cmfs-project/cmfs/cluster/coord"
	"github.com/cmfs-project/cmfs/cluster/store"
	"github.com/cmfs-project/cmfs/container"
	"github.com/cmfs-project/cmfs/source"
)

// gather collects c once, through a registry that checks what it
// collects against what it describes, and returns each sample's value
// by `name{k="v",…}` (labels sorted).
func gather(t *testing.T, c prometheus.Collector) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var pairs []string
			for _, l := range m.GetLabel() {
				pairs = append(pairs, l.GetName()+`="`+l.GetValue()+`"`)
			}
			sort.Strings(pairs)
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			out[f.GetName()+"{"+strings.Join(pairs, ",")+"}"] = v
		}
	}
	return out
}

// expect checks that got has each of want's samples with its value.
func expect(t *testing.T, got, want map[string]float64) {
	t.Helper()
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %g (present %v), want %g", k, g, ok, v)
		}
	}
}

// family returns got's samples of the metric name.
func family(got map[string]float64, name string) map[string]float64 {
	out := map[string]float64{}
	for k, v := range got {
		if strings.HasPrefix(k, name+"{") {
			out[k] = v
		}
	}
	return out
}

// TestVolumeCollector: the containers by state, every state present, and
// each volume's space, with the node's labels.
func TestVolumeCollector(t *testing.T) {
	dir := t.TempDir()
	st, err := container.OpenStore([]string{dir}, container.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	c := newVolumeCollector(st, prometheus.Labels{"node": "n1", "rack": "r1"})
	states := func(open, closed float64) map[string]float64 {
		m := map[string]float64{}
		for _, s := range container.States {
			m[`replicad_volume_containers{node="n1",rack="r1",state="`+strings.ToLower(string(s))+`"}`] = 0
		}
		m[`replicad_volume_containers{node="n1",rack="r1",state="open"}`] = open
		m[`replicad_volume_containers{node="n1",rack="r1",state="closed"}`] = closed
		return m
	}
	vol := `{node="n1",rack="r1",volume="` + dir + `"}`
	got := gather(t, c)
	expect(t, got, states(0, 0))
	expect(t, got, map[string]float64{"replicad_volume_used_bytes" + vol: 0, "replicad_volume_reserved_bytes" + vol: 0})
	if got["replicad_volume_capacity_bytes"+vol] <= 0 || got["replicad_volume_free_bytes"+vol] <= 0 {
		t.Errorf("capacity %g, free %g: want the filesystem's", got["replicad_volume_capacity_bytes"+vol], got["replicad_volume_free_bytes"+vol])
	}

	id, _, err := st.Put(bytes.NewReader(bytes.Repeat([]byte("x"), 4096)))
	if err != nil {
		t.Fatal(err)
	}
	got = gather(t, c)
	expect(t, got, states(1, 0))
	if got["replicad_volume_used_bytes"+vol] < 4096 {
		t.Errorf("used %g after a 4096-byte put", got["replicad_volume_used_bytes"+vol])
	}
	if _, err := st.CloseContainer(id); err != nil {
		t.Fatal(err)
	}
	expect(t, gather(t, c), states(0, 1))
}

// TestClusterCollector: a coordinator standing by reports it and
// nothing else; one leading reports the nodes by health and operational
// state, every pair present, the containers by class as of the last
// cycle, and the commands it issued.
func TestClusterCollector(t *testing.T) {
	labels := prometheus.Labels{"node": "n1"}
	svc := coord.NewStandbyService(func(context.Context) (string, error) { return "", nil })
	c := newClusterCollector(svc, labels)
	got := gather(t, c)
	if len(got) != 1 || got[`replicad_cluster_leader{node="n1"}`] != 0 {
		t.Errorf("standing by: %v, want replicad_cluster_leader 0 alone", got)
	}

	s, err := store.Open(filepath.Join(t.TempDir(), "cluster.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Unix(1000, 0)
	co, err := coord.New(coord.Config{Store: s, Decide: cluster.DefaultConfig(), Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	svc.Lead(co)
	r3 := cluster.MustReplication("replica:3")
	for _, n := range []string{"a", "b", "c"} {
		b := coord.Beat{Node: store.Node{ID: cluster.NodeID(n), Addr: "addr-" + n, Rack: "r-" + n, FreeBytes: 1 << 30}, Full: true}
		if n == "a" {
			b.Replicas = []coord.ReplicaReport{{Replica: cluster.Replica{Container: 7, State: cluster.Closed, Checksum: 1}, Replication: r3, Bytes: 10}}
		}
		if _, err := co.Heartbeat(b); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := co.SetOpState("c", cluster.EnteringMaintenance, time.Time{}); err != nil {
		t.Fatal(err)
	}
	got = gather(t, c)
	if n := len(family(got, "replicad_cluster_nodes")); n != 15 {
		t.Errorf("%d node series, want every pair of 3 healths and 5 operational states", n)
	}
	expect(t, got, map[string]float64{
		`replicad_cluster_leader{node="n1"}`:                                                 1,
		`replicad_cluster_nodes{health="healthy",node="n1",op_state="in_service"}`:           2,
		`replicad_cluster_nodes{health="healthy",node="n1",op_state="entering_maintenance"}`: 1,
		`replicad_cluster_nodes{health="dead",node="n1",op_state="in_service"}`:              0,
		`replicad_cluster_containers{class="under_replicated",node="n1"}`:                    0, // no cycle yet
		`replicad_cluster_commands_total{node="n1",type="replicate"}`:                        0,
		`replicad_cluster_last_cycle_timestamp_seconds{node="n1"}`:                           0,
	})
	if err := co.Cycle(); err != nil {
		t.Fatal(err)
	}
	got = gather(t, c)
	expect(t, got, map[string]float64{
		`replicad_cluster_containers{class="under_replicated",node="n1"}`: 1,
		`replicad_cluster_containers{class="healthy",node="n1"}`:          0,
		// b alone may take a copy: c is entering maintenance.
		`replicad_cluster_commands_total{node="n1",type="replicate"}`:                          1,
		`replicad_cluster_commands_total{node="n1",type="delete"}`:                             0,
		`replicad_cluster_commands_dropped_total{node="n1",reason="expired",type="replicate"}`: 0,
		`replicad_cluster_pending_commands{node="n1"}`:                                         1,
		`replicad_cluster_last_cycle_timestamp_seconds{node="n1"}`:                             1000,
	})
	if n := len(family(got, "replicad_cluster_containers")); n != 6 {
		t.Errorf("%d class series, want 6", n)
	}
	if n := len(family(got, "replicad_cluster_commands_dropped_total")); n != 12 {
		t.Errorf("%d dropped series, want 4 types by 3 reasons", n)
	}

	svc.Lead(nil)
	if got := gather(t, c); len(got) != 1 {
		t.Errorf("standing by again: %v, want replicad_cluster_leader alone", got)
	}
}

// TestSourceCollector: what a source served, each method with its ok
// series as the server counts it from the start, an error by its gRPC
// code's name.
func TestSourceCollector(t *testing.T) {
	backing := t.TempDir()
	srv, err := source.NewServer(source.Config{Backing: backing, State: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	got := gather(t, sourceCollector{stats: srv.Stats})
	if n := len(family(got, "replicad_source_requests_total")); n != 6 {
		t.Errorf("%d request series before a call, want the ok one of each of 6 methods: %v", n, got)
	}
	expect(t, got, map[string]float64{
		`replicad_source_requests_total{method="ReadFile",result="ok"}`: 0,
		`replicad_source_events_sent_total{}`:                           0,
	})

	st := source.ServerStats{
		Requests: []source.RequestCount{{Method: "ReadFile", Code: codes.OK, N: 3}, {Method: "ReadFile", Code: codes.NotFound, N: 1}, {Method: "Events", Code: codes.Canceled, N: 2}},
		Events:   5, Files: 3, Bytes: 6000,
	}
	got = gather(t, sourceCollector{stats: func() source.ServerStats { return st }})
	want := map[string]float64{
		`replicad_source_requests_total{method="ReadFile",result="ok"}`:       3,
		`replicad_source_requests_total{method="ReadFile",result="NotFound"}`: 1,
		`replicad_source_requests_total{method="Events",result="Canceled"}`:   2,
		`replicad_source_events_sent_total{}`:                                 5,
		`replicad_source_files_sent_total{}`:                                  3,
		`replicad_source_bytes_sent_total{}`:                                  6000,
	}
	if len(got) != len(want) {
		t.Errorf("%d samples, want %d: %v", len(got), len(want), got)
	}
	expect(t, got, want)
}
