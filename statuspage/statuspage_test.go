package statuspage

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/api/clusterpb"
	"github.com/cmfs-project/cmfs/container"
	"github.com/cmfs-project/cmfs/journal"
	"github.com/cmfs-project/cmfs/peer"
	"github.com/cmfs-project/cmfs/slot"
)

// events is a journal of n events in memory.
type events struct{ n uint64 }

func (e *events) Last(context.Context) (uint64, error) { return e.n, nil }

func (e *events) Range(_ context.Context, from, to uint64, fn func(*journal.Event) error) error {
	for id := from; id <= to && id <= e.n; id++ {
		ev := &journal.Event{ID: id, Time: time.Unix(int64(id), 0), Type: journal.Write, Path: "db.db/t/f" + string(rune('0'+id%10)),
			Files: []journal.File{{Size: 10}, {Size: 5}}}
		if err := fn(ev); err != nil {
			return err
		}
	}
	return nil
}

type store struct{ list []container.Descriptor }

func (s store) List() []container.Descriptor { return s.list }
func (s store) Volumes() []container.VolumeInfo {
	return []container.VolumeInfo{{Path: "/v1", Capacity: 100, Free: 60, Used: 30, Containers: len(s.list)}}
}

type queue struct{ jobs []peer.JobStatus }

func (q queue) Jobs() []peer.JobStatus { return q.jobs }
func (q queue) Limit() int             { return 4 }

// coordinator answers from fixed lists, or fails every call with err.
type coordinator struct {
	err        error
	nodes      []*clusterpb.NodeInfo
	containers []*clusterpb.ContainerInfo
	calls      int
}

func (c *coordinator) Nodes(context.Context, *clusterpb.NodesRequest) (*clusterpb.NodesResponse, error) {
	return &clusterpb.NodesResponse{Nodes: c.nodes}, c.err
}

func (c *coordinator) Containers(context.Context, *clusterpb.ContainersRequest) (*clusterpb.ContainersResponse, error) {
	return &clusterpb.ContainersResponse{Containers: c.containers}, c.err
}

func (c *coordinator) Status(context.Context, *clusterpb.StatusRequest) (*clusterpb.StatusResponse, error) {
	c.calls++
	if c.err != nil {
		return nil, c.err
	}
	return &clusterpb.StatusResponse{Leader: "127.0.0.1:1", Pending: 2, Waiting: 1, LastCycle: time.Unix(100, 0).UnixNano(), LastCycleDuration: int64(time.Millisecond)}, nil
}

// clock is a settable Now.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func testPage(t *testing.T) (*Page, *clock, *coordinator, *events) {
	t.Helper()
	clk := &clock{t: time.Unix(1000, 0)}
	ev := &events{n: 25}
	co := &coordinator{
		nodes: []*clusterpb.NodeInfo{{Id: "dn1", Addr: "127.0.0.1:1", Health: "HEALTHY", OpState: "IN_SERVICE", Containers: 2, LastHeartbeat: time.Unix(999, 0).UnixNano()}},
		containers: []*clusterpb.ContainerInfo{
			{Id: 1, Class: "HEALTHY", State: "CLOSED", Replication: "replica:1", Replicas: []*clusterpb.ReplicaInfo{{Node: "dn1", State: "CLOSED"}}},
			{Id: 2, Class: "UNDER_REPLICATED", State: "CLOSED", Replication: "replica:3", Replicas: []*clusterpb.ReplicaInfo{{Node: "dn1", State: "CLOSED"}}},
		},
	}
	pins := func(context.Context) ([]slot.Pin, slot.State, uint64, error) {
		return []slot.Pin{{Slot: slot.Slot{Name: "dst", Position: 20}, Lag: 5, Entries: 3, Bytes: 300}}, slot.State{Horizon: 7}, 25, nil
	}
	p := New(Config{
		NodeID: "dn1", Addr: "127.0.0.1:1",
		Warehouse:  &WarehouseConfig{Backing: "/w", State: "/w/.cmfs", Source: "src", Events: ev, Pins: pins},
		Containers: store{list: []container.Descriptor{{ID: 1, State: container.Closed, Bytes: 10}, {ID: 1 << 60, State: container.Open, Bytes: 5}}},
		Queue: queue{jobs: []peer.JobStatus{
			{Task: peer.Task{Container: 1, Target: "127.0.0.1:2"}, Running: true, Started: time.Unix(990, 0)},
			{Task: peer.Task{Container: 2, Target: "127.0.0.1:2", Mode: peer.Pull, Priority: 3}},
		}},
		Cluster: &ClusterConfig{Coordinator: true, Client: co},
		Now:     clk.now,
	})
	return p, clk, co, ev
}

// TestSnapshot: every part is there, from the parts' own answers.
func TestSnapshot(t *testing.T) {
	p, _, _, _ := testPage(t)
	s := p.Snapshot(context.Background())
	w := s.Warehouse
	if w == nil || w.LastEvent != 25 || len(w.Events) != MaxEvents || w.Events[0].ID != 25 || w.Events[MaxEvents-1].ID != 6 {
		t.Fatalf("warehouse %+v: want the newest %d of 25 events, newest first", w, MaxEvents)
	}
	if e := w.Events[0]; e.Files != 2 || e.Bytes != 15 || e.Type != "WRITE" {
		t.Errorf("event %+v: want 2 files of 15 bytes, WRITE", e)
	}
	if len(w.Slots) != 1 || w.Slots[0].Lag != 5 || w.Slots[0].PinnedBytes != 300 || w.Horizon != 7 {
		t.Errorf("slots %+v horizon %d: want dst 5 behind pinning 300 bytes, horizon 7", w.Slots, w.Horizon)
	}
	c := s.Containers
	if c.Total != 2 || c.ByState["OPEN"] != 1 || c.ByState["CLOSED"] != 1 || c.ByState["UNHEALTHY"] != 0 || c.Bytes != 15 {
		t.Errorf("containers %+v", c)
	}
	if _, ok := c.ByState["UNHEALTHY"]; !ok {
		t.Error("by_state lacks the states no container is in")
	}
	if c.List[0].ID != "1152921504606846976" || c.List[1].ID != "1" {
		t.Errorf("container list %+v: want newest first, ids as decimal strings", c.List)
	}
	q := s.Queue
	if q.Running != 1 || q.Queued != 1 || q.Limit != 4 || q.Jobs[1].Mode != "pull" || q.Jobs[1].Priority != 3 {
		t.Errorf("queue %+v", q)
	}
	cl := s.Cluster
	if cl.Error != "" || cl.Role != "coordinator" || len(cl.Nodes) != 1 || cl.Total != 2 || cl.ByClass["HEALTHY"] != 1 || cl.ByClass["UNDER_REPLICATED"] != 1 {
		t.Fatalf("cluster %+v", cl)
	}
	if cl.Containers[0].ID != "2" {
		t.Errorf("cluster containers %+v: want the under-replicated one first", cl.Containers)
	}
	if cl.Pending != 2 || cl.Leader != "127.0.0.1:1" || cl.LastCycleDuration != 0.001 {
		t.Errorf("cluster status %+v", cl)
	}
}

// TestSnapshotInterval: within MinInterval viewers share one snapshot;
// after it a new one reads the parts again, and the lag of a slot follows
// the journal between readings of what it pins.
func TestSnapshotInterval(t *testing.T) {
	p, clk, co, ev := testPage(t)
	ctx := context.Background()
	first := p.Snapshot(ctx)
	if again := p.Snapshot(ctx); again != first || co.calls != 1 {
		t.Errorf("a second snapshot within %v asked the coordinator again (%d calls)", MinInterval, co.calls)
	}
	ev.n = 30
	clk.t = clk.t.Add(MinInterval)
	s := p.Snapshot(ctx)
	if s == first || co.calls != 2 || s.Warehouse.LastEvent != 30 {
		t.Errorf("after %v: last event %d, %d coordinator calls; want a new snapshot", MinInterval, s.Warehouse.LastEvent, co.calls)
	}
	if sl := s.Warehouse.Slots[0]; sl.Position != 20 || sl.Lag != 10 {
		t.Errorf("slot %+v: want position 20 of the last reading, 10 behind event 30", sl)
	}
}

// TestClusterError: a coordinator that fails is one error in the cluster
// part; the node's own parts are still there.
func TestClusterError(t *testing.T) {
	p, _, co, _ := testPage(t)
	co.err = errors.New("standing by: the leader is 127.0.0.1:9")
	p.cfg.Cluster.ErrorText = func(err error) string { return "coordinator: " + err.Error() }
	s := p.Snapshot(context.Background())
	if s.Cluster.Error != "coordinator: standing by: the leader is 127.0.0.1:9" || len(s.Cluster.Nodes) != 0 {
		t.Errorf("cluster %+v: want the error alone", s.Cluster)
	}
	if s.Containers == nil || s.Containers.Total != 2 {
		t.Errorf("containers %+v: want them shown beside the cluster's error", s.Containers)
	}
}

// TestPartsLeftOut: a source alone has no containers, queue or cluster,
// and its JSON has none of those keys.
func TestPartsLeftOut(t *testing.T) {
	p := New(Config{Addr: "127.0.0.1:1", Warehouse: &WarehouseConfig{Events: &events{}}})
	b, err := json.Marshal(p.Snapshot(context.Background()))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{`"containers"`, `"queue"`, `"cluster"`, `"ingest"`} {
		if strings.Contains(string(b), k) {
			t.Errorf("%s in %s", k, b)
		}
	}
	if !strings.Contains(string(b), `"events":[]`) {
		t.Errorf("%s: want an empty events list, not null", b)
	}
}

// TestHandler: the page, its assets and the JSON are served; the page
// names its script, the script polls status.json.
func TestHandler(t *testing.T) {
	p, _, _, _ := testPage(t)
	mux := http.NewServeMux()
	p.Register(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	get := func(path string) (string, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %s", path, resp.Status)
		}
		return string(b), resp.Header.Get("Content-Type")
	}
	if body, ct := get("/"); !strings.Contains(body, `src="/web/app.js"`) || !strings.HasPrefix(ct, "text/html") {
		t.Errorf("GET /: %s %.80q", ct, body)
	}
	if body, ct := get("/web/app.js"); !strings.Contains(body, `fetch("/status.json"`) || !strings.Contains(ct, "javascript") {
		t.Errorf("GET /web/app.js: %s %.80q", ct, body)
	}
	if _, ct := get("/web/style.css"); !strings.HasPrefix(ct, "text/css") {
		t.Errorf("GET /web/style.css: %s", ct)
	}
	body, ct := get("/status.json")
	var s Snapshot
	if err := json.Unmarshal([]byte(body), &s); err != nil || ct != "application/json" || s.Node.ID != "dn1" {
		t.Errorf("GET /status.json: %s, %v: %.200s", ct, err, body)
	}
	resp, err := http.Get(srv.URL + "/nothing")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /nothing: %s, want 404", resp.Status)
	}
}
