package cluster

import (
	"cmp"
	"fmt"
	"slices"
)

// ecIndex counts the good copies of one EC index (0: the whole copy).
type ecIndex struct {
	// good copies on healthy nodes: in service; decommissioning or
	// decommissioned (sources of last resort, in that order); entering
	// maintenance (sources)
	inService, decom, entering []int32
	// copies on their way, on healthy in-service nodes: CLOSING or
	// RECOVERING replicas, pending commands that gain the index
	coming []int32
	// bad replicas on healthy in-service or decommissioning nodes
	bad []int32
	// good copies in maintenance (entering ones too), of which away are
	// on nodes not healthy; good copies on stale nodes
	maint, away, stale int
}

func (x *ecIndex) reset() {
	x.inService, x.decom, x.entering = x.inService[:0], x.decom[:0], x.entering[:0]
	x.coming, x.bad = x.coming[:0], x.bad[:0]
	x.maint, x.away, x.stale = 0, 0, 0
}

// live: a good copy online that is no source of doubt: anything but
// copies in maintenance on nodes gone quiet, and copies coming.
func (x *ecIndex) live() bool {
	return len(x.inService)+len(x.decom)+x.stale+x.maint-x.away > 0
}

func (x *ecIndex) online() bool { return x.live() || x.away > 0 }

// held: the index has or gets a copy in service, or one that is only late.
func (x *ecIndex) held() bool { return len(x.inService)+len(x.coming)+x.stale > 0 }

// ecAnalysis is what analyze learns of an EC container besides Status.
type ecAnalysis struct {
	d, total int
	ix       []ecIndex // by index, 0…total
	// replicas with an index beyond total, deletable: node and index
	outOfRange []ecReplica
	// nodes the container still needs in their operational state
	block []int32
	// busy: sources of pending commands, never deleted under them
	busy []int32
	// missing indexes: no good copy online, none coming
	missing []uint8
	// placed: a command of this cycle gains the index
	placed []bool
	// stay is the copy of each index that counts for the rack spread (in
	// service or coming; -1: none), stayComing says it is a coming one;
	// rackN counts the stays per rack, waitRacks the racks of the good
	// copies stale or in maintenance of indexes with no stay.
	stay       []int32
	stayComing []bool
	rackN      []int32
	waitRacks  []int32
	// cap is the most indexes a rack should hold; 0: no usable rack
	cap int
	// wantInService is what the maintenance rule keeps in service while
	// copies are in maintenance (0: none are)
	wantInService int
	wholeSource   bool // the whole copy is on a node that can encode it
	allInService  bool // every index 1…total has a good copy in service
}

type ecReplica struct {
	node  int32
	index uint8
}

func (e *ecAnalysis) reset(d, total, racks int) {
	e.d, e.total = d, total
	if cap(e.ix) < total+1 {
		e.ix = make([]ecIndex, total+1)
		e.placed = make([]bool, total+1)
		e.stay = make([]int32, total+1)
		e.stayComing = make([]bool, total+1)
	}
	e.ix, e.placed = e.ix[:total+1], e.placed[:total+1]
	e.stay, e.stayComing = e.stay[:total+1], e.stayComing[:total+1]
	for i := range e.ix {
		e.ix[i].reset()
		e.placed[i], e.stay[i], e.stayComing[i] = false, -1, false
	}
	if cap(e.rackN) < racks {
		e.rackN = make([]int32, racks)
	}
	e.rackN = e.rackN[:racks]
	clear(e.rackN)
	e.outOfRange, e.block, e.busy = e.outOfRange[:0], e.block[:0], e.busy[:0]
	e.missing, e.waitRacks = e.missing[:0], e.waitRacks[:0]
	e.cap, e.wantInService, e.wholeSource, e.allInService = 0, 0, false, false
}

// analyzeEC fills a for EC container c (CLOSED, a usable scheme); a's
// deleting and holders already hold what pending says.
func (t *topo) analyzeEC(c *Container, reps []Replica, pending []Command, cfg *Config, a *analysis) {
	d, p := int(c.Replication.N), int(c.Replication.Parity)
	total := d + p
	e := &a.ecAnalysis
	e.reset(d, total, t.racks)
	a.ec, a.n = true, total
	a.at = a.at[:0]
	for _, r := range reps {
		i, ok := t.idx[r.Node]
		if !ok {
			i = -1
		}
		a.at = append(a.at, i)
	}
	ref, disputed := t.reference(c, reps, a.at)
	for _, pc := range pending {
		for _, g := range pc.Targets {
			if i, ok := t.idx[g]; ok {
				a.holders = addOnce(a.holders, i)
			}
		}
		for _, g := range pc.Sources {
			if i, ok := t.idx[g]; ok {
				e.busy = addOnce(e.busy, i)
			}
		}
	}
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
		if disputed && closed && (nd.OpState == Decommissioning || nd.OpState.maintenance()) {
			e.block = addOnce(e.block, i)
		}
		if int(r.Index) > total {
			if nd.Health == Healthy && (nd.OpState == InService || nd.OpState == Decommissioning) {
				e.outOfRange = append(e.outOfRange, ecReplica{i, r.Index})
			}
			continue
		}
		x := &e.ix[r.Index]
		switch {
		case nd.OpState.maintenance():
			if good {
				x.maint++
				if r.Index > 0 {
					e.waitRacks = append(e.waitRacks, int32(r.Index), t.rack[i])
				}
				if nd.Health != Healthy {
					x.away++
				} else if nd.OpState == EnteringMaintenance {
					x.entering = append(x.entering, i)
				}
			}
		case nd.Health == Dead:
		case nd.Health == Stale:
			if good {
				x.stale++
				if r.Index > 0 {
					e.waitRacks = append(e.waitRacks, int32(r.Index), t.rack[i])
				}
			}
		case nd.OpState == InService:
			switch {
			case good:
				x.inService = append(x.inService, i)
			case bad:
				x.bad = append(x.bad, i)
			case r.State == Closing || r.State == Recovering:
				x.coming = append(x.coming, i)
			}
		case nd.OpState == Decommissioning || nd.OpState == Decommissioned:
			if good {
				x.decom = append(x.decom, i)
			} else if bad && nd.OpState == Decommissioning {
				x.bad = append(x.bad, i)
			}
		}
	}
	for _, pc := range pending {
		switch pc.Kind {
		case Replicate:
			t.ecComing(e, reps, pc.Target, pc.Index)
		case Encode, Reconstruct:
			for k, g := range pc.Targets {
				if k < len(pc.Indexes) {
					t.ecComing(e, reps, g, pc.Indexes[k])
				}
			}
		}
	}
	// By node within each list, so that the order replicas come in
	// changes nothing; decommissioning before decommissioned.
	for i := range e.ix {
		x := &e.ix[i]
		slices.Sort(x.inService)
		slices.Sort(x.entering)
		slices.Sort(x.coming)
		slices.Sort(x.bad)
		slices.SortFunc(x.decom, func(u, v int32) int {
			return cmp.Or(cmp.Compare(t.nodes[u].OpState, t.nodes[v].OpState), cmp.Compare(u, v))
		})
	}

	live, online, inService, maintOnly, anyComing, anyMaint := 0, 0, 0, 0, false, e.ix[0].maint > 0
	e.allInService = true
	for i := 1; i <= total; i++ {
		x := &e.ix[i]
		if x.live() {
			live++
		}
		if x.online() {
			online++
		} else if len(x.coming) == 0 {
			e.missing = append(e.missing, uint8(i))
		}
		if len(x.inService) > 0 {
			inService++
		} else {
			e.allInService = false
		}
		if x.maint > 0 {
			anyMaint = true
			if len(x.inService) == 0 {
				maintOnly++
			}
		}
		anyComing = anyComing || len(x.coming) > 0
	}
	whole := &e.ix[0]
	e.wholeSource = len(whole.inService)+len(whole.decom)+len(whole.entering) > 0
	wholeLive := whole.live()

	a.managed = !disputed
	a.InService = inService
	a.Needed = total
	if anyMaint {
		e.wantInService = min(total, d+cfg.MaintenanceRemainingRedundancy)
		a.Needed = max(total-maintOnly, e.wantInService)
	}
	a.Redundancy = live - d
	if wholeLive {
		a.Redundancy = max(0, a.Redundancy)
	}
	a.priority = max(0, p-a.Redundancy)
	t.spread(a)

	// Blocking: a decommissioning node while an index it holds has no
	// copy in service (the whole copy: until every index has one); a
	// maintenance node while the container is short of the maintenance
	// rule and nothing in service stands in for its index.
	short := e.wantInService > inService
	for k, r := range reps {
		i := a.at[k]
		if i < 0 || disputed || slices.Contains(a.deleting, i) || int(r.Index) > total ||
			r.State != Closed || r.Checksum != ref {
			continue
		}
		switch st := t.nodes[i].OpState; {
		case st == Decommissioning && r.Index == 0 && !e.allInService,
			st == Decommissioning && r.Index > 0 && len(e.ix[r.Index].inService) == 0,
			st.maintenance() && short && (r.Index == 0 || len(e.ix[r.Index].inService) == 0):
			e.block = addOnce(e.block, i)
		}
	}

	under := len(e.missing) > 0
	for i := 1; i <= total && !under; i++ {
		x := &e.ix[i]
		under = len(x.decom) > 0 && !x.held()
	}
	if !under && e.wantInService > 0 {
		held := 0
		for i := 1; i <= total; i++ {
			if e.ix[i].held() {
				held++
			}
		}
		under = held < e.wantInService
	}
	mis := false
	for _, n := range e.rackN {
		mis = mis || (e.cap > 0 && int(n) > e.cap)
	}
	switch {
	case disputed:
		a.Class, a.Reason = Unrecoverable, reasonDispute
	case !whole.online() && online < d && !anyComing:
		a.Class, a.Reason = Unrecoverable, fmt.Sprintf("%d of %d+%d indexes left, %d needed to rebuild", online, d, p, d)
	case under:
		a.Class = UnderReplicated
	case mis:
		a.Class = MisReplicated
	case t.overReplicated(e):
		a.Class = OverReplicated
	default:
		a.Class = Replicated
	}
}

// ecComing counts a pending command's copy of index i on node g as
// coming, unless g reports a replica already (counted as it is) or is no
// place for a copy.
func (t *topo) ecComing(e *ecAnalysis, reps []Replica, g NodeID, index uint8) {
	i, ok := t.idx[g]
	if !ok || int(index) > e.total || slices.ContainsFunc(reps, func(r Replica) bool { return r.Node == g }) {
		return
	}
	if nd := &t.nodes[i]; nd.Health == Healthy && nd.OpState == InService && !slices.Contains(e.ix[index].coming, i) {
		e.ix[index].coming = append(e.ix[index].coming, i)
	}
}

// spread picks the copy of each index that counts for the rack spread:
// an index's only copy in service or coming where it is; of several, the
// one on the rack holding the fewest so far, in service before coming,
// then on the node with the most free space. The others are the extras
// over-replication deletes.
func (t *topo) spread(a *analysis) {
	e := &a.ecAnalysis
	for pass := range 2 {
		for i := 1; i <= e.total; i++ {
			x := &e.ix[i]
			n := len(x.inService) + len(x.coming)
			if n == 0 || (pass == 0) != (n == 1) {
				continue
			}
			best, bestComing := int32(-1), false
			for k := range n {
				node, coming := int32(0), k >= len(x.inService)
				if coming {
					node = x.coming[k-len(x.inService)]
				} else {
					node = x.inService[k]
				}
				if best < 0 {
					best, bestComing = node, coming
					continue
				}
				nr, br := e.rackN[t.rack[node]], e.rackN[t.rack[best]]
				if nr < br || (nr == br && (!coming && bestComing ||
					coming == bestComing && t.nodes[node].FreeBytes > t.nodes[best].FreeBytes)) {
					best, bestComing = node, coming
				}
			}
			e.stay[i], e.stayComing[i] = best, bestComing
			e.rackN[t.rack[best]]++
		}
	}
	racks := 0
	for _, n := range e.rackN {
		if n > 0 {
			racks++
		}
	}
	a.Racks = racks
	a.WantRacks = min(e.total, t.nUsable)
	e.cap = t.ecCap(e.total)
}

// overReplicated: an index has an extra copy in service and none stale,
// a bad replica has a good copy of its index in service to replace it, a
// replica's index is out of the scheme, or the whole copy is encoded.
func (t *topo) overReplicated(e *ecAnalysis) bool {
	if len(e.outOfRange) > 0 {
		return true
	}
	for i := 1; i <= e.total; i++ {
		x := &e.ix[i]
		if len(x.inService) > 0 && len(x.bad) > 0 || len(x.inService) > 1 && x.stale == 0 && !e.stayComing[i] {
			return true
		}
	}
	return e.allInService && len(t.wholeDeletable(e)) > 0
}

// wholeDeletable lists the whole copies (good and bad) a Delete can
// reach: on healthy in-service or decommissioning nodes.
func (t *topo) wholeDeletable(e *ecAnalysis) []int32 {
	x := &e.ix[0]
	out := slices.Concat(x.inService, x.bad)
	for _, i := range x.decom {
		if t.nodes[i].OpState == Decommissioning {
			out = append(out, i)
		}
	}
	return out
}

// indexBytes is the largest index of c: its first data index, ⌈stripes⌉
// cells with the last one short.
func indexBytes(c *Container) int64 {
	d, cell := int64(c.Replication.N), int64(c.Replication.CellKiB)<<10
	if c.Bytes <= 0 || d == 0 || cell == 0 {
		return max(c.Bytes, 0)
	}
	stripes := (c.Bytes + d*cell - 1) / (d * cell)
	return (stripes-1)*cell + min(cell, c.Bytes-(stripes-1)*d*cell)
}

// ec sends what EC container c needs, as d.a classified it.
func (d *decider) ec(c *Container) {
	switch d.a.Class {
	case UnderReplicated:
		d.place(true)
		if len(d.a.missing) > 0 {
			if d.a.wholeSource {
				d.encode(c)
			} else {
				d.reconstruct(c)
			}
		}
		d.ecCopies(c)
	case MisReplicated:
		d.place(false)
		d.ecMove(c)
	case OverReplicated:
		d.ecRemove(c)
	}
}

// place sets d.rackN to the indexes per rack that new copies should
// avoid: the stays, and with waiting the copies stale or in maintenance
// of indexes without one.
func (d *decider) place(waiting bool) {
	e := &d.a.ecAnalysis
	d.rackN = append(d.rackN[:0], e.rackN...)
	if waiting {
		for k := 0; k < len(e.waitRacks); k += 2 {
			if e.stay[e.waitRacks[k]] < 0 {
				d.rackN[e.waitRacks[k+1]]++
			}
		}
	}
}

func (d *decider) mode() Mode {
	if d.cfg.Push {
		return Push
	}
	return Pull
}

// ecTarget picks a node for a new index copy of size bytes: healthy, in
// service, holding nothing of the container, under its limit, room for
// twice the index; on the rack with the fewest indexes (fewer than most
// unless that is 0), then the most free space, the least load, the lowest id. It takes
// the node as a holder and counts it on its rack.
func (d *decider) ecTarget(bytes int64, most int) int32 {
	a := &d.a
	best := int32(-1)
	for _, i := range d.targets {
		if d.load[i] >= d.limit(i) || d.free[i] < 2*bytes || slices.Contains(a.holders, i) {
			continue
		}
		n := d.rackN[d.rack[i]]
		if most > 0 && int(n) >= most {
			continue
		}
		if best < 0 {
			best = i
			continue
		}
		if m := d.rackN[d.rack[best]]; n < m || (n == m && (d.free[i] > d.free[best] ||
			d.free[i] == d.free[best] && d.load[i] < d.load[best])) {
			best = i
		}
	}
	if best >= 0 {
		a.holders = append(a.holders, best)
		d.rackN[d.rack[best]]++
	}
	return best
}

// untarget undoes ecTarget's bookkeeping for the last n targets picked.
func (d *decider) untarget(picked []int32) {
	for _, i := range picked {
		d.rackN[d.rack[i]]--
	}
	d.a.holders = d.a.holders[:len(d.a.holders)-len(picked)]
}

// ecSource picks, of the lists in order, the first with a node under its
// limit, and of it the node with the most spare capacity; -1: none.
func (d *decider) ecSource(lists ...[]int32) int32 {
	for _, l := range lists {
		best, bestSpare := int32(-1), 0.0
		for _, s := range l {
			lim := d.limit(s)
			if d.load[s] >= lim {
				continue
			}
			if spare := float64(lim-d.load[s]) / float64(lim); best < 0 || spare > bestSpare {
				best, bestSpare = s, spare
			}
		}
		if best >= 0 {
			return best
		}
	}
	return -1
}

func (d *decider) ids(nodes []int32) []NodeID {
	out := make([]NodeID, len(nodes))
	for k, i := range nodes {
		out[k] = d.nodes[i].ID
	}
	return out
}

func (d *decider) command(c *Container, cmd Command) {
	cmd.Container, cmd.Priority, cmd.Deadline = c.ID, d.a.priority, d.cfg.Now.Add(d.cfg.Timeout)
	d.out.Commands = append(d.out.Commands, cmd)
}

// gain charges a command's targets and marks their indexes placed.
func (d *decider) gain(targets []int32, indexes []uint8, bytes int64) {
	for k, i := range targets {
		d.load[i]++
		d.free[i] -= bytes
		d.a.placed[indexes[k]] = true
	}
}

// encode has the whole copy striped into every missing index, in one
// command, once each has a target.
func (d *decider) encode(c *Container) {
	e := &d.a.ecAnalysis
	w := &e.ix[0]
	src := d.ecSource(w.inService, w.decom, w.entering)
	if src < 0 {
		return
	}
	bytes := indexBytes(c)
	targets := make([]int32, 0, len(e.missing))
	for range e.missing {
		dst := d.ecTarget(bytes, 0)
		if dst < 0 {
			d.untarget(targets)
			return
		}
		targets = append(targets, dst)
	}
	d.command(c, Command{Kind: Encode, Sources: d.ids([]int32{src}), Indexes: slices.Clone(e.missing),
		Targets: d.ids(targets), Mode: d.mode()})
	d.load[src]++
	d.gain(targets, e.missing, bytes)
}

// reconstruct rebuilds the missing indexes from a source for every other
// index that has one free (D at least): in push mode one command for all
// the indexes a target was found for, in pull mode one per index.
func (d *decider) reconstruct(c *Container) {
	e := &d.a.ecAnalysis
	bytes := indexBytes(c)
	// send rebuilds what it can of indexes; false: nothing.
	send := func(indexes []uint8) bool {
		srcs, sidx := d.ecSources()
		if len(srcs) < e.d {
			return false
		}
		targets := make([]int32, 0, len(indexes))
		for range indexes {
			dst := d.ecTarget(bytes, 0)
			if dst < 0 {
				break
			}
			targets = append(targets, dst)
		}
		if len(targets) == 0 {
			return false
		}
		indexes = slices.Clone(indexes[:len(targets)])
		d.command(c, Command{Kind: Reconstruct, Sources: d.ids(srcs), SourceIndexes: sidx, Indexes: indexes,
			Targets: d.ids(targets), Mode: d.mode()})
		for _, s := range srcs {
			d.load[s]++
		}
		d.gain(targets, indexes, bytes)
		return true
	}
	if d.cfg.Push {
		send(e.missing)
		return
	}
	for k := range e.missing {
		if !send(e.missing[k : k+1]) {
			return
		}
	}
}

// ecSources picks a source for every index that has a good copy on a
// node under its limit: in service first, then decommissioning, then
// entering maintenance; listed in that order, by index within each.
func (d *decider) ecSources() ([]int32, []uint8) {
	e := &d.a.ecAnalysis
	type src struct {
		node  int32
		index uint8
		tier  int
	}
	var picked []src
	for i := 1; i <= e.total; i++ {
		x := &e.ix[i]
		for tier, l := range [][]int32{x.inService, x.decom, x.entering} {
			if s := d.ecSource(l); s >= 0 {
				picked = append(picked, src{s, uint8(i), tier})
				break
			}
		}
	}
	slices.SortStableFunc(picked, func(u, v src) int { return cmp.Compare(u.tier, v.tier) })
	nodes, indexes := make([]int32, len(picked)), make([]uint8, len(picked))
	for k, s := range picked {
		nodes[k], indexes[k] = s.node, s.index
	}
	return nodes, indexes
}

// replicateIndex copies index i from src (the others in sources after
// it) to a new target chosen as ecTarget does with most; false: no
// target.
func (d *decider) replicateIndex(c *Container, i uint8, src int32, sources []int32, most int) bool {
	bytes := indexBytes(c)
	dst := d.ecTarget(bytes, most)
	if dst < 0 {
		return false
	}
	list := []int32{src}
	for _, s := range sources {
		if s != src {
			list = append(list, s)
		}
	}
	d.command(c, Command{Kind: Replicate, Index: i, Sources: d.ids(list), Target: d.nodes[dst].ID, Mode: d.mode()})
	d.load[src]++
	d.gain([]int32{dst}, []uint8{i}, bytes)
	return true
}

// ecCopies copies one to one what needs no reconstruction: each index
// held only by decommissioning nodes, then, while copies are in
// maintenance, the fewest indexes held only there that bring the indexes
// in service up to the maintenance rule.
func (d *decider) ecCopies(c *Container) {
	e := &d.a.ecAnalysis
	for i := 1; i <= e.total; i++ {
		x := &e.ix[i]
		if len(x.decom) == 0 || x.held() || e.placed[i] {
			continue
		}
		if src := d.ecSource(x.decom); src >= 0 {
			d.replicateIndex(c, uint8(i), src, x.decom, 0)
		}
	}
	if e.wantInService == 0 {
		return
	}
	short := e.wantInService
	for i := 1; i <= e.total; i++ {
		if e.ix[i].held() || e.placed[i] {
			short--
		}
	}
	for i := 1; i <= e.total && short > 0; i++ {
		x := &e.ix[i]
		if len(x.entering) == 0 || x.held() || e.placed[i] {
			continue
		}
		if src := d.ecSource(x.entering); src >= 0 && d.replicateIndex(c, uint8(i), src, x.entering, 0) {
			short--
		}
	}
}

// ecMove moves indexes off racks holding more than the cap, to the racks
// holding the fewest; the old copy stays until over-replication deletes
// it, once the new one is in service.
func (d *decider) ecMove(c *Container) {
	e := &d.a.ecAnalysis
	for r := range d.rackN {
		for i := 1; i <= e.total && int(d.rackN[r]) > e.cap; i++ {
			s := e.stay[i]
			if s < 0 || e.stayComing[i] || d.rack[s] != int32(r) || e.placed[i] || d.load[s] >= d.limit(s) {
				continue
			}
			if !d.replicateIndex(c, uint8(i), s, e.ix[i].inService, e.cap) {
				return
			}
			d.rackN[r]--
		}
	}
}

// ecRemove deletes what c has too many of: replicas out of the scheme;
// bad replicas of indexes with a good copy in service; the copies in
// service of an index beside the one spread chose, while none is stale;
// and the whole copy once every index has a copy in service. A source of
// a command in flight is kept until it is done.
func (d *decider) ecRemove(c *Container) {
	e := &d.a.ecAnalysis
	del := func(i int32, index uint8) {
		if !slices.Contains(e.busy, i) {
			d.command(c, Command{Kind: Delete, Index: index, Target: d.nodes[i].ID})
		}
	}
	for _, r := range e.outOfRange {
		del(r.node, r.index)
	}
	for i := 1; i <= e.total; i++ {
		x := &e.ix[i]
		if len(x.inService) == 0 {
			continue
		}
		for _, b := range x.bad {
			del(b, uint8(i))
		}
		if x.stale > 0 || e.stayComing[i] {
			continue
		}
		for _, n := range x.inService {
			if n != e.stay[i] {
				del(n, uint8(i))
			}
		}
	}
	if e.allInService {
		for _, n := range d.wholeDeletable(e) {
			del(n, 0)
		}
	}
}
