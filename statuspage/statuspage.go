package statuspage

import (
	"cmp"
	"context"
	"embed"
	"encoding/json"
	"io/fs"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/cmfs-project/cmfs/api/clusterpb"
	"github.com/cmfs-project/cmfs/container"
	"github.com/cmfs-project/cmfs/ingest"
	"github.com/cmfs-project/cmfs/journal"
	"github.com/cmfs-project/cmfs/peer"
	"github.com/cmfs-project/cmfs/repl"
	"github.com/cmfs-project/cmfs/slot"
)

// Bounds of a snapshot.
const (
	// MinInterval: a snapshot younger than this is served again.
	MinInterval = time.Second
	// SlotsInterval: what the slots pin is read again after this long.
	SlotsInterval = 10 * time.Second
	// MaxEvents is how many of the journal's newest events are shown.
	MaxEvents = 20
	// MaxList bounds every other list (containers, jobs, cluster
	// containers); the cluster's nodes are all shown.
	MaxList = 200
	// partTimeout bounds what one part may take to answer.
	partTimeout = 5 * time.Second
)

// Containers is what the page reads of a node's store; *container.Store
// is one.
type Containers interface {
	List() []container.Descriptor
	Volumes() []container.VolumeInfo
}

// Queue is what the page reads of a node's replication queue;
// *peer.Supervisor is one.
type Queue interface {
	Jobs() []peer.JobStatus
	Limit() int
}

// Coordinator is what the page asks the cluster's coordinator: the
// in-process *coord.Service of a --coordinator node, or a client of the
// coordinator a node joined.
type Coordinator interface {
	Nodes(ctx context.Context, req *clusterpb.NodesRequest) (*clusterpb.NodesResponse, error)
	Containers(ctx context.Context, req *clusterpb.ContainersRequest) (*clusterpb.ContainersResponse, error)
	Status(ctx context.Context, req *clusterpb.StatusRequest) (*clusterpb.StatusResponse, error)
}

// WarehouseConfig is the warehouse a node serves.
type WarehouseConfig struct {
	Backing, State, Source string
	// Events is the journal (source.Server.Journal).
	Events repl.Events
	// Pins reads the replication slots (source.Server.Pins).
	Pins func(ctx context.Context) ([]slot.Pin, slot.State, uint64, error)
	// IngestCursor is serve --ingest's cursor file; "" without --ingest.
	IngestCursor string
}

// ClusterConfig is the cluster a node belongs to.
type ClusterConfig struct {
	// Coordinator says this node is the coordinator (or stands for it).
	Coordinator bool
	// Join are the coordinators the node heartbeats to.
	Join []string
	// Client asks the coordinator.
	Client Coordinator
	// ErrorText turns a Client error into the words shown (the gRPC
	// status translated); nil: err.Error().
	ErrorText func(error) string
}

// Config says what a Page shows; a nil part is left out.
type Config struct {
	// NodeID and Rack name the node; Addr is where it serves gRPC.
	NodeID, Rack, Addr string
	Warehouse          *WarehouseConfig
	Containers         Containers
	Queue              Queue
	Cluster            *ClusterConfig
	// Now is the clock (tests); nil: time.Now.
	Now func() time.Time
}

// Page serves the status page and /status.json.
type Page struct {
	cfg Config

	mu   sync.Mutex // one snapshot built at a time
	last *Snapshot
	at   time.Time

	slotsAt time.Time
	slots   slotsReading
}

type slotsReading struct {
	pins    []slot.Pin
	horizon uint64
	err     error
}

//go:embed web
var web embed.FS

// New returns a page over cfg's parts.
func New(cfg Config) *Page {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Page{cfg: cfg}
}

// Register adds the page to mux: GET / (the page), GET /status.json and
// GET /web/ (its style sheet and script).
func (p *Page) Register(mux *http.ServeMux) {
	assets, _ := fs.Sub(web, "web") // a fixed, embedded path
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		http.ServeFileFS(w, r, assets, "index.html")
	})
	mux.Handle("GET /web/", http.StripPrefix("/web/", http.FileServerFS(assets)))
	mux.HandleFunc("GET /status.json", p.serveJSON)
}

func (p *Page) serveJSON(w http.ResponseWriter, r *http.Request) {
	s := p.Snapshot(r.Context())
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(s) // a client gone mid-write is no one's to hear of
}

// Snapshot returns what the node knows now, or as of less than
// MinInterval ago.
func (p *Page) Snapshot(ctx context.Context) *Snapshot {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.cfg.Now()
	if p.last != nil && now.Sub(p.at) < MinInterval {
		return p.last
	}
	s := &Snapshot{Time: now.UTC(), Node: p.node()}
	if p.cfg.Warehouse != nil {
		s.Warehouse = p.warehouse(ctx, now)
	}
	if p.cfg.Containers != nil {
		s.Containers = p.containers()
	}
	if p.cfg.Queue != nil {
		s.Queue = p.queue()
	}
	if p.cfg.Cluster != nil {
		s.Cluster = p.cluster(ctx)
	}
	p.last, p.at = s, now
	return s
}

func (p *Page) node() *Node {
	n := &Node{ID: p.cfg.NodeID, Rack: p.cfg.Rack, Addr: p.cfg.Addr}
	if p.cfg.Containers != nil {
		n.Volumes = []Volume{}
		for _, v := range p.cfg.Containers.Volumes() {
			n.Volumes = append(n.Volumes, Volume{Path: v.Path, Capacity: v.Capacity, Free: v.Free, Used: v.Used, Reserved: v.Reserved, Containers: v.Containers})
		}
	}
	return n
}

func (p *Page) warehouse(ctx context.Context, now time.Time) *Warehouse {
	c := p.cfg.Warehouse
	w := &Warehouse{Backing: c.Backing, State: c.State, Source: c.Source, Events: []Event{}, Slots: []Slot{}}
	ctx, cancel := context.WithTimeout(ctx, partTimeout)
	defer cancel()
	if err := p.events(ctx, w); err != nil {
		w.Error = err.Error()
	}
	if c.Pins != nil {
		if now.Sub(p.slotsAt) >= SlotsInterval || p.slots.err != nil {
			pins, st, _, err := c.Pins(ctx)
			p.slots, p.slotsAt = slotsReading{pins: pins, horizon: st.Horizon, err: err}, now
		}
		w.SlotsAt = p.slotsAt.UTC()
		if p.slots.err != nil {
			w.SlotsError = p.slots.err.Error()
		}
		w.Horizon = p.slots.horizon
		for _, pin := range p.slots.pins {
			s := Slot{Name: pin.Name, Position: pin.Position, Lost: pin.Lost,
				PinnedEntries: pin.Entries, PinnedBytes: pin.Bytes, Updated: pin.Updated.UTC()}
			// The position is as the reading found it; the lag is against
			// the newest event now, so it grows between readings.
			if w.LastEvent > s.Position {
				s.Lag = w.LastEvent - s.Position
			}
			w.Slots = append(w.Slots, s)
		}
	}
	if c.IngestCursor != "" {
		in := &Ingest{}
		if pr, err := ingest.ReadProgress(c.IngestCursor); err != nil {
			in.Error = err.Error()
		} else {
			in.Last, in.Durable = pr.Last, pr.Durable
			if w.LastEvent > pr.Last {
				in.Lag = w.LastEvent - pr.Last
			}
		}
		w.Ingest = in
	}
	return w
}

// events reads the newest event id and the MaxEvents events up to it,
// newest first.
func (p *Page) events(ctx context.Context, w *Warehouse) error {
	ev := p.cfg.Warehouse.Events
	if ev == nil {
		return nil
	}
	last, err := ev.Last(ctx)
	if err != nil {
		return err
	}
	w.LastEvent = last
	if last == 0 {
		return nil
	}
	from := uint64(1)
	if last > MaxEvents {
		from = last - MaxEvents + 1
	}
	err = ev.Range(ctx, from, last, func(e *journal.Event) error {
		out := Event{ID: e.ID, Time: e.Time.UTC(), Type: string(e.Type), Path: e.Path, NewPath: e.NewPath, Files: len(e.Files)}
		for _, f := range e.Files {
			out.Bytes += f.Size
		}
		w.Events = append(w.Events, out)
		return nil
	})
	slices.Reverse(w.Events)
	return err
}

func (p *Page) containers() *NodeContainers {
	list := p.cfg.Containers.List()
	c := &NodeContainers{ByState: map[string]int{}, Total: len(list), List: []ContainerInfo{}}
	for _, st := range container.States {
		c.ByState[string(st)] = 0
	}
	for _, d := range list {
		c.ByState[string(d.State)]++
		c.Bytes += d.Bytes
	}
	// Newest first: the open ones and the latest closed are what change.
	for i := len(list) - 1; i >= 0 && len(c.List) < MaxList; i-- {
		d := list[i]
		c.List = append(c.List, ContainerInfo{ID: strconv.FormatUint(d.ID, 10), State: string(d.State), Reason: d.Reason,
			Replication: d.Replication, ReplicaIndex: d.ReplicaIndex, Bytes: d.Bytes, Blocks: d.Blocks, Created: d.Created.UTC()})
	}
	c.Omitted = c.Total - len(c.List)
	return c
}

func (p *Page) queue() *ReplicationQueue {
	jobs := p.cfg.Queue.Jobs()
	q := &ReplicationQueue{Limit: p.cfg.Queue.Limit(), Jobs: []Job{}}
	for _, j := range jobs {
		if j.Running {
			q.Running++
		} else {
			q.Queued++
		}
		if len(q.Jobs) < MaxList {
			q.Jobs = append(q.Jobs, Job{Container: strconv.FormatUint(j.Container, 10), Target: j.Target, Mode: j.Mode.String(),
				Priority: j.Priority, Running: j.Running, Started: j.Started.UTC(), Deadline: j.Deadline.UTC()})
		}
	}
	q.Omitted = len(jobs) - len(q.Jobs)
	return q
}

// classOrder is the replication manager's classes, in the order of
// cluster.Class.
var classOrder = []string{"HEALTHY", "UNDER_REPLICATED", "MIS_REPLICATED", "OVER_REPLICATED", "UNRECOVERABLE", "UNMANAGED"}

func (p *Page) cluster(ctx context.Context) *Cluster {
	c := p.cfg.Cluster
	role := "member"
	if c.Coordinator {
		role = "coordinator"
	}
	out := &Cluster{Role: role, Join: c.Join, Nodes: []ClusterNode{}, ByClass: map[string]int{}, Containers: []ClusterContainer{}}
	if out.Join == nil {
		out.Join = []string{}
	}
	for _, cl := range classOrder {
		out.ByClass[cl] = 0
	}
	errText := c.ErrorText
	if errText == nil {
		errText = func(err error) string { return err.Error() }
	}
	ctx, cancel := context.WithTimeout(ctx, partTimeout)
	defer cancel()
	st, err := c.Client.Status(ctx, &clusterpb.StatusRequest{})
	if err != nil {
		out.Error = errText(err)
		return out
	}
	out.Leader, out.Pending, out.Waiting = st.Leader, st.Pending, st.Waiting
	if st.LastCycle != 0 {
		out.LastCycle = time.Unix(0, st.LastCycle).UTC()
	}
	out.LastCycleDuration = time.Duration(st.LastCycleDuration).Seconds()
	nodes, err := c.Client.Nodes(ctx, &clusterpb.NodesRequest{})
	if err != nil {
		out.Error = errText(err)
		return out
	}
	for _, n := range nodes.Nodes {
		out.Nodes = append(out.Nodes, NodeOf(n))
	}
	cs, err := c.Client.Containers(ctx, &clusterpb.ContainersRequest{})
	if err != nil {
		out.Error = errText(err)
		return out
	}
	out.Total = len(cs.Containers)
	list := slices.Clone(cs.Containers)
	// What needs the replication manager's attention first, then by id.
	rank := func(class string) int {
		if class == "HEALTHY" {
			return 1
		}
		return 0
	}
	slices.SortStableFunc(list, func(a, b *clusterpb.ContainerInfo) int {
		return cmp.Or(cmp.Compare(rank(a.Class), rank(b.Class)), cmp.Compare(a.Id, b.Id))
	})
	for _, ct := range list {
		out.ByClass[ct.Class]++
		if len(out.Containers) >= MaxList {
			continue
		}
		cc := ClusterContainer{ID: strconv.FormatUint(ct.Id, 10), Replication: ct.Replication, State: ct.State,
			Class: ct.Class, Reason: ct.Reason, Bytes: ct.Bytes, Replicas: []Replica{}}
		for _, r := range ct.Replicas {
			cc.Replicas = append(cc.Replicas, Replica{Node: r.Node, Index: int(r.Index), State: r.State})
		}
		out.Containers = append(out.Containers, cc)
	}
	out.Omitted = out.Total - len(out.Containers)
	return out
}

// NodeOf is the node the coordinator describes as n; `replicad admin
// nodes --json` prints the same.
func NodeOf(n *clusterpb.NodeInfo) ClusterNode {
	cn := ClusterNode{ID: n.Id, Addr: n.Addr, Rack: n.Rack, Health: n.Health, OpState: n.OpState,
		Containers: int(n.Containers), UsedBytes: n.UsedBytes, FreeBytes: n.FreeBytes}
	if n.LastHeartbeat != 0 {
		cn.LastHeartbeat = time.Unix(0, n.LastHeartbeat).UTC()
	}
	if n.MaintenanceEnd != 0 {
		cn.MaintenanceEnd = time.Unix(0, n.MaintenanceEnd).UTC()
	}
	return cn
}
