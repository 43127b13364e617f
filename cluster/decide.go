package cluster

import (
	"cmp"
	"fmt"
	"slices"
)

// Decision is Decide's output.
type Decision struct {
	// Commands to send, most urgent first (Priority, then container id).
	Commands []Command
	// Transitions of nodes' operational states, by node id.
	Transitions []Transition
	// Classes counts the containers of each class.
	Classes [numClasses]int
	// Unrecoverable and Unmanaged list those containers by id, with why.
	Unrecoverable []Report
	Unmanaged     []Report
	// Waiting counts containers that need work and got no command this
	// cycle: no source or target free (node limits, space), or copies
	// still coming.
	Waiting int
	// Expired lists the pending commands past their deadline, which
	// Decide took as failed: the caller drops them.
	Expired []Command
}

// Report names a container Decide does not act on, and why.
type Report struct {
	Container ContainerID
	Reason    string
}

// Count returns how many containers were of class c.
func (d *Decision) Count(c Class) int { return d.Classes[c] }

// work is a container needing commands, found in the first pass.
type work struct {
	c          int32 // index in the sorted containers
	lo, hi     int32 // its replicas
	redundancy int32
	class      Class
}

// decider holds one Decide call's working state.
type decider struct {
	*topo
	cfg     Config
	load    []int   // commands in flight per node, as charged
	free    []int64 // free bytes per node, less what this cycle placed
	blocked []bool  // a container still depends on the node
	pending map[ContainerID][]Command
	rackN   []int32 // an EC container's indexes per rack, as this cycle places them
	a       analysis
	out     Decision
}

// Decide looks at the whole cluster and says what to do: which
// containers to copy where, which replicas to delete, which nodes change
// operational state. It is a pure function of its input: the same state
// and config give the same decision. It refuses a config that fails
// Validate, and nodes without an id or listed twice.
func Decide(s State, cfg Config) (Decision, error) {
	if err := cfg.Validate(); err != nil {
		return Decision{}, fmt.Errorf("decide: %w", err)
	}
	t, err := newTopo(s.Nodes)
	if err != nil {
		return Decision{}, fmt.Errorf("decide: %w", err)
	}
	d := &decider{
		topo:    t,
		cfg:     cfg,
		load:    make([]int, len(t.nodes)),
		free:    make([]int64, len(t.nodes)),
		blocked: make([]bool, len(t.nodes)),
	}
	for i, n := range t.nodes {
		d.free[i] = n.FreeBytes
	}
	d.takePending(s.Pending)

	containers := s.Containers
	if !slices.IsSortedFunc(containers, func(a, b Container) int { return cmp.Compare(a.ID, b.ID) }) {
		containers = slices.Clone(containers)
		slices.SortStableFunc(containers, func(a, b Container) int { return cmp.Compare(a.ID, b.ID) })
	}
	replicas := s.Replicas
	byContainer := func(a, b Replica) int { return cmp.Compare(a.Container, b.Container) }
	if !slices.IsSortedFunc(replicas, byContainer) {
		replicas = slices.Clone(replicas)
		slices.SortStableFunc(replicas, byContainer)
	}

	// First pass: classify everything, note what needs work and which
	// nodes containers still depend on.
	var todo []work
	r := 0
	for ci := range containers {
		c := &containers[ci]
		for r < len(replicas) && replicas[r].Container < c.ID {
			r++ // replicas of containers the coordinator does not know: not ours
		}
		lo := r
		for r < len(replicas) && replicas[r].Container == c.ID {
			r++
		}
		d.analyze(c, replicas[lo:r], d.pending[c.ID], &d.cfg, &d.a)
		a := &d.a
		d.out.Classes[a.Class]++
		switch a.Class {
		case Unrecoverable:
			d.out.Unrecoverable = append(d.out.Unrecoverable, Report{c.ID, a.Reason})
		case Unmanaged:
			d.out.Unmanaged = append(d.out.Unmanaged, Report{c.ID, a.Reason})
		case UnderReplicated, MisReplicated, OverReplicated:
			todo = append(todo, work{int32(ci), int32(lo), int32(r), int32(a.Redundancy), a.Class})
		}
		if a.ec {
			for _, n := range a.block {
				d.blocked[n] = true
			}
		} else if !a.sufficient() {
			for _, n := range a.depends {
				d.blocked[n] = true
			}
		}
	}

	// Second pass: the fewest copies first.
	slices.SortFunc(todo, func(x, y work) int {
		return cmp.Or(cmp.Compare(x.redundancy, y.redundancy), cmp.Compare(x.class, y.class), cmp.Compare(x.c, y.c))
	})
	for _, w := range todo {
		c := &containers[w.c]
		d.analyze(c, replicas[w.lo:w.hi], d.pending[c.ID], &d.cfg, &d.a)
		before := len(d.out.Commands)
		switch {
		case d.a.ec:
			d.ec(c)
		case d.a.Class == UnderReplicated:
			d.replicate(c, d.a.Needed-(len(d.a.inService)+d.a.stale+d.a.coming), false)
		case d.a.Class == MisReplicated:
			d.replicate(c, d.a.WantRacks-d.a.Racks, true)
		case d.a.Class == OverReplicated:
			d.remove(c)
		}
		if len(d.out.Commands) == before {
			d.out.Waiting++
		}
	}
	d.transitions()
	slices.SortStableFunc(d.out.Commands, func(x, y Command) int {
		return cmp.Or(cmp.Compare(y.Priority, x.Priority), cmp.Compare(x.Container, y.Container),
			cmp.Compare(x.Kind, y.Kind), cmp.Compare(x.Target, y.Target))
	})
	return d.out, nil
}

// takePending indexes the live pending commands by container and charges
// them to their nodes; expired ones are reported.
func (d *decider) takePending(pending []Command) {
	d.pending = make(map[ContainerID][]Command)
	count := make([]int, len(d.nodes))
	for _, p := range pending {
		if !d.cfg.Now.Before(p.Deadline) {
			d.out.Expired = append(d.out.Expired, p)
			continue
		}
		d.pending[p.Container] = append(d.pending[p.Container], p)
		charge := func(n NodeID) {
			if i, ok := d.idx[n]; ok {
				count[i]++
			}
		}
		switch p.Kind {
		case Replicate:
			charge(p.Target)
			if len(p.Sources) > 0 {
				charge(p.Sources[0])
			}
		case Encode:
			if len(p.Sources) > 0 {
				charge(p.Sources[0])
			}
			for _, n := range p.Targets {
				charge(n)
			}
		case Reconstruct:
			// Every source serves cells, in either mode.
			for _, n := range slices.Concat(p.Sources, p.Targets) {
				charge(n)
			}
		}
	}
	// A node's own count and the coordinator's describe the same work,
	// seen at different times: take the larger, not the sum.
	for i := range d.nodes {
		d.load[i] = max(d.nodes[i].InFlight, count[i])
	}
}

func (d *decider) limit(i int32) int {
	if d.nodes[i].OpState == Decommissioning {
		return 2 * d.cfg.NodeLimit
	}
	return d.cfg.NodeLimit
}

// replicate sends up to want copies of c to new nodes; onNewRack: only
// to racks the copies do not use yet (mis-replication).
func (d *decider) replicate(c *Container, want int, onNewRack bool) {
	a := &d.a
	for range want {
		src := d.source()
		if src < 0 {
			return
		}
		// Off the racks in use only if none could take it later, or if this
		// is the last copy: waiting costs less than copying twice.
		dst := d.target(c, onNewRack || (a.Redundancy > 0 && d.newRackExists(c)))
		if dst < 0 {
			return
		}
		sources := make([]NodeID, 0, len(a.sources))
		sources = append(sources, d.nodes[src].ID)
		for _, s := range a.sources {
			if s != src {
				sources = append(sources, d.nodes[s].ID)
			}
		}
		mode := Pull
		if d.cfg.Push {
			mode = Push
		}
		d.out.Commands = append(d.out.Commands, Command{
			Kind: Replicate, Container: c.ID, Target: d.nodes[dst].ID, Sources: sources, Mode: mode,
			Priority: a.priority, Deadline: d.cfg.Now.Add(d.cfg.Timeout),
		})
		d.load[src]++
		d.load[dst]++
		d.free[dst] -= c.Bytes
		a.holders = append(a.holders, dst)
		a.used = addOnce(a.used, d.rack[dst])
	}
}

// source picks the copy to read from: the most spare capacity for its
// limit, then in the order analyze listed them (in service first).
func (d *decider) source() int32 {
	best, bestSpare := int32(-1), 0.0
	for _, s := range d.a.sources {
		l := d.limit(s)
		if d.load[s] >= l {
			continue
		}
		spare := float64(l-d.load[s]) / float64(l)
		if best < 0 || spare > bestSpare {
			best, bestSpare = s, spare
		}
	}
	return best
}

// target picks a healthy in-service node for a new copy: one not holding
// the container, under its limit, with room for the import (twice the
// container, as peer reserves); on a rack the copies do not use if there
// is one (required when onNewRack), then the most free space, the least
// load, the lowest id.
func (d *decider) target(c *Container, onNewRack bool) int32 {
	a := &d.a
	best, bestNew := int32(-1), false
	for _, i := range d.targets {
		if d.load[i] >= d.limit(i) || d.free[i] < 2*c.Bytes || slices.Contains(a.holders, i) {
			continue
		}
		isNew := !slices.Contains(a.used, d.rack[i])
		if onNewRack && !isNew {
			continue
		}
		if best < 0 || (isNew && !bestNew) ||
			(isNew == bestNew && (d.free[i] > d.free[best] || (d.free[i] == d.free[best] && d.load[i] < d.load[best]))) {
			best, bestNew = i, isNew
		}
	}
	return best
}

// newRackExists reports whether a node that could take c, once it has
// capacity, is on a rack c's copies do not use.
func (d *decider) newRackExists(c *Container) bool {
	for _, i := range d.targets {
		if !slices.Contains(d.a.used, d.rack[i]) && !slices.Contains(d.a.holders, i) && d.nodes[i].FreeBytes >= 2*c.Bytes {
			return true
		}
	}
	return false
}

// remove deletes what c has too many of: bad replicas, once enough good
// copies are in service; then good copies beyond the replication, from
// the racks that hold the most, never breaking the rack spread.
func (d *decider) remove(c *Container) {
	a := &d.a
	del := func(i int32) {
		d.out.Commands = append(d.out.Commands, Command{Kind: Delete, Container: c.ID, Target: d.nodes[i].ID,
			Priority: a.priority, Deadline: d.cfg.Now.Add(d.cfg.Timeout)})
	}
	if a.InService >= a.Needed {
		for _, i := range a.bad {
			del(i)
		}
	}
	excess := a.InService - a.n
	if excess <= 0 || a.stale > 0 {
		return // a stale copy may be gone: keep the spare until it is known
	}
	// Copies per rack among those that stay: in service and in maintenance.
	perRack := map[int32]int{}
	for _, i := range a.inService {
		perRack[d.rack[i]]++
	}
	for _, r := range a.maintRacks {
		perRack[r]++
	}
	left := slices.Clone(a.inService)
	for range excess {
		best := -1
		for k, i := range left {
			n := perRack[d.rack[i]]
			if n == 1 && len(perRack) <= a.WantRacks {
				continue // the only copy on its rack: removing it narrows the spread
			}
			if best < 0 {
				best = k
				continue
			}
			b := left[best]
			if m := perRack[d.rack[b]]; n > m || (n == m && d.free[i] < d.free[b]) {
				best = k
			}
		}
		if best < 0 {
			return
		}
		i := left[best]
		del(i)
		if perRack[d.rack[i]]--; perRack[d.rack[i]] == 0 {
			delete(perRack, d.rack[i])
		}
		left = slices.Delete(left, best, best+1)
	}
}

// transitions moves nodes on: decommissioning ones that no container
// depends on any more, maintenance ones that are safe or whose time is up.
func (d *decider) transitions() {
	for i, n := range d.nodes {
		to := n.OpState
		switch {
		case n.OpState.maintenance() && !n.MaintenanceEnd.IsZero() && !d.cfg.Now.Before(n.MaintenanceEnd):
			to = InService
		case n.OpState == EnteringMaintenance && !d.blocked[i]:
			to = InMaintenance
		case n.OpState == Decommissioning && n.Health == Healthy && !d.blocked[i]:
			to = Decommissioned
		}
		if to != n.OpState {
			d.out.Transitions = append(d.out.Transitions, Transition{Node: n.ID, From: n.OpState, To: to})
		}
	}
}
