package coord

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/cmfs-project/cmfs/api/clusterpb"
	"github.com/cmfs-project/cmfs/cluster"
	"github.com/cmfs-project/cmfs/container"
	"github.com/cmfs-project/cmfs/peer"
)

// DefaultFullEvery is how many heartbeats apart full reports are.
const DefaultFullEvery = 10

// Containers is what an Agent needs of the node's container store;
// *container.Store is the one implementation outside tests.
type Containers interface {
	List() []container.Descriptor
	Descriptor(id uint64) (container.Descriptor, error)
	Delete(id uint64) error
	Volumes() []container.VolumeInfo
	// Prune forgets containers whose directory is gone; see
	// container.Store.Prune.
	Prune() []uint64
}

var _ Containers = (*container.Store)(nil)

// Node is what an Agent needs of the node's server; *peer.Server is the
// one implementation outside tests.
type Node interface {
	// Addr is where peers dial the node ("" until it serves).
	Addr() string
	Supervisor() *peer.Supervisor
	SetDecommissioning(on bool)
	Dial(ctx context.Context, addr string) (*peer.Client, error)
	// Encode and Reconstruct run the EC commands; see peer.Server's.
	Encode(ctx context.Context, id uint64, targets []peer.Endpoint, mode peer.Mode) error
	Reconstruct(ctx context.Context, id uint64, sources, targets []peer.Endpoint, mode peer.Mode) error
}

var _ Node = (*peer.Server)(nil)

// AgentConfig says what an Agent reports and where.
type AgentConfig struct {
	// Coordinators are the coordinators' addresses, tried in order.
	Coordinators []string
	NodeID       string
	Rack         string
	Node         Node
	Containers   Containers
	// Interval is the time between heartbeats; default DefaultHeartbeat.
	Interval time.Duration
	// FullEvery: a full report every this many heartbeats; default
	// DefaultFullEvery.
	FullEvery int
	Log       *slog.Logger
}

// Agent is a node's side of the cluster: heartbeats and the commands
// they bring back.
type Agent struct {
	cfg AgentConfig

	// Owned by Run's goroutine.
	coord    int    // index into Coordinators of the one dialed
	leader   string // the leader a standby named, dialed instead; "": none
	client   clusterpb.CoordinatorClient
	closer   io.Closer
	sent     map[uint64]replicaKey // as the coordinator last accepted
	beats    int
	wantFull bool

	mu      sync.Mutex
	running map[uint64]bool // command ids under way
	// finished are the results of the commands run, by id: one sent
	// again (a new leader resumed it from the store) is answered, not
	// run a second time.
	finished map[uint64]*clusterpb.CommandResult
	results  []*clusterpb.CommandResult
	wg       sync.WaitGroup
}

// replicaKey is what a report says of a replica, to find what changed.
type replicaKey struct {
	state, replication string
	checksum           uint64
	bytes              int64
	index              int
}

// NewAgent returns an agent; Run starts it.
func NewAgent(cfg AgentConfig) (*Agent, error) {
	if len(cfg.Coordinators) == 0 || cfg.NodeID == "" || cfg.Node == nil || cfg.Containers == nil {
		return nil, fmt.Errorf("agent: coordinators, node id, node and containers are required: %w", ErrInvalid)
	}
	cfg.Interval = cmp.Or(cfg.Interval, DefaultHeartbeat)
	cfg.FullEvery = cmp.Or(cfg.FullEvery, DefaultFullEvery)
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Agent{cfg: cfg, running: make(map[uint64]bool), finished: make(map[uint64]*clusterpb.CommandResult), wantFull: true}, nil
}

// Run heartbeats every Interval until ctx ends, and waits for the
// commands it started to end (their jobs end with the node's
// supervisor).
func (a *Agent) Run(ctx context.Context) {
	defer a.wg.Wait()
	defer func() {
		if a.closer != nil {
			a.closer.Close()
		}
	}()
	t := time.NewTicker(a.cfg.Interval)
	defer t.Stop()
	failing := false
	for {
		err := a.Beat(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil && !failing:
			a.cfg.Log.Warn("heartbeat", "err", err)
			failing = true
		case err == nil && failing:
			a.cfg.Log.Info("heartbeat answered again", "coordinator", a.cfg.Coordinators[a.coord])
			failing = false
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Beat sends one heartbeat and starts the commands it brings back. A
// coordinator that fails it is left for the next one in the list; a
// standby that names the leader, for the leader, at once.
func (a *Agent) Beat(ctx context.Context) error {
	err := a.beat(ctx)
	if errors.Is(err, ErrStandby) && a.leader != "" {
		err = a.beat(ctx)
	}
	return err
}

func (a *Agent) beat(ctx context.Context) error {
	addr := a.cfg.Node.Addr()
	if addr == "" {
		return nil // not serving yet: nothing a peer could dial
	}
	coord := cmp.Or(a.leader, a.cfg.Coordinators[a.coord])
	if a.client == nil {
		c, err := a.cfg.Node.Dial(ctx, coord)
		if err != nil {
			a.next()
			return fmt.Errorf("heartbeat to %s: %w", coord, err)
		}
		a.client, a.closer = clusterpb.NewCoordinatorClient(c.Conn()), c
	}
	req, now := a.report(addr)
	a.mu.Lock()
	req.Results, a.results = a.results, nil
	a.mu.Unlock()
	bctx, cancel := context.WithTimeout(ctx, max(a.cfg.Interval, 5*time.Second))
	var trailer metadata.MD
	resp, err := a.client.Heartbeat(bctx, req, grpc.Trailer(&trailer))
	cancel()
	if err != nil {
		a.mu.Lock()
		a.results = append(req.Results, a.results...)
		a.mu.Unlock()
		a.wantFull = true
		err = FromStatus(err)
		a.next()
		if l := trailer.Get(LeaderTrailer); errors.Is(err, ErrStandby) && len(l) == 1 && l[0] != coord {
			a.leader = l[0]
		}
		return fmt.Errorf("heartbeat to %s: %w", coord, err)
	}
	a.sent, a.beats, a.wantFull = now, a.beats+1, resp.SendFull
	a.cfg.Node.SetDecommissioning(resp.OpState == cluster.Decommissioning.String())
	for _, cmd := range resp.Commands {
		a.start(ctx, cmd)
	}
	return nil
}

// next drops the connection and moves to the next coordinator: the
// next in the list, unless a leader was dialed.
func (a *Agent) next() {
	if a.closer != nil {
		a.closer.Close()
	}
	a.client, a.closer = nil, nil
	if a.leader != "" {
		a.leader = ""
		return
	}
	a.coord = (a.coord + 1) % len(a.cfg.Coordinators)
}

// report builds the heartbeat: full at the first beat, every FullEvery,
// after a failure and when asked; else what changed since a.sent. It
// returns the containers as reported, the next a.sent.
func (a *Agent) report(addr string) (*clusterpb.HeartbeatRequest, map[uint64]replicaKey) {
	req := &clusterpb.HeartbeatRequest{NodeId: a.cfg.NodeID, Addr: addr, Rack: a.cfg.Rack}
	for _, v := range a.cfg.Containers.Volumes() {
		req.Volumes = append(req.Volumes, &clusterpb.Volume{Path: v.Path, UsedBytes: v.Used, FreeBytes: v.Free - v.Reserved})
	}
	q, r := a.cfg.Node.Supervisor().Len()
	req.InFlight = int32(q + r)
	req.Full = a.wantFull || a.sent == nil || a.beats%a.cfg.FullEvery == 0
	if req.Full {
		// A full report says what the node has: not a container whose
		// directory someone removed.
		if gone := a.cfg.Containers.Prune(); len(gone) > 0 {
			a.cfg.Log.Warn("containers gone from their volume, no longer reported", "ids", gone)
		}
	}
	now := make(map[uint64]replicaKey)
	for _, d := range a.cfg.Containers.List() {
		sum, _ := strconv.ParseUint(d.ContainerChecksum, 16, 64) // "" while open: 0
		k := replicaKey{state: string(d.State), replication: d.Replication, checksum: sum, bytes: d.Bytes, index: d.ReplicaIndex}
		now[d.ID] = k
		if old, ok := a.sent[d.ID]; req.Full || !ok || old != k {
			req.Replicas = append(req.Replicas, &clusterpb.Replica{
				ContainerId: d.ID, Replication: k.replication, State: k.state, Checksum: k.checksum, Bytes: k.bytes, ReplicaIndex: uint32(k.index),
			})
		}
	}
	if !req.Full {
		for id := range a.sent {
			if _, ok := now[id]; !ok {
				req.Removed = append(req.Removed, id)
			}
		}
	}
	return req, now
}

// start runs a command in the background, once however often it comes.
func (a *Agent) start(ctx context.Context, cmd *clusterpb.Command) {
	a.mu.Lock()
	if res := a.finished[cmd.Id]; res != nil {
		a.results = append(a.results, res)
	}
	if a.running[cmd.Id] || a.finished[cmd.Id] != nil {
		a.mu.Unlock()
		return
	}
	a.running[cmd.Id] = true
	a.mu.Unlock()
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		err := a.run(ctx, cmd)
		if err != nil {
			a.cfg.Log.Warn("command", "id", cmd.Id, "kind", cmd.Kind, "container", cmd.ContainerId, "target", cmd.TargetNode, "err", err)
		}
		res := &clusterpb.CommandResult{CommandId: cmd.Id}
		if err != nil {
			res.Error = err.Error()
		}
		a.mu.Lock()
		delete(a.running, cmd.Id)
		a.results = append(a.results, res)
		a.remember(res)
		a.mu.Unlock()
	}()
}

// keepFinished is how many results remember keeps: ids grow, so the
// oldest, long forgotten by any coordinator, go first.
const keepFinished = 4096

// remember keeps res in a.finished. a.mu is held.
func (a *Agent) remember(res *clusterpb.CommandResult) {
	a.finished[res.CommandId] = res
	if len(a.finished) <= keepFinished {
		return
	}
	ids := slices.Sorted(maps.Keys(a.finished))
	for _, id := range ids[:len(ids)-keepFinished/2] {
		delete(a.finished, id)
	}
}

func (a *Agent) run(ctx context.Context, cmd *clusterpb.Command) error {
	mode := peer.Push
	if cmd.Mode == clusterpb.Mode_PULL {
		mode = peer.Pull
	}
	switch cmd.Kind {
	case clusterpb.Kind_REPLICATE:
		if cmd.TargetAddr == "" {
			return fmt.Errorf("replicate container %d to %s: no address known for it", cmd.ContainerId, cmd.TargetNode)
		}
		job := a.cfg.Node.Supervisor().Submit(peer.Task{
			Container: cmd.ContainerId, Target: cmd.TargetAddr, Mode: mode,
			Priority: int(cmd.Priority), Deadline: fromNanos(cmd.Deadline),
		})
		_, err := job.Wait(ctx)
		return err
	case clusterpb.Kind_DELETE:
		if d, err := a.cfg.Containers.Descriptor(cmd.ContainerId); err == nil && d.ReplicaIndex != int(cmd.Index) {
			// The replica here is another index than the one the
			// coordinator meant to remove: its view is behind.
			return fmt.Errorf("delete container %d index %d: this node holds index %d", cmd.ContainerId, cmd.Index, d.ReplicaIndex)
		}
		err := a.cfg.Containers.Delete(cmd.ContainerId)
		if errors.Is(err, container.ErrNotFound) {
			return nil // gone already: what was asked
		}
		return err
	case clusterpb.Kind_ENCODE, clusterpb.Kind_RECONSTRUCT:
		targets, err := endpoints(cmd, cmd.Targets)
		if err != nil {
			return err
		}
		ctx := ctx
		if d := fromNanos(cmd.Deadline); !d.IsZero() {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, d)
			defer cancel()
		}
		if cmd.Kind == clusterpb.Kind_ENCODE {
			return a.cfg.Node.Encode(ctx, cmd.ContainerId, targets, mode)
		}
		sources, err := endpoints(cmd, cmd.Sources)
		if err != nil {
			return err
		}
		return a.cfg.Node.Reconstruct(ctx, cmd.ContainerId, sources, targets, mode)
	}
	return fmt.Errorf("command %d: kind %v: %w", cmd.Id, cmd.Kind, ErrInvalid)
}

// endpoints reads a command's sources or targets: every one must have an
// address and an index.
func endpoints(cmd *clusterpb.Command, in []*clusterpb.Endpoint) ([]peer.Endpoint, error) {
	out := make([]peer.Endpoint, 0, len(in))
	for _, e := range in {
		if e.Addr == "" || e.Index == 0 {
			return nil, fmt.Errorf("%s container %d: node %s (index %d) has no address known or no index", cmd.Kind, cmd.ContainerId, e.Node, e.Index)
		}
		out = append(out, peer.Endpoint{Index: int(e.Index), Addr: e.Addr})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s container %d: no targets: %w", cmd.Kind, cmd.ContainerId, ErrInvalid)
	}
	return out, nil
}
