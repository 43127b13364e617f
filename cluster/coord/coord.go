package coord

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/cmfs-project/cmfs/cluster"
	"github.com/cmfs-project/cmfs/cluster/store"
)

// Defaults of Config.
const (
	DefaultHeartbeat  = 3 * time.Second
	DefaultStaleAfter = 30 * time.Second
	DefaultDeadAfter  = 60 * time.Second
	DefaultRMInterval = 10 * time.Second
)

// Config says how a Coordinator works.
type Config struct {
	Store store.Store
	// StaleAfter and DeadAfter: a node whose last heartbeat is older is
	// STALE, then DEAD.
	StaleAfter, DeadAfter time.Duration
	// RMInterval is the time between two replication manager cycles.
	RMInterval time.Duration
	// Decide configures cluster.Decide (Now is set for each cycle).
	Decide cluster.Config
	// Leader is the coordinator's address, as Status reports it.
	Leader string
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
	// Log receives what changes state: transitions, health, failures.
	Log *slog.Logger
}

// ErrInvalid is wrapped by the errors of a bad configuration or request.
var ErrInvalid = errors.New("invalid")

// ErrNotFound is wrapped when a request names a node the coordinator
// does not know.
var ErrNotFound = errors.New("not found")

func (c Config) withDefaults() (Config, error) {
	if c.Store == nil {
		return c, fmt.Errorf("coordinator: no store: %w", ErrInvalid)
	}
	c.StaleAfter = cmp.Or(c.StaleAfter, DefaultStaleAfter)
	c.DeadAfter = cmp.Or(c.DeadAfter, DefaultDeadAfter)
	c.RMInterval = cmp.Or(c.RMInterval, DefaultRMInterval)
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	switch {
	case c.StaleAfter < 0 || c.DeadAfter < 0 || c.RMInterval < 0:
		return c, fmt.Errorf("coordinator: negative duration: %w", ErrInvalid)
	case c.DeadAfter <= c.StaleAfter:
		return c, fmt.Errorf("coordinator: dead after %v must be longer than stale after %v: %w", c.DeadAfter, c.StaleAfter, ErrInvalid)
	}
	d := c.Decide
	d.Now = c.Now()
	if err := d.Validate(); err != nil {
		return c, fmt.Errorf("coordinator: %w: %w", err, ErrInvalid)
	}
	return c, nil
}

// node is what the coordinator knows of a node.
type node struct {
	store.Node
	health   cluster.Health
	lastSeen time.Time
	inFlight int
	reported bool // a full report arrived since the coordinator started, or the store had one
}

// command is a pending command; sent says it went out in a heartbeat
// since this coordinator started.
type command struct {
	store.Command
	sent bool
}

// Coordinator is the cluster's coordinator: the Coordinator service and
// the replication manager's loop (Run).
type Coordinator struct {
	cfg Config

	mu         sync.Mutex
	nodes      map[cluster.NodeID]*node
	containers map[cluster.ContainerID]cluster.Container
	replicas   map[cluster.ContainerID]map[cluster.NodeID]cluster.Replica
	commands   map[uint64]*command
	lastCycle  time.Time
	lastDur    time.Duration
	last       cluster.Decision
	issued     map[cluster.Kind]uint64 // commands Decide issued, since New
	dropped    map[Drop]uint64         // pending commands dropped unfinished
}

// Why is why a pending command was dropped before its effect showed
// (Decide issues it again while still needed).
type Why uint8

const (
	// Failed: its node reported that it failed.
	Failed Why = iota
	// Expired: its deadline passed.
	Expired
	// NodeDead: the node carrying it out went DEAD.
	NodeDead
)

// Whys are every reason, in order.
var Whys = []Why{Failed, Expired, NodeDead}

func (w Why) String() string {
	switch w {
	case Failed:
		return "failed"
	case Expired:
		return "expired"
	case NodeDead:
		return "node_dead"
	}
	return "Why(" + strconv.Itoa(int(w)) + ")"
}

// Drop is a kind of command dropped, and why.
type Drop struct {
	Kind cluster.Kind
	Why  Why
}

// New returns a coordinator resumed from cfg.Store.
func New(cfg Config) (*Coordinator, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	snap, err := cfg.Store.Load()
	if err != nil {
		return nil, err
	}
	c := &Coordinator{
		cfg:        cfg,
		nodes:      make(map[cluster.NodeID]*node),
		containers: make(map[cluster.ContainerID]cluster.Container),
		replicas:   make(map[cluster.ContainerID]map[cluster.NodeID]cluster.Replica),
		commands:   make(map[uint64]*command),
		issued:     make(map[cluster.Kind]uint64),
		dropped:    make(map[Drop]uint64),
	}
	now := cfg.Now()
	for _, n := range snap.Nodes {
		c.nodes[n.ID] = &node{Node: n, lastSeen: now, reported: true}
	}
	for _, ct := range snap.Containers {
		c.containers[ct.ID] = ct
	}
	for _, r := range snap.Replicas {
		c.setReplica(r)
	}
	for _, cmd := range snap.Commands {
		c.commands[cmd.ID] = &command{Command: cmd}
	}
	return c, nil
}

func (c *Coordinator) setReplica(r cluster.Replica) {
	m := c.replicas[r.Container]
	if m == nil {
		m = make(map[cluster.NodeID]cluster.Replica)
		c.replicas[r.Container] = m
	}
	m[r.Node] = r
}

func (c *Coordinator) dropReplica(id cluster.ContainerID, n cluster.NodeID) {
	if m := c.replicas[id]; m != nil {
		delete(m, n)
		if len(m) == 0 {
			delete(c.replicas, id)
		}
	}
}

// Run runs a cycle every RMInterval until ctx ends; a cycle that fails
// is logged and the next one tried.
func (c *Coordinator) Run(ctx context.Context) {
	t := time.NewTicker(c.cfg.RMInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := c.Cycle(); err != nil {
			c.cfg.Log.Error("replication manager cycle", "err", err)
		}
	}
}

// health updates every node's health at now, logging changes. mu is held.
func (c *Coordinator) health(now time.Time) {
	for _, n := range c.nodes {
		h := cluster.Healthy
		switch age := now.Sub(n.lastSeen); {
		case age >= c.cfg.DeadAfter:
			h = cluster.Dead
		case age >= c.cfg.StaleAfter:
			h = cluster.Stale
		}
		if h != n.health {
			c.cfg.Log.Info("node health", "node", n.ID, "from", n.health, "to", h)
			n.health = h
		}
	}
}

// state builds Decide's input. mu is held.
func (c *Coordinator) state() cluster.State {
	var s cluster.State
	for _, n := range c.nodes {
		s.Nodes = append(s.Nodes, cluster.Node{
			ID: n.ID, Addr: n.Addr, Rack: n.Rack, Health: n.health, OpState: n.OpState,
			MaintenanceEnd: n.MaintenanceEnd, FreeBytes: n.FreeBytes, UsedBytes: n.UsedBytes, InFlight: n.inFlight,
		})
	}
	slices.SortFunc(s.Nodes, func(a, b cluster.Node) int { return cmp.Compare(a.ID, b.ID) })
	for _, ct := range c.containers {
		s.Containers = append(s.Containers, ct)
	}
	slices.SortFunc(s.Containers, func(a, b cluster.Container) int { return cmp.Compare(a.ID, b.ID) })
	for _, ct := range s.Containers {
		start := len(s.Replicas)
		for _, r := range c.replicas[ct.ID] {
			s.Replicas = append(s.Replicas, r)
		}
		slices.SortFunc(s.Replicas[start:], func(a, b cluster.Replica) int { return cmp.Compare(a.Node, b.Node) })
	}
	for _, cmd := range c.sortedCommands() {
		s.Pending = append(s.Pending, cmd.Command.Command)
	}
	return s
}

func (c *Coordinator) sortedCommands() []*command {
	out := make([]*command, 0, len(c.commands))
	for _, cmd := range c.commands {
		out = append(out, cmd)
	}
	slices.SortFunc(out, func(a, b *command) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// done says whether the nodes' reports show cmd's effect.
func (c *Coordinator) done(cmd *command) bool {
	if cmd.Kind == cluster.Delete {
		r, has := c.replicas[cmd.Container][cmd.Target]
		return !has || r.Index != cmd.Index
	}
	for _, n := range cmd.Gains() {
		if _, has := c.replicas[cmd.Container][n]; !has {
			return false
		}
	}
	return true
}

// Cycle is one run of the replication manager.
func (c *Coordinator) Cycle() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	start := c.cfg.Now()
	c.health(start)
	var finished, dead []uint64
	for id, cmd := range c.commands {
		if c.done(cmd) {
			finished = append(finished, id)
		} else if n := c.nodes[cmd.Node]; n != nil && n.health == cluster.Dead {
			// Its node will neither run it nor report it: Decide
			// issues it again from a node alive.
			c.cfg.Log.Warn("command dropped: its node is DEAD", "command", cmd.Command.Command.String(), "node", cmd.Node)
			dead = append(dead, id)
		}
	}
	if err := c.forget(finished); err != nil {
		return err
	}
	if err := c.drop(dead, NodeDead); err != nil {
		return err
	}
	cfg := c.cfg.Decide
	cfg.Now = start
	d, err := cluster.Decide(c.state(), cfg)
	if err != nil {
		return err
	}
	var expired []uint64
	for _, e := range d.Expired {
		for id, cmd := range c.commands {
			if cmd.Kind == e.Kind && cmd.Container == e.Container && cmd.Target == e.Target {
				c.cfg.Log.Warn("command expired", "command", cmd.Command.Command.String(), "node", cmd.Node)
				expired = append(expired, id)
			}
		}
	}
	if err := c.drop(expired, Expired); err != nil {
		return err
	}
	for _, t := range d.Transitions {
		n := c.nodes[t.Node]
		if n == nil {
			continue
		}
		rec := n.Node
		rec.OpState = t.To
		if t.To == cluster.InService {
			rec.MaintenanceEnd = time.Time{}
		}
		if err := c.cfg.Store.PutNode(rec); err != nil {
			return err
		}
		n.Node = rec
		c.cfg.Log.Info("node state", "node", t.Node, "from", t.From, "to", t.To)
	}
	if len(d.Commands) > 0 {
		cmds := make([]store.Command, len(d.Commands))
		for i, dc := range d.Commands {
			cmds[i] = store.Command{Node: dc.Node(), Command: dc}
		}
		if cmds, err = c.cfg.Store.AddCommands(cmds); err != nil {
			return err
		}
		for _, cmd := range cmds {
			c.commands[cmd.ID] = &command{Command: cmd}
			c.issued[cmd.Kind]++
		}
	}
	c.last = d
	c.lastCycle = start
	c.lastDur = c.cfg.Now().Sub(start)
	return nil
}

// forget drops commands from the store and memory. mu is held.
func (c *Coordinator) forget(ids []uint64) error {
	if len(ids) == 0 {
		return nil
	}
	if err := c.cfg.Store.RemoveCommands(ids); err != nil {
		return err
	}
	for _, id := range ids {
		delete(c.commands, id)
	}
	return nil
}

// drop forgets pending commands that did not finish, for why, and
// counts them. mu is held.
func (c *Coordinator) drop(ids []uint64, why Why) error {
	kinds := make([]cluster.Kind, 0, len(ids))
	for _, id := range ids {
		if cmd := c.commands[id]; cmd != nil {
			kinds = append(kinds, cmd.Kind)
		}
	}
	if err := c.forget(ids); err != nil {
		return err
	}
	for _, k := range kinds {
		c.dropped[Drop{Kind: k, Why: why}]++
	}
	return nil
}

// Beat is one heartbeat, as the service receives it.
type Beat struct {
	Node     store.Node // OpState and MaintenanceEnd are ignored
	InFlight int
	Full     bool
	Replicas []ReplicaReport
	Removed  []cluster.ContainerID
	Results  []Result
}

// ReplicaReport is one container a node reports.
type ReplicaReport struct {
	cluster.Replica
	Replication cluster.Replication
	Bytes       int64
}

// Result is the outcome of a command a node ran: Err "" for success.
type Result struct {
	Command uint64
	Err     string
}

// Reply is what a heartbeat gets back.
type Reply struct {
	Commands []store.Command
	SendFull bool
	OpState  cluster.OpState
}

// Heartbeat takes in a node's heartbeat and returns the commands for it.
func (c *Coordinator) Heartbeat(b Beat) (Reply, error) {
	id := b.Node.ID
	if id == "" || b.Node.Addr == "" {
		return Reply{}, fmt.Errorf("heartbeat: node id and address are required: %w", ErrInvalid)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.cfg.Now()
	n := c.nodes[id]
	if n == nil {
		n = &node{Node: store.Node{ID: id, OpState: cluster.InService}}
		c.nodes[id] = n
		c.cfg.Log.Info("node joined", "node", id, "addr", b.Node.Addr, "rack", b.Node.Rack)
	}
	if n.Addr != b.Node.Addr || n.Rack != b.Node.Rack || !n.reported {
		rec := n.Node
		rec.Addr, rec.Rack, rec.UsedBytes, rec.FreeBytes = b.Node.Addr, b.Node.Rack, b.Node.UsedBytes, b.Node.FreeBytes
		if err := c.cfg.Store.PutNode(rec); err != nil {
			return Reply{}, err
		}
		n.Node = rec
	}
	n.UsedBytes, n.FreeBytes, n.inFlight, n.lastSeen = b.Node.UsedBytes, b.Node.FreeBytes, b.InFlight, now
	if n.health != cluster.Healthy {
		c.cfg.Log.Info("node health", "node", id, "from", n.health, "to", cluster.Healthy)
		n.health = cluster.Healthy
	}
	reply := Reply{OpState: n.OpState}
	if !b.Full && !n.reported {
		reply.SendFull = true // an incremental report against nothing
	} else if err := c.report(n, b); err != nil {
		return Reply{}, err
	}
	var failed []uint64
	for _, r := range b.Results {
		cmd := c.commands[r.Command]
		if cmd == nil || r.Err == "" {
			continue // done: the reports show it
		}
		c.cfg.Log.Warn("command failed", "command", cmd.Command.Command.String(), "node", id, "err", r.Err)
		failed = append(failed, r.Command)
	}
	if err := c.drop(failed, Failed); err != nil {
		return Reply{}, err
	}
	for _, cmd := range c.sortedCommands() {
		// One the reports show done (a coordinator resumed from the
		// store before its cycle forgot it) is not sent again.
		if cmd.Node == id && !cmd.sent && !c.done(cmd) {
			cmd.sent = true
			reply.Commands = append(reply.Commands, cmd.Command)
		}
	}
	return reply, nil
}

// report applies a heartbeat's container report. mu is held.
func (c *Coordinator) report(n *node, b Beat) error {
	r := store.Report{Node: n.ID, Full: b.Full, Removed: b.Removed}
	changed := false
	seen := make(map[cluster.ContainerID]bool, len(b.Replicas))
	for _, rr := range b.Replicas {
		rep := rr.Replica
		rep.Node = n.ID
		seen[rep.Container] = true
		r.Replicas = append(r.Replicas, rep)
		if old, ok := c.replicas[rep.Container][n.ID]; !ok || old != rep {
			changed = true
		}
		ct, ok := c.containers[rep.Container]
		switch {
		case !ok:
			ct = cluster.Container{ID: rep.Container, Replication: rr.Replication, State: rep.State, Bytes: rr.Bytes}
		case ct.State != cluster.Closed && rep.State == cluster.Closed:
			ct.State, ct.Bytes = cluster.Closed, rr.Bytes
		default:
			continue
		}
		if ct.State != cluster.Closed && ct.State != cluster.Open && ct.State != cluster.Closing {
			// A copy RECOVERING or UNHEALTHY says nothing of the
			// container itself, which was CLOSED to be copied.
			ct.State = cluster.Closed
		}
		r.Containers = append(r.Containers, ct)
	}
	var gone []cluster.ContainerID
	if b.Full {
		for id, m := range c.replicas {
			if _, ok := m[n.ID]; ok && !seen[id] {
				gone = append(gone, id)
			}
		}
	} else {
		for _, id := range b.Removed {
			if _, ok := c.replicas[id][n.ID]; ok {
				gone = append(gone, id)
			}
		}
	}
	if !changed && len(gone) == 0 && len(r.Containers) == 0 && n.reported {
		return nil
	}
	if err := c.cfg.Store.Report(r); err != nil {
		return err
	}
	n.reported = n.reported || b.Full
	for _, id := range gone {
		c.dropReplica(id, n.ID)
	}
	for _, rep := range r.Replicas {
		c.setReplica(rep)
	}
	for _, ct := range r.Containers {
		c.containers[ct.ID] = ct
	}
	return nil
}

// SetOpState is the operator's decommission, maintenance (until end;
// zero: until recommissioned) or recommission of a node.
func (c *Coordinator) SetOpState(id cluster.NodeID, to cluster.OpState, end time.Time) (NodeStatus, error) {
	switch to {
	case cluster.InService, cluster.Decommissioning, cluster.EnteringMaintenance:
	default:
		return NodeStatus{}, fmt.Errorf("node %s: the operator sets IN_SERVICE, DECOMMISSIONING or ENTERING_MAINTENANCE, not %s: %w", id, to, ErrInvalid)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.nodes[id]
	if n == nil {
		return NodeStatus{}, fmt.Errorf("node %s: %w", id, ErrNotFound)
	}
	rec := n.Node
	rec.OpState, rec.MaintenanceEnd = to, time.Time{}
	if to == cluster.EnteringMaintenance {
		rec.MaintenanceEnd = end
	}
	if to == cluster.EnteringMaintenance && (n.OpState == cluster.InMaintenance) {
		rec.OpState = cluster.InMaintenance // a new end for a node already there
	}
	if err := c.cfg.Store.PutNode(rec); err != nil {
		return NodeStatus{}, err
	}
	c.cfg.Log.Info("node state", "node", id, "from", n.OpState, "to", rec.OpState, "by", "operator")
	n.Node = rec
	return c.nodeStatus(n), nil
}

// NodeStatus is a node as admin shows it.
type NodeStatus struct {
	store.Node
	Health     cluster.Health
	LastSeen   time.Time
	Containers int
}

func (c *Coordinator) nodeStatus(n *node) NodeStatus {
	s := NodeStatus{Node: n.Node, Health: n.health, LastSeen: n.lastSeen}
	for _, m := range c.replicas {
		if _, ok := m[n.ID]; ok {
			s.Containers++
		}
	}
	return s
}

// Nodes lists the nodes by id, their health as of now.
func (c *Coordinator) Nodes() []NodeStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.health(c.cfg.Now())
	var out []NodeStatus
	for _, n := range c.nodes {
		out = append(out, c.nodeStatus(n))
	}
	slices.SortFunc(out, func(a, b NodeStatus) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// ContainerStatus is a container as admin shows it.
type ContainerStatus struct {
	cluster.Container
	Class    cluster.Class
	Reason   string
	Replicas []cluster.Replica
}

// Containers lists the containers by id, each classified as of now.
func (c *Coordinator) Containers() ([]ContainerStatus, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.cfg.Now()
	c.health(now)
	s := c.state()
	cfg := c.cfg.Decide
	cfg.Now = now
	out := make([]ContainerStatus, 0, len(s.Containers))
	r := 0
	for _, ct := range s.Containers {
		lo := r
		for r < len(s.Replicas) && s.Replicas[r].Container == ct.ID {
			r++
		}
		st, err := cluster.Classify(ct, s.Replicas[lo:r], s.Nodes, cfg)
		if err != nil {
			return nil, err
		}
		out = append(out, ContainerStatus{Container: ct, Class: st.Class, Reason: st.Reason, Replicas: s.Replicas[lo:r]})
	}
	return out, nil
}

// Status is the cluster in numbers.
type Status struct {
	Nodes, Containers int
	Pending           int
	LastCycle         time.Time
	LastCycleDuration time.Duration
	Leader            string
	// Decision is the last cycle's: classes, waiting.
	Decision cluster.Decision
	// NodeStates counts the nodes by health (as of the call) and
	// operational state; a pair no node is in is absent.
	NodeStates map[NodeState]int
	// Issued counts the commands the replication manager issued since
	// the coordinator started (New), by kind; Dropped those it dropped
	// unfinished since, by kind and why.
	Issued  map[cluster.Kind]uint64
	Dropped map[Drop]uint64
}

// NodeState is a node's health and operational state together.
type NodeState struct {
	Health  cluster.Health
	OpState cluster.OpState
}

// Status returns the counts of the last cycle, the nodes' states as of
// now, and the commands issued and dropped so far.
func (c *Coordinator) Status() Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.health(c.cfg.Now())
	states := make(map[NodeState]int)
	for _, n := range c.nodes {
		states[NodeState{Health: n.health, OpState: n.OpState}]++
	}
	return Status{
		Nodes: len(c.nodes), Containers: len(c.containers), Pending: len(c.commands),
		LastCycle: c.lastCycle, LastCycleDuration: c.lastDur, Leader: c.cfg.Leader, Decision: c.last,
		NodeStates: states, Issued: maps.Clone(c.issued), Dropped: maps.Clone(c.dropped),
	}
}
