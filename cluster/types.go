package cluster

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// NodeID names a node, as membership knows it. Decide works on small
// integer indexes internally; the id is what crosses its boundary.
type NodeID string

// Health is what heartbeats say of a node.
type Health uint8

const (
	Healthy Health = iota // heartbeats arrive
	Stale                 // heartbeats late: the node may be back any time
	Dead                  // heartbeats missing too long: its replicas are lost
)

func (h Health) String() string {
	switch h {
	case Healthy:
		return "HEALTHY"
	case Stale:
		return "STALE"
	case Dead:
		return "DEAD"
	}
	return "Health(" + strconv.Itoa(int(h)) + ")"
}

// OpState is a node's operational state, which the operator sets and
// Decide moves on (Transition).
type OpState uint8

const (
	InService           OpState = iota
	Decommissioning             // draining: replicas are sources, not copies
	Decommissioned              // drained: holds nothing anyone depends on
	EnteringMaintenance         // making sure enough copies stay online
	InMaintenance               // may go offline without re-replication
)

func (s OpState) String() string {
	switch s {
	case InService:
		return "IN_SERVICE"
	case Decommissioning:
		return "DECOMMISSIONING"
	case Decommissioned:
		return "DECOMMISSIONED"
	case EnteringMaintenance:
		return "ENTERING_MAINTENANCE"
	case InMaintenance:
		return "IN_MAINTENANCE"
	}
	return "OpState(" + strconv.Itoa(int(s)) + ")"
}

func (s OpState) maintenance() bool { return s == EnteringMaintenance || s == InMaintenance }

// Node is one replicad node as the coordinator sees it.
type Node struct {
	ID      NodeID
	Addr    string
	Rack    string // "" is a rack of its own name, like any other
	Health  Health
	OpState OpState
	// MaintenanceEnd is when a node in maintenance returns to service;
	// zero: when the operator says so.
	MaintenanceEnd time.Time
	FreeBytes      int64
	UsedBytes      int64
	// InFlight is how many replication commands the node reports running
	// or queued (as source or target).
	InFlight int
}

// ContainerState is a container's state, as the coordinator records it
// (Container.State) or as a node reports its replica (Replica.State). The
// names are container.State's.
type ContainerState uint8

const (
	Open ContainerState = iota + 1
	Closing
	Closed
	Recovering
	Unhealthy
	Deleted
)

var stateNames = [...]string{"", "OPEN", "CLOSING", "CLOSED", "RECOVERING", "UNHEALTHY", "DELETED"}

func (s ContainerState) String() string {
	if int(s) < len(stateNames) && s != 0 {
		return stateNames[s]
	}
	return "ContainerState(" + strconv.Itoa(int(s)) + ")"
}

// ParseState reads a state by its name in container.yaml ("CLOSED").
func ParseState(s string) (ContainerState, error) {
	for i, n := range stateNames {
		if i > 0 && n == s {
			return ContainerState(i), nil
		}
	}
	return 0, fmt.Errorf("container state %q: want one of %s", s, strings.Join(stateNames[1:], " "))
}

// ReplicationType says how a container is made durable.
type ReplicationType uint8

const (
	Ratis ReplicationType = iota + 1 // N whole copies ("replica:N")
	EC                               // Reed-Solomon stripes ("ec:rs-D-P-CELLk")
)

// Replication is a parsed replication config.
type Replication struct {
	Type ReplicationType
	// N is the number of copies (Ratis) or of data indexes (EC).
	N uint16
	// Parity and CellKiB describe EC only.
	Parity  uint16
	CellKiB uint32
}

// ParseReplication reads "replica:N" (N ≥ 1) or "ec:rs-D-P-CELLk", the
// syntax container.ValidateReplication accepts.
func ParseReplication(s string) (Replication, error) {
	bad := fmt.Errorf("replication %q: want replica:N or ec:rs-D-P-CELLk", s)
	num := func(x string) (int, bool) {
		v, err := strconv.Atoi(x)
		return v, err == nil && v >= 1 && v <= 1<<16-1
	}
	if n, ok := strings.CutPrefix(s, "replica:"); ok {
		v, ok := num(n)
		if !ok {
			return Replication{}, bad
		}
		return Replication{Type: Ratis, N: uint16(v)}, nil
	}
	rest, ok := strings.CutPrefix(s, "ec:rs-")
	f := strings.Split(rest, "-")
	if !ok || len(f) != 3 || !strings.HasSuffix(f[2], "k") {
		return Replication{}, bad
	}
	d, ok1 := num(f[0])
	p, ok2 := num(f[1])
	c, ok3 := num(strings.TrimSuffix(f[2], "k"))
	if !ok1 || !ok2 || !ok3 {
		return Replication{}, bad
	}
	return Replication{Type: EC, N: uint16(d), Parity: uint16(p), CellKiB: uint32(c)}, nil
}

// MustReplication is ParseReplication for constants; it panics on bad
// input.
func MustReplication(s string) Replication {
	r, err := ParseReplication(s)
	if err != nil {
		panic(err)
	}
	return r
}

func (r Replication) String() string {
	switch r.Type {
	case Ratis:
		return "replica:" + strconv.Itoa(int(r.N))
	case EC:
		return fmt.Sprintf("ec:rs-%d-%d-%dk", r.N, r.Parity, r.CellKiB)
	}
	return "none"
}

// ContainerID is a container's id (container.yaml's containerID).
type ContainerID uint64

// Container is the coordinator's record of one container.
type Container struct {
	ID          ContainerID
	Replication Replication
	// State: Decide manages CLOSED containers only.
	State ContainerState
	Bytes int64
	// Checksum is the container checksum recorded when it closed; 0:
	// unknown, the majority of the CLOSED replicas decides.
	Checksum uint64
}

// Replica is one copy of a container on a node, as the node reports it.
type Replica struct {
	Container ContainerID
	Node      NodeID
	Index     uint8 // EC replica index 1…D+P; 0 for replica:N
	State     ContainerState
	Checksum  uint64
}

// Kind is what a command does.
type Kind uint8

const (
	Replicate   Kind = iota + 1 // copy the container (or one EC index of it) to Target
	Delete                      // remove the container's replica on Target
	Encode                      // stripe the whole copy on Sources[0] into EC indexes, Indexes[k] to Targets[k]
	Reconstruct                 // rebuild EC Indexes from the indexes Sources hold, Indexes[k] onto Targets[k]
)

func (k Kind) String() string {
	switch k {
	case Replicate:
		return "replicate"
	case Delete:
		return "delete"
	case Encode:
		return "encode"
	case Reconstruct:
		return "reconstruct"
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Mode is how a Replicate travels, as peer runs it.
type Mode uint8

const (
	Push Mode = iota + 1 // Sources[0] exports into a stream to Target
	Pull                 // Target downloads from Sources, in order
)

func (m Mode) String() string {
	switch m {
	case Push:
		return "push"
	case Pull:
		return "pull"
	}
	return "Mode(" + strconv.Itoa(int(m)) + ")"
}

// Command is one thing Decide asks a node to do. A Command that was sent
// and has not completed is passed back in State.Pending.
type Command struct {
	Kind      Kind
	Container ContainerID
	// Index is the replica index a Replicate copies or a Delete removes:
	// 0 for a whole container, 1…D+P for an EC index.
	Index uint8
	// Target gains a replica (Replicate) or loses it (Delete).
	Target NodeID
	// Sources hold a good copy (Replicate, Encode: the whole copy), the
	// one Decide charged first; a Replicate goes to Sources[0], which
	// pushes or has Target pull, trying them in order. A Reconstruct's
	// Sources hold the indexes SourceIndexes lists, one each.
	Sources       []NodeID
	SourceIndexes []uint8
	// Indexes are the EC indexes an Encode or Reconstruct makes, and
	// Targets the node that takes each: Indexes[k] goes to Targets[k].
	Indexes []uint8
	Targets []NodeID
	Mode    Mode // Replicate, Encode, Reconstruct
	// Priority is how many copies the container is short of its
	// replication, counting every copy online: higher is more urgent, as
	// peer.Task.Priority orders them.
	Priority int
	// Deadline: after it, a pending command is taken as failed.
	Deadline time.Time
}

func (c Command) String() string {
	switch c.Kind {
	case Delete:
		return fmt.Sprintf("delete %d/%d on %s", c.Container, c.Index, c.Target)
	case Encode, Reconstruct:
		return fmt.Sprintf("%s %d %v→%v onto %v %s p%d", c.Kind, c.Container, c.Sources, c.Indexes, c.Targets, c.Mode, c.Priority)
	}
	return fmt.Sprintf("replicate %d/%d %v→%s %s p%d", c.Container, c.Index, c.Sources, c.Target, c.Mode, c.Priority)
}

// Gains lists the nodes the command gives a replica: a Replicate's
// Target, an Encode's or Reconstruct's Targets.
func (c Command) Gains() []NodeID {
	switch c.Kind {
	case Replicate:
		return []NodeID{c.Target}
	case Encode, Reconstruct:
		return c.Targets
	}
	return nil
}

// Node is the node that carries the command out: a Replicate's or
// Encode's first source, a Delete's target; a Reconstruct's first
// source in push mode (it rebuilds and pushes), its target in pull mode
// (it reads the cells and rebuilds its own index; Decide sends one per
// index).
func (c Command) Node() NodeID {
	switch {
	case c.Kind == Delete:
		return c.Target
	case c.Kind == Reconstruct && c.Mode == Pull && len(c.Targets) > 0:
		return c.Targets[0]
	case len(c.Sources) > 0:
		return c.Sources[0]
	}
	return ""
}

// Transition moves a node to another operational state.
type Transition struct {
	Node     NodeID
	From, To OpState
}

// State is the cluster as the coordinator knows it: Decide's input.
// Containers and Replicas are fastest sorted by container id (Decide
// sorts a copy of the order otherwise).
type State struct {
	Nodes      []Node
	Containers []Container
	Replicas   []Replica
	// Pending are commands sent and not yet done or failed.
	Pending []Command
}

// Config tunes Decide.
type Config struct {
	// MaintenanceRemainingRedundancy is how many copies beyond one must
	// stay online in service while other copies are in maintenance:
	// maintenance keeps min(N, 1+this) copies in service.
	MaintenanceRemainingRedundancy int
	// NodeLimit is how many replication commands may be in flight on a
	// node (as source or target); twice as many on a decommissioning
	// source, as peer.Supervisor allows.
	NodeLimit int
	// Push: commands replicate in push mode; false: pull.
	Push bool
	// Timeout is how long a command may take: its Deadline is Now+Timeout.
	Timeout time.Duration
	// Now is the time of the decision; Decide reads no clock.
	Now time.Time
}

// Defaults.
const (
	DefaultMaintenanceRemainingRedundancy = 1
	DefaultNodeLimit                      = 10 // peer.DefaultConcurrency
	DefaultTimeout                        = 10 * time.Minute
)

// DefaultConfig is the configuration of a coordinator that sets nothing:
// push mode, redundancy 1, 10 commands per node, 10-minute deadlines.
// Now is left for the caller.
func DefaultConfig() Config {
	return Config{
		MaintenanceRemainingRedundancy: DefaultMaintenanceRemainingRedundancy,
		NodeLimit:                      DefaultNodeLimit,
		Push:                           true,
		Timeout:                        DefaultTimeout,
	}
}

// Validate refuses a configuration Decide cannot work with.
func (c Config) Validate() error {
	switch {
	case c.MaintenanceRemainingRedundancy < 0:
		return fmt.Errorf("maintenance remaining redundancy %d: want 0 or more", c.MaintenanceRemainingRedundancy)
	case c.NodeLimit < 1:
		return fmt.Errorf("node limit %d: want 1 or more", c.NodeLimit)
	case c.Timeout <= 0:
		return fmt.Errorf("timeout %v: want more than 0", c.Timeout)
	case c.Now.IsZero():
		return fmt.Errorf("now is not set")
	}
	return nil
}
