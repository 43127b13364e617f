package store

import (
	"time"

	"github.com/cmfs-project/cmfs/cluster"
)

// Store is the coordinator's durable state.
type Store interface {
	// Load returns everything stored: nodes by id, containers and
	// replicas by container id (then node), commands by id.
	Load() (Snapshot, error)
	// PutNode records a node, replacing what was recorded.
	PutNode(n Node) error
	// Report records what a node reported: with r.Full, r.Replicas are
	// all the node holds; otherwise they are added or replace earlier
	// ones, and r.Removed are gone. r.Containers replace the containers'
	// records.
	Report(r Report) error
	// AddCommands records commands and returns them with their ids.
	AddCommands(cmds []Command) ([]Command, error)
	// RemoveCommands forgets commands (done, failed or expired); an id
	// not stored is ignored.
	RemoveCommands(ids []uint64) error
	Close() error
}

// Node is a node as stored: who it is, where it is, what the operator
// made of it, and its volumes as last reported.
type Node struct {
	ID             cluster.NodeID
	Addr           string
	Rack           string
	OpState        cluster.OpState
	MaintenanceEnd time.Time `json:",omitzero"`
	UsedBytes      int64
	FreeBytes      int64
}

// Report is one heartbeat's container report.
type Report struct {
	Node       cluster.NodeID
	Full       bool
	Replicas   []cluster.Replica
	Removed    []cluster.ContainerID
	Containers []cluster.Container
}

// Command is a command sent to a node (Node: the one that carries it
// out) and not yet done.
type Command struct {
	ID   uint64
	Node cluster.NodeID
	cluster.Command
}

// Snapshot is the whole stored state.
type Snapshot struct {
	Nodes      []Node
	Containers []cluster.Container
	Replicas   []cluster.Replica
	Commands   []Command
}
