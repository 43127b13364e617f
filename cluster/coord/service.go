package coord

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/cmfs-project/cmfs/api/clusterpb"
	"github.com/cmfs-project/cmfs/cluster"
	"github.com/cmfs-project/cmfs/cluster/store"
	"github.com/cmfs-project/cmfs/internal/auth"
	"github.com/cmfs-project/cmfs/internal/rpcerr"
	"github.com/cmfs-project/cmfs/peer"
)

// ErrUnauthenticated is wrapped when the coordinator refused the
// client's credential.
var ErrUnauthenticated = auth.ErrUnauthenticated

// ErrStandby is wrapped when a standby coordinator refuses a call: it
// does not lead. The reply's LeaderTrailer names the leader.
var ErrStandby = errors.New("standby coordinator")

// LeaderTrailer is the trailer in which a standby names the leader's
// address ("" while none leads).
const LeaderTrailer = "cmfs-leader"

// errorCodes is how the service's errors travel.
var errorCodes = rpcerr.Map{
	{Err: ErrInvalid, Code: codes.InvalidArgument},
	{Err: ErrStandby, Code: codes.FailedPrecondition},
	{Err: ErrNotFound, Code: codes.NotFound},
	{Err: auth.ErrUnauthenticated, Code: codes.Unauthenticated},
	// A coordinator that cannot be reached, as peer says of a node.
	{Err: peer.ErrUnavailable, Code: codes.Unavailable},
}

// FromStatus turns an error of a Coordinator client call into one that
// wraps this package's sentinels.
func FromStatus(err error) error { return errorCodes.FromStatus(err) }

// Service is the Coordinator gRPC service over a Coordinator: register
// it with clusterpb.RegisterCoordinatorServer.
type Service struct {
	clusterpb.UnimplementedCoordinatorServer
	c      atomic.Pointer[Coordinator] // nil: standing by
	leader func(context.Context) (string, error)
}

// NewService serves c.
func NewService(c *Coordinator) *Service {
	s := &Service{}
	s.c.Store(c)
	return s
}

// NewStandbyService serves no coordinator until Lead: meanwhile every
// call is refused with ErrStandby, naming the address leader returns.
func NewStandbyService(leader func(context.Context) (string, error)) *Service {
	return &Service{leader: leader}
}

// Lead serves c from now on; nil: stand by again.
func (s *Service) Lead(c *Coordinator) { s.c.Store(c) }

// Coordinator returns the coordinator served now; nil while standing by.
func (s *Service) Coordinator() *Coordinator { return s.c.Load() }

// coord returns the coordinator serving, or the standby's refusal.
func (s *Service) coord(ctx context.Context) (*Coordinator, error) {
	if c := s.c.Load(); c != nil {
		return c, nil
	}
	leader := ""
	if s.leader != nil {
		leader, _ = s.leader(ctx) // unknown: the client tries another
	}
	grpc.SetTrailer(ctx, metadata.Pairs(LeaderTrailer, leader))
	if leader == "" {
		return nil, errorCodes.ToStatus(fmt.Errorf("%w: no coordinator leads yet", ErrStandby))
	}
	return nil, errorCodes.ToStatus(fmt.Errorf("%w: the leader is %s", ErrStandby, leader))
}

func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// Heartbeat implements clusterpb.CoordinatorServer.
func (s *Service) Heartbeat(ctx context.Context, req *clusterpb.HeartbeatRequest) (*clusterpb.HeartbeatResponse, error) {
	c, err := s.coord(ctx)
	if err != nil {
		return nil, err
	}
	b := Beat{
		Node:     store.Node{ID: cluster.NodeID(req.NodeId), Addr: req.Addr, Rack: req.Rack},
		InFlight: int(req.InFlight),
		Full:     req.Full,
	}
	for _, v := range req.Volumes {
		b.Node.UsedBytes += v.UsedBytes
		b.Node.FreeBytes += v.FreeBytes
	}
	for _, r := range req.Replicas {
		rep, err := replicaFromPB(req.NodeId, r)
		if err != nil {
			return nil, errorCodes.ToStatus(err)
		}
		b.Replicas = append(b.Replicas, rep)
	}
	for _, id := range req.Removed {
		b.Removed = append(b.Removed, cluster.ContainerID(id))
	}
	for _, r := range req.Results {
		b.Results = append(b.Results, Result{Command: r.CommandId, Err: r.Error})
	}
	reply, err := c.Heartbeat(b)
	if err != nil {
		return nil, errorCodes.ToStatus(err)
	}
	resp := &clusterpb.HeartbeatResponse{SendFull: reply.SendFull, OpState: reply.OpState.String()}
	c.mu.Lock()
	for _, cmd := range reply.Commands {
		resp.Commands = append(resp.Commands, commandToPB(c, cmd))
	}
	c.mu.Unlock()
	return resp, nil
}

// commandToPB resolves the command's target to its address. c.mu is held.
func commandToPB(c *Coordinator, cmd store.Command) *clusterpb.Command {
	pb := &clusterpb.Command{
		Id: cmd.ID, ContainerId: uint64(cmd.Container), TargetNode: string(cmd.Target), Index: uint32(cmd.Index),
		Priority: int32(cmd.Priority), Deadline: nanos(cmd.Deadline), Mode: clusterpb.Mode_PUSH,
	}
	if cmd.Mode == cluster.Pull {
		pb.Mode = clusterpb.Mode_PULL
	}
	addr := func(id cluster.NodeID) string {
		if n := c.nodes[id]; n != nil {
			return n.Addr
		}
		return ""
	}
	pb.TargetAddr = addr(cmd.Target)
	endpoints := func(nodes []cluster.NodeID, indexes []uint8) []*clusterpb.Endpoint {
		var out []*clusterpb.Endpoint
		for k, n := range nodes {
			e := &clusterpb.Endpoint{Node: string(n), Addr: addr(n)}
			if k < len(indexes) {
				e.Index = uint32(indexes[k])
			}
			out = append(out, e)
		}
		return out
	}
	switch cmd.Kind {
	case cluster.Replicate:
		pb.Kind = clusterpb.Kind_REPLICATE
	case cluster.Delete:
		pb.Kind = clusterpb.Kind_DELETE
	case cluster.Encode:
		pb.Kind = clusterpb.Kind_ENCODE
		pb.Targets = endpoints(cmd.Targets, cmd.Indexes)
	case cluster.Reconstruct:
		pb.Kind = clusterpb.Kind_RECONSTRUCT
		pb.Sources = endpoints(cmd.Sources, cmd.SourceIndexes)
		pb.Targets = endpoints(cmd.Targets, cmd.Indexes)
	}
	return pb
}

func replicaFromPB(node string, r *clusterpb.Replica) (ReplicaReport, error) {
	st, err := cluster.ParseState(r.State)
	if err != nil {
		return ReplicaReport{}, fmt.Errorf("heartbeat of %s: container %d: %w: %w", node, r.ContainerId, err, ErrInvalid)
	}
	rep, err := cluster.ParseReplication(r.Replication)
	if err != nil {
		return ReplicaReport{}, fmt.Errorf("heartbeat of %s: container %d: %w: %w", node, r.ContainerId, err, ErrInvalid)
	}
	if r.ContainerId == 0 || r.ReplicaIndex > 255 {
		return ReplicaReport{}, fmt.Errorf("heartbeat of %s: container %d index %d: %w", node, r.ContainerId, r.ReplicaIndex, ErrInvalid)
	}
	return ReplicaReport{
		Replica: cluster.Replica{
			Container: cluster.ContainerID(r.ContainerId), Node: cluster.NodeID(node), Index: uint8(r.ReplicaIndex),
			State: st, Checksum: r.Checksum,
		},
		Replication: rep,
		Bytes:       r.Bytes,
	}, nil
}

func nodeToPB(n NodeStatus) *clusterpb.NodeInfo {
	return &clusterpb.NodeInfo{
		Id: string(n.ID), Addr: n.Addr, Rack: n.Rack, Health: n.Health.String(), OpState: n.OpState.String(),
		MaintenanceEnd: nanos(n.MaintenanceEnd), Containers: int32(n.Containers),
		UsedBytes: n.UsedBytes, FreeBytes: n.FreeBytes, LastHeartbeat: nanos(n.LastSeen),
	}
}

// Nodes implements clusterpb.CoordinatorServer.
func (s *Service) Nodes(ctx context.Context, _ *clusterpb.NodesRequest) (*clusterpb.NodesResponse, error) {
	c, err := s.coord(ctx)
	if err != nil {
		return nil, err
	}
	resp := &clusterpb.NodesResponse{}
	for _, n := range c.Nodes() {
		resp.Nodes = append(resp.Nodes, nodeToPB(n))
	}
	return resp, nil
}

// Containers implements clusterpb.CoordinatorServer.
func (s *Service) Containers(ctx context.Context, _ *clusterpb.ContainersRequest) (*clusterpb.ContainersResponse, error) {
	co, err := s.coord(ctx)
	if err != nil {
		return nil, err
	}
	cs, err := co.Containers()
	if err != nil {
		return nil, errorCodes.ToStatus(err)
	}
	resp := &clusterpb.ContainersResponse{}
	for _, c := range cs {
		pb := &clusterpb.ContainerInfo{
			Id: uint64(c.ID), Replication: c.Replication.String(), State: c.State.String(),
			Class: c.Class.String(), Bytes: c.Bytes, Reason: c.Reason,
		}
		for _, r := range c.Replicas {
			pb.Replicas = append(pb.Replicas, &clusterpb.ReplicaInfo{Node: string(r.Node), Index: uint32(r.Index), State: r.State.String(), Checksum: r.Checksum})
		}
		resp.Containers = append(resp.Containers, pb)
	}
	return resp, nil
}

// ParseOpState reads an operational state by its name ("IN_SERVICE").
func ParseOpState(s string) (cluster.OpState, error) {
	for o := cluster.InService; o <= cluster.InMaintenance; o++ {
		if o.String() == s {
			return o, nil
		}
	}
	return 0, fmt.Errorf("operational state %q: %w", s, ErrInvalid)
}

// SetOpState implements clusterpb.CoordinatorServer.
func (s *Service) SetOpState(ctx context.Context, req *clusterpb.SetOpStateRequest) (*clusterpb.NodeInfo, error) {
	to, err := ParseOpState(req.OpState)
	if err != nil {
		return nil, errorCodes.ToStatus(err)
	}
	c, err := s.coord(ctx)
	if err != nil {
		return nil, err
	}
	n, err := c.SetOpState(cluster.NodeID(req.Node), to, fromNanos(req.MaintenanceEnd))
	if err != nil {
		return nil, errorCodes.ToStatus(err)
	}
	return nodeToPB(n), nil
}

// Status implements clusterpb.CoordinatorServer.
func (s *Service) Status(ctx context.Context, _ *clusterpb.StatusRequest) (*clusterpb.StatusResponse, error) {
	c, err := s.coord(ctx)
	if err != nil {
		return nil, err
	}
	st := c.Status()
	resp := &clusterpb.StatusResponse{
		Pending: int64(st.Pending), LastCycle: nanos(st.LastCycle), LastCycleDuration: int64(st.LastCycleDuration),
		Leader: st.Leader, Nodes: int32(st.Nodes), Containers: int32(st.Containers), Waiting: int64(st.Decision.Waiting),
	}
	for c := cluster.Replicated; c <= cluster.Unmanaged; c++ {
		resp.Classes = append(resp.Classes, &clusterpb.ClassCount{Class: c.String(), Count: int64(st.Decision.Count(c))})
	}
	return resp, nil
}
