// Package sim plays a cluster for cluster.Decide without processes: Apply
// carries a decision out on a State as if every command succeeded at
// once, and Generate builds large synthetic clusters for benchmarks.
package sim

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/cmfs-project/cmfs/cluster"
)

// Apply carries out d on s: each Replicate adds a CLOSED replica on its
// target with the index and checksum of its first source's copy, each
// Encode and Reconstruct a CLOSED replica of Indexes[k] on Targets[k]
// with the checksum of its first source's, each Delete removes a replica
// (of the index it names), each Transition sets a node's state. Pending
// commands are taken as done (s.Pending is emptied). Replicas stay sorted
// by container then node.
func Apply(s *cluster.State, d cluster.Decision) error {
	for _, c := range d.Commands {
		switch c.Kind {
		case cluster.Replicate:
			if err := copyReplica(s, c); err != nil {
				return err
			}
		case cluster.Encode, cluster.Reconstruct:
			if err := makeIndexes(s, c); err != nil {
				return err
			}
		case cluster.Delete:
			i, ok := find(s.Replicas, c.Container, c.Target)
			if !ok {
				return fmt.Errorf("%v: no such replica", c)
			}
			if s.Replicas[i].Index != c.Index {
				return fmt.Errorf("%v: the replica there is index %d", c, s.Replicas[i].Index)
			}
			s.Replicas = slices.Delete(s.Replicas, i, i+1)
		default:
			return fmt.Errorf("%v: unknown kind", c)
		}
	}
	for _, t := range d.Transitions {
		n := slices.IndexFunc(s.Nodes, func(n cluster.Node) bool { return n.ID == t.Node })
		if n < 0 || s.Nodes[n].OpState != t.From {
			return fmt.Errorf("transition %s %v→%v: node not in %v", t.Node, t.From, t.To, t.From)
		}
		s.Nodes[n].OpState = t.To
	}
	s.Pending = nil
	return nil
}

func copyReplica(s *cluster.State, c cluster.Command) error {
	if len(c.Sources) == 0 {
		return fmt.Errorf("%v: no source", c)
	}
	src, ok := find(s.Replicas, c.Container, c.Sources[0])
	if !ok {
		return fmt.Errorf("%v: source holds no replica", c)
	}
	i, exists := find(s.Replicas, c.Container, c.Target)
	if exists {
		return fmt.Errorf("%v: target holds a replica already", c)
	}
	r := s.Replicas[src]
	if r.Index != c.Index {
		return fmt.Errorf("%v: source holds index %d", c, r.Index)
	}
	r.Node, r.State = c.Target, cluster.Closed
	s.Replicas = slices.Insert(s.Replicas, i, r)
	return nil
}

// makeIndexes adds the indexes an Encode or Reconstruct makes. The
// sources must hold what the command says: an Encode's the whole copy,
// a Reconstruct's the indexes SourceIndexes lists.
func makeIndexes(s *cluster.State, c cluster.Command) error {
	if len(c.Sources) == 0 || len(c.Indexes) != len(c.Targets) {
		return fmt.Errorf("%v: no source, or not one target per index", c)
	}
	want := make([]uint8, len(c.Sources)) // an Encode's source holds index 0
	if c.Kind == cluster.Reconstruct {
		if len(c.SourceIndexes) != len(c.Sources) {
			return fmt.Errorf("%v: not one index per source", c)
		}
		want = c.SourceIndexes
	}
	var r cluster.Replica
	for k, n := range c.Sources {
		i, ok := find(s.Replicas, c.Container, n)
		if !ok || s.Replicas[i].Index != want[k] {
			return fmt.Errorf("%v: source %s holds no index %d", c, n, want[k])
		}
		if k == 0 {
			r = s.Replicas[i]
		}
	}
	for k, n := range c.Targets {
		i, exists := find(s.Replicas, c.Container, n)
		if exists {
			return fmt.Errorf("%v: target %s holds a replica already", c, n)
		}
		r.Node, r.State, r.Index = n, cluster.Closed, c.Indexes[k]
		s.Replicas = slices.Insert(s.Replicas, i, r)
	}
	return nil
}

// find returns where the replica of container c on node n is, or would
// be inserted, in replicas sorted by container then node.
func find(replicas []cluster.Replica, c cluster.ContainerID, n cluster.NodeID) (int, bool) {
	return slices.BinarySearchFunc(replicas, struct {
		c cluster.ContainerID
		n cluster.NodeID
	}{c, n}, func(r cluster.Replica, k struct {
		c cluster.ContainerID
		n cluster.NodeID
	}) int {
		return cmp.Or(cmp.Compare(r.Container, k.c), cmp.Compare(r.Node, k.n))
	})
}

// Sort puts replicas in the order Apply keeps: by container, then node.
func Sort(replicas []cluster.Replica) {
	slices.SortFunc(replicas, func(a, b cluster.Replica) int {
		return cmp.Or(cmp.Compare(a.Container, b.Container), cmp.Compare(a.Node, b.Node))
	})
}

// Spec describes a synthetic cluster of replica:3 containers, and
// ec:rs-6-3-1024k ones if EC says.
type Spec struct {
	Nodes, Racks, Containers int
	// UnderReplicated is the fraction of containers written with only
	// two copies (EC: eight indexes).
	UnderReplicated float64
	// EC is the fraction of containers that are rs-6-3, encoded: their
	// nine indexes on nine nodes, at most ⌈9/min(9, racks)⌉ on a rack
	// (none if the nodes cannot hold that). Without it the generator
	// draws exactly what it drew before.
	EC float64
	// Dead nodes, and Decommissioning ones, are the first ones by id.
	Dead, Decommissioning int
	Seed                  uint64
}

// Generate builds the cluster spec describes: nodes "dn00000"… spread
// round robin over racks "rack000"…, each container's copies on distinct
// racks where there are enough, replicas sorted by container.
func Generate(spec Spec) cluster.State {
	rng := rand.New(rand.NewPCG(spec.Seed, spec.Seed^0x9e3779b97f4a7c15))
	s := cluster.State{Nodes: make([]cluster.Node, spec.Nodes)}
	byRack := make([][]int, spec.Racks)
	for i := range s.Nodes {
		n := &s.Nodes[i]
		n.ID = cluster.NodeID(fmt.Sprintf("dn%05d", i))
		n.Addr = fmt.Sprintf("10.0.%d.%d:9860", i/250, i%250+1)
		n.Rack = fmt.Sprintf("rack%03d", i%spec.Racks)
		n.FreeBytes, n.UsedBytes = 100<<40, 20<<40
		switch {
		case i < spec.Dead:
			n.Health = cluster.Dead
		case i < spec.Dead+spec.Decommissioning:
			n.OpState = cluster.Decommissioning
		}
		byRack[i%spec.Racks] = append(byRack[i%spec.Racks], i)
	}
	// EC needs nine nodes with no rack over its share.
	room := 0
	for _, r := range byRack {
		room += min(len(r), (9+min(9, spec.Racks)-1)/min(9, spec.Racks))
	}
	if room < 9 {
		spec.EC = 0
	}
	repl, ec := cluster.MustReplication("replica:3"), cluster.MustReplication("ec:rs-6-3-1024k")
	s.Containers = make([]cluster.Container, spec.Containers)
	s.Replicas = make([]cluster.Replica, 0, 3*spec.Containers)
	var picked [3]int
	for ci := range s.Containers {
		id := cluster.ContainerID(ci + 1)
		s.Containers[ci] = cluster.Container{ID: id, Replication: repl, State: cluster.Closed, Bytes: 5 << 30}
		if spec.EC > 0 && rng.Float64() < spec.EC {
			s.Containers[ci].Replication = ec
			generateEC(&s, rng, spec, byRack, id)
			continue
		}
		copies := 3
		if rng.Float64() < spec.UnderReplicated {
			copies = 2
		}
		sum := rng.Uint64() | 1
		first := len(s.Replicas)
		for k := range copies {
			for {
				var n int
				if spec.Racks >= copies {
					rack := byRack[rng.IntN(spec.Racks)]
					n = rack[rng.IntN(len(rack))]
					if slices.ContainsFunc(picked[:k], func(p int) bool { return p%spec.Racks == n%spec.Racks }) {
						continue
					}
				} else {
					n = rng.IntN(spec.Nodes)
					if slices.Contains(picked[:k], n) {
						continue
					}
				}
				picked[k] = n
				break
			}
			s.Replicas = append(s.Replicas, cluster.Replica{Container: id, Node: s.Nodes[picked[k]].ID,
				State: cluster.Closed, Checksum: sum})
		}
		slices.SortFunc(s.Replicas[first:], func(a, b cluster.Replica) int { return cmp.Compare(a.Node, b.Node) })
	}
	return s
}

// generateEC places the indexes of EC container id: nine distinct
// nodes, no rack over its share, index k+1 on the k-th node drawn.
func generateEC(s *cluster.State, rng *rand.Rand, spec Spec, byRack [][]int, id cluster.ContainerID) {
	total := 9
	share := (total + min(total, spec.Racks) - 1) / min(total, spec.Racks)
	indexes := total
	if rng.Float64() < spec.UnderReplicated {
		indexes--
	}
	sum := rng.Uint64() | 1
	perRack := make([]int, spec.Racks)
	first := len(s.Replicas)
	var picked []int
	for k := range indexes {
		for {
			r := rng.IntN(spec.Racks)
			n := byRack[r][rng.IntN(len(byRack[r]))]
			if perRack[r] >= share || slices.Contains(picked, n) {
				continue
			}
			perRack[r]++
			picked = append(picked, n)
			s.Replicas = append(s.Replicas, cluster.Replica{Container: id, Node: s.Nodes[n].ID, Index: uint8(k + 1),
				State: cluster.Closed, Checksum: sum})
			break
		}
	}
	slices.SortFunc(s.Replicas[first:], func(a, b cluster.Replica) int { return cmp.Compare(a.Node, b.Node) })
}

// Count is the floor of any decision cycle, the benchmarks' baseline: one
// walk over the containers and their replicas (sorted by container, as
// Generate makes them), counting the replicas of each, with the number
// of containers that have fewer than their replication asks for (EC:
// D+P indexes).
func Count(s cluster.State) (short int) {
	r := 0
	for _, c := range s.Containers {
		for r < len(s.Replicas) && s.Replicas[r].Container < c.ID {
			r++
		}
		n := 0
		for r < len(s.Replicas) && s.Replicas[r].Container == c.ID {
			n++
			r++
		}
		if n < int(c.Replication.N)+int(c.Replication.Parity) {
			short++
		}
	}
	return short
}
