package statuspage

import "time"

// The JSON of /status.json. Container ids are strings: they may exceed
// what a JavaScript number holds exactly. Times are RFC 3339 in UTC; a
// zero time is omitted. docs/metrics.md describes every field.

// Snapshot is what a node knows at one moment.
type Snapshot struct {
	Time       time.Time         `json:"time"`
	Node       *Node             `json:"node"`
	Warehouse  *Warehouse        `json:"warehouse,omitempty"`
	Containers *NodeContainers   `json:"containers,omitempty"`
	Queue      *ReplicationQueue `json:"queue,omitempty"`
	Cluster    *Cluster          `json:"cluster,omitempty"`
}

// Node is the node itself.
type Node struct {
	ID      string   `json:"id,omitempty"`
	Rack    string   `json:"rack,omitempty"`
	Addr    string   `json:"address"`
	Volumes []Volume `json:"volumes,omitempty"`
}

// Volume is one of the node's volumes.
type Volume struct {
	Path       string `json:"path"`
	Capacity   int64  `json:"capacity_bytes"`
	Free       int64  `json:"free_bytes"`
	Used       int64  `json:"used_bytes"`
	Reserved   int64  `json:"reserved_bytes"`
	Containers int    `json:"containers"`
}

// Warehouse is the warehouse the node serves, as its journal and slots say.
type Warehouse struct {
	Backing   string  `json:"backing"`
	State     string  `json:"state"`
	Source    string  `json:"source_id"`
	LastEvent uint64  `json:"last_event"`
	Events    []Event `json:"events"`
	Error     string  `json:"error,omitempty"`

	Slots      []Slot    `json:"slots"`
	Horizon    uint64    `json:"gc_horizon"`
	SlotsAt    time.Time `json:"slots_read_at,omitzero"`
	SlotsError string    `json:"slots_error,omitempty"`

	Ingest *Ingest `json:"ingest,omitempty"`
}

// Event is one journal event.
type Event struct {
	ID      uint64    `json:"id"`
	Time    time.Time `json:"time"`
	Type    string    `json:"type"`
	Path    string    `json:"path"`
	NewPath string    `json:"new_path,omitempty"`
	Files   int       `json:"files"`
	Bytes   int64     `json:"bytes"`
}

// Slot is a destination's replication slot.
type Slot struct {
	Name          string    `json:"name"`
	Position      uint64    `json:"position"`
	Lag           uint64    `json:"lag_events"`
	Lost          bool      `json:"lost"`
	PinnedEntries int       `json:"pinned_entries"`
	PinnedBytes   int64     `json:"pinned_bytes"`
	Updated       time.Time `json:"updated,omitzero"`
}

// Ingest is serve --ingest's progress.
type Ingest struct {
	Last    uint64 `json:"last"`
	Durable uint64 `json:"durable"`
	Lag     uint64 `json:"lag_events"`
	Error   string `json:"error,omitempty"`
}

// NodeContainers are the node's own containers.
type NodeContainers struct {
	Total   int             `json:"total"`
	Bytes   int64           `json:"bytes"`
	ByState map[string]int  `json:"by_state"`
	List    []ContainerInfo `json:"list"`
	Omitted int             `json:"omitted"`
}

// ContainerInfo is one of the node's containers.
type ContainerInfo struct {
	ID           string    `json:"id"`
	State        string    `json:"state"`
	Reason       string    `json:"reason,omitempty"`
	Replication  string    `json:"replication"`
	ReplicaIndex int       `json:"replica_index"`
	Bytes        int64     `json:"bytes"`
	Blocks       int64     `json:"blocks"`
	Created      time.Time `json:"created,omitzero"`
}

// ReplicationQueue is the node's replication queue.
type ReplicationQueue struct {
	Queued  int   `json:"queued"`
	Running int   `json:"running"`
	Limit   int   `json:"limit"`
	Jobs    []Job `json:"jobs"`
	Omitted int   `json:"omitted"`
}

// Job is a replication task queued or running.
type Job struct {
	Container string    `json:"container"`
	Target    string    `json:"target"`
	Mode      string    `json:"mode"`
	Priority  int       `json:"priority"`
	Running   bool      `json:"running"`
	Started   time.Time `json:"started,omitzero"`
	Deadline  time.Time `json:"deadline,omitzero"`
}

// Cluster is the cluster as its coordinator sees it.
type Cluster struct {
	Role              string             `json:"role"`
	Join              []string           `json:"join"`
	Leader            string             `json:"leader,omitempty"`
	Error             string             `json:"error,omitempty"`
	Pending           int64              `json:"pending_commands"`
	Waiting           int64              `json:"waiting"`
	LastCycle         time.Time          `json:"last_cycle,omitzero"`
	LastCycleDuration float64            `json:"last_cycle_seconds"`
	Nodes             []ClusterNode      `json:"nodes"`
	ByClass           map[string]int     `json:"by_class"`
	Total             int                `json:"total"`
	Containers        []ClusterContainer `json:"containers"`
	Omitted           int                `json:"omitted"`
}

// ClusterNode is a node as the coordinator knows it.
type ClusterNode struct {
	ID             string    `json:"id"`
	Addr           string    `json:"address"`
	Rack           string    `json:"rack"`
	Health         string    `json:"health"`
	OpState        string    `json:"opstate"`
	MaintenanceEnd time.Time `json:"maintenance_end,omitzero"`
	Containers     int       `json:"containers"`
	UsedBytes      int64     `json:"used_bytes"`
	FreeBytes      int64     `json:"free_bytes"`
	LastHeartbeat  time.Time `json:"last_heartbeat,omitzero"`
}

// ClusterContainer is a container as the coordinator classifies it.
type ClusterContainer struct {
	ID          string    `json:"id"`
	Replication string    `json:"replication"`
	State       string    `json:"state"`
	Class       string    `json:"class"`
	Reason      string    `json:"reason,omitempty"`
	Bytes       int64     `json:"bytes"`
	Replicas    []Replica `json:"replicas"`
}

// Replica is a copy (or an EC index) of a container on a node.
type Replica struct {
	Node  string `json:"node"`
	Index int    `json:"index"`
	State string `json:"state"`
}
