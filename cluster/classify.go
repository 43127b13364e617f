package cluster

import (
	"fmt"
	"slices"
	"strconv"
)

// Class is what a container needs.
type Class uint8

const (
	// Replicated (HEALTHY): enough good copies, spread over enough racks,
	// nothing to delete.
	Replicated Class = iota
	// UnderReplicated: fewer good copies, present and coming, than needed.
	UnderReplicated
	// MisReplicated: enough copies, on fewer racks than they could span.
	MisReplicated
	// OverReplicated: more good copies in service than the replication
	// asks for, or bad replicas to remove now that enough good ones exist.
	OverReplicated
	// Unrecoverable: no good copy left anywhere (EC: fewer than D
	// distinct indexes, no whole copy), or the copies disagree with no
	// majority; reported, never acted on.
	Unrecoverable
	// Unmanaged: not Decide's to handle (not CLOSED); left alone.
	Unmanaged
	numClasses
)

var classNames = [...]string{"HEALTHY", "UNDER_REPLICATED", "MIS_REPLICATED", "OVER_REPLICATED", "UNRECOVERABLE", "UNMANAGED"}

func (c Class) String() string {
	if c < numClasses {
		return classNames[c]
	}
	return "Class(" + strconv.Itoa(int(c)) + ")"
}

// Status is the classification of one container.
type Status struct {
	Class  Class
	Reason string // why, for Unrecoverable and Unmanaged
	// Redundancy is how many of the good copies online could be lost with
	// one left: copies-1, -1 with none (EC: distinct indexes online - D).
	// Fewest first is the work order.
	Redundancy int
	// InService counts good copies on healthy in-service nodes (EC:
	// distinct indexes); Needed is how many of those the container must
	// have.
	InService, Needed int
	// Racks is how many racks the copies span; WantRacks how many they
	// could (EC: the racks the indexes counted for the spread use, and
	// min(D+P, usable racks)).
	Racks, WantRacks int
}

// Reasons.
const (
	reasonNotClose = "container is not CLOSED"
	reasonNoCopy   = "no good replica left"
	reasonDispute  = "replica checksums disagree and none has a majority"
)

// topo is the cluster's nodes in the form Decide works with: nodes
// sorted by id, addressed by int32, racks as small ints.
type topo struct {
	nodes  []Node
	idx    map[NodeID]int32
	rack   []int32
	racks  int
	usable []bool // rack has a healthy in-service node
	// nUsable counts the usable racks
	nUsable int
	// targets are the healthy in-service nodes; rackRoom counts them by
	// rack.
	targets  []int32
	rackRoom []int
	// caps caches ecCap by indexes per container.
	caps map[int]int
}

func newTopo(nodes []Node) (*topo, error) {
	t := &topo{nodes: slices.Clone(nodes), idx: make(map[NodeID]int32, len(nodes))}
	slices.SortFunc(t.nodes, func(a, b Node) int {
		if a.ID < b.ID {
			return -1
		} else if a.ID > b.ID {
			return 1
		}
		return 0
	})
	rackIdx := map[string]int32{}
	t.rack = make([]int32, len(t.nodes))
	for i, n := range t.nodes {
		if n.ID == "" {
			return nil, fmt.Errorf("node %d has no id", i)
		}
		if _, dup := t.idx[n.ID]; dup {
			return nil, fmt.Errorf("node %s: listed twice", n.ID)
		}
		t.idx[n.ID] = int32(i)
		r, ok := rackIdx[n.Rack]
		if !ok {
			r = int32(len(rackIdx))
			rackIdx[n.Rack] = r
			t.usable = append(t.usable, false)
			t.rackRoom = append(t.rackRoom, 0)
		}
		t.rack[i] = r
		if n.Health == Healthy && n.OpState == InService {
			if !t.usable[r] {
				t.nUsable++
			}
			t.usable[r] = true
			t.rackRoom[r]++
			t.targets = append(t.targets, int32(i))
		}
	}
	t.racks = len(rackIdx)
	return t, nil
}

// analysis is what Decide learns of one container; its slices are
// reused from container to container.
type analysis struct {
	Status
	n, priority int
	managed     bool // false: Unmanaged or disputed, depends blocks
	// good copies on healthy in-service nodes: sources, deletable
	inService []int32
	// every node a copy may come from, inService first
	sources []int32
	// bad replicas that may be deleted (healthy nodes)
	bad []int32
	// nodes holding or about to hold the container: never targets
	holders []int32
	// racks of the copies that count toward spread
	used []int32
	// decommissioning and maintenance nodes holding a copy
	depends []int32
	// deletes pending
	deleting []int32
	// at: the node of each replica
	at []int32
	// racks of the good copies in maintenance
	maintRacks []int32
	// stale: good copies on stale nodes; coming: copies on their way
	stale, coming int
	// ec: an EC container, counted index by index in ecAnalysis
	ec bool
	ecAnalysis
}

func (a *analysis) reset() {
	a.Status = Status{}
	a.n, a.priority, a.managed, a.stale, a.coming, a.ec = 0, 0, false, 0, 0, false
	a.inService, a.sources, a.bad = a.inService[:0], a.sources[:0], a.bad[:0]
	a.holders, a.used, a.depends, a.deleting = a.holders[:0], a.used[:0], a.depends[:0], a.deleting[:0]
	a.maintRacks = a.maintRacks[:0]
}

func addOnce(s []int32, v int32) []int32 {
	if slices.Contains(s, v) {
		return s
	}
	return append(s, v)
}

// sufficient: the container needs none of its copies on decommissioning
// or maintenance nodes beyond what the maintenance rule keeps.
func (a *analysis) sufficient() bool { return a.managed && a.InService >= a.Needed }

// Classify says what one container needs, given its replicas and the
// nodes; Decide applies the same rules to every container at once.
func Classify(c Container, replicas []Replica, nodes []Node, cfg Config) (Status, error) {
	t, err := newTopo(nodes)
	if err != nil {
		return Status{}, err
	}
	var a analysis
	t.analyze(&c, replicas, nil, &cfg, &a)
	return a.Status, nil
}

// analyze fills a for container c, its replicas and its live pending
// commands.
func (t *topo) analyze(c *Container, reps []Replica, pending []Command, cfg *Config, a *analysis) {
	a.reset()
	for _, p := range pending {
		if i, ok := t.idx[p.Target]; ok {
			if p.Kind == Delete {
				a.deleting = addOnce(a.deleting, i)
			}
			a.holders = addOnce(a.holders, i)
		}
	}
	switch {
	case c.Replication.Type != Ratis && c.Replication.Type != EC || c.Replication.N == 0:
		a.Class, a.Reason = Unmanaged, "no replication config"
	case c.Replication.Type == EC && int(c.Replication.N)+int(c.Replication.Parity) > 255:
		a.Class, a.Reason = Unmanaged, "EC scheme of more than 255 indexes"
	case c.State != Closed:
		a.Class, a.Reason = Unmanaged, reasonNotClose
	}
	if a.Class == Unmanaged {
		for _, r := range reps {
			if i, ok := t.idx[r.Node]; ok && (t.nodes[i].OpState == Decommissioning || t.nodes[i].OpState.maintenance()) {
				a.depends = addOnce(a.depends, i)
			}
		}
		a.Redundancy = -1
		return
	}
	if c.Replication.Type == EC {
		t.analyzeEC(c, reps, pending, cfg, a)
		return
	}
	a.n = int(c.Replication.N)
	// Each replica's node, looked up once: -1 for a node the coordinator
	// forgot, which there is nothing to count on.
	a.at = a.at[:0]
	for _, r := range reps {
		i, ok := t.idx[r.Node]
		if !ok {
			i = -1
		}
		a.at = append(a.at, i)
	}
	ref, disputed := t.reference(c, reps, a.at)
	// away: good copies in maintenance on nodes offline, expected back
	live, future, maint, away := 0, 0, 0, 0
	for k, r := range reps {
		i := a.at[k]
		if i < 0 {
			continue
		}
		a.holders = addOnce(a.holders, i)
		if slices.Contains(a.deleting, i) {
			continue
		}
		nd := &t.nodes[i]
		closed := r.State == Closed
		good := closed && !disputed && r.Checksum == ref
		bad := r.State == Unhealthy || (closed && !disputed && !good)
		coming := r.State == Closing || r.State == Recovering
		switch {
		case nd.OpState.maintenance():
			if good || (closed && disputed) {
				a.depends = addOnce(a.depends, i)
			}
			if good {
				maint++
				a.used = addOnce(a.used, t.rack[i])
				a.maintRacks = append(a.maintRacks, t.rack[i])
				if nd.Health == Healthy {
					live++
					if nd.OpState == EnteringMaintenance {
						a.sources = append(a.sources, i)
					}
				} else {
					away++
				}
			}
		case nd.Health == Dead:
		case nd.Health == Stale:
			if good {
				a.stale++
				live++
				a.used = addOnce(a.used, t.rack[i])
			}
		case nd.OpState == InService:
			switch {
			case good:
				a.inService = append(a.inService, i)
				live++
				a.used = addOnce(a.used, t.rack[i])
			case bad:
				a.bad = append(a.bad, i)
			case coming:
				future++
				a.used = addOnce(a.used, t.rack[i])
			}
		case nd.OpState == Decommissioning:
			if good || (closed && disputed) {
				a.depends = addOnce(a.depends, i)
			}
			if good {
				live++
			} else if bad {
				a.bad = append(a.bad, i)
			}
		case nd.OpState == Decommissioned:
			if good {
				live++
			}
		}
	}
	// Sources: in service first, then entering maintenance (added above),
	// decommissioning, decommissioned; by node within each, so that the
	// order replicas come in changes nothing.
	slices.Sort(a.inService)
	slices.Sort(a.bad)
	slices.Sort(a.sources)
	a.sources = slices.Insert(a.sources, 0, a.inService...)
	for _, rank := range []OpState{Decommissioning, Decommissioned} {
		from := len(a.sources)
		for k, r := range reps {
			i := a.at[k]
			if i >= 0 && t.nodes[i].OpState == rank && t.nodes[i].Health == Healthy && r.State == Closed &&
				!disputed && r.Checksum == ref && !slices.Contains(a.deleting, i) {
				a.sources = addOnce(a.sources, i)
			}
		}
		slices.Sort(a.sources[from:])
	}
	for _, p := range pending {
		if p.Kind != Replicate {
			continue
		}
		i, ok := t.idx[p.Target]
		if !ok || slices.ContainsFunc(reps, func(r Replica) bool { return r.Node == p.Target }) {
			continue
		}
		if nd := &t.nodes[i]; nd.Health == Healthy && nd.OpState == InService {
			future++
			a.used = addOnce(a.used, t.rack[i])
		}
	}

	a.coming = future
	a.InService = len(a.inService)
	a.Redundancy = live - 1
	a.priority = max(0, a.n-live)
	a.Needed = a.n
	if maint > 0 {
		a.Needed = max(a.n-maint, min(a.n, 1+cfg.MaintenanceRemainingRedundancy))
	}
	a.Racks = len(a.used)
	span := a.Racks
	for r, ok := range t.usable {
		if ok && !slices.Contains(a.used, int32(r)) {
			span++
		}
	}
	a.WantRacks = min(a.n, span)
	a.managed = !disputed
	have := len(a.inService) + a.stale + future
	switch {
	case disputed:
		a.Class, a.Reason = Unrecoverable, reasonDispute
	case live == 0 && future == 0 && away == 0:
		a.Class, a.Reason = Unrecoverable, reasonNoCopy
	case have < a.Needed:
		a.Class = UnderReplicated
	case a.Racks < a.WantRacks:
		a.Class = MisReplicated
	case (a.InService > a.n && a.stale == 0) || (len(a.bad) > 0 && a.InService >= a.Needed):
		a.Class = OverReplicated
	default:
		a.Class = Replicated
	}
}

// reference is the checksum a good replica has: the container's own if
// the coordinator recorded one, else the one most CLOSED replicas on
// nodes not lost agree on; disputed when two lead with the same count.
func (t *topo) reference(c *Container, reps []Replica, at []int32) (ref uint64, disputed bool) {
	if c.Checksum != 0 {
		return c.Checksum, false
	}
	var sums [8]struct {
		v uint64
		n int
	}
	k := 0
	for x, r := range reps {
		i := at[x]
		if i < 0 || r.State != Closed || (t.nodes[i].Health == Dead && !t.nodes[i].OpState.maintenance()) {
			continue
		}
		j := 0
		for j < k && sums[j].v != r.Checksum {
			j++
		}
		if j == k {
			if k == len(sums) {
				continue // more distinct sums than that: the leaders are among the first
			}
			sums[k].v, sums[k].n = r.Checksum, 0
			k++
		}
		sums[j].n++
	}
	best, tie := -1, false
	for j := range k {
		switch {
		case best < 0 || sums[j].n > sums[best].n:
			best, tie = j, false
		case sums[j].n == sums[best].n:
			tie = true
		}
	}
	if best < 0 {
		return 0, false
	}
	return sums[best].v, tie
}

// ecCap is the most indexes of a container of total indexes a rack
// should hold: ⌈total/racks⌉ over the usable racks (at most total), or
// more when some racks have too few healthy in-service nodes for that
// (nodes down): the fewest per rack that still lets every index have a
// node of its own. 0: no usable rack.
func (t *topo) ecCap(total int) int {
	if t.nUsable == 0 || total <= 0 {
		return 0
	}
	if c, ok := t.caps[total]; ok {
		return c
	}
	racks := min(total, t.nUsable)
	m := (total + racks - 1) / racks
	for {
		sum, most := 0, 0
		for _, n := range t.rackRoom {
			sum, most = sum+min(m, n), max(most, n)
		}
		if sum >= total || m >= most {
			break
		}
		m++
	}
	if t.caps == nil {
		t.caps = make(map[int]int)
	}
	t.caps[total] = m
	return m
}
