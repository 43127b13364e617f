package cluster

import (
	"fmt"
	"testing"
)

// TestECCap: the rack cap is ⌈indexes/racks⌉, raised when racks lack the
// healthy in-service nodes to hold that many (a dead node on a small
// rack must not make a container MIS_REPLICATED that no placement
// could fix).
func TestECCap(t *testing.T) {
	for _, tc := range []struct {
		name  string
		racks []int // healthy in-service nodes per rack
		down  int   // dead nodes on the last rack, besides
		total int
		want  int
	}{
		{"even", []int{3, 3, 3, 3}, 0, 9, 3},
		{"4-4-2-2", []int{4, 4, 2, 2}, 0, 9, 3},
		{"small racks lost nodes", []int{4, 3, 1, 1}, 1, 9, 4},
		{"one rack", []int{12}, 0, 9, 9},
		{"fewer nodes than indexes", []int{2, 2}, 0, 9, 5},
		{"more racks than indexes", []int{1, 1, 1, 1, 1}, 0, 3, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var nodes []Node
			for r, n := range tc.racks {
				for k := range n {
					nodes = append(nodes, Node{ID: NodeID(fmt.Sprintf("r%d-n%d", r, k)), Rack: fmt.Sprintf("r%d", r)})
				}
			}
			for k := range tc.down {
				nodes = append(nodes, Node{ID: NodeID(fmt.Sprintf("dead%d", k)), Rack: fmt.Sprintf("r%d", len(tc.racks)-1), Health: Dead})
			}
			top, err := newTopo(nodes)
			if err != nil {
				t.Fatal(err)
			}
			if got := top.ecCap(tc.total); got != tc.want {
				t.Errorf("cap for %d indexes on %v: %d, want %d", tc.total, tc.racks, got, tc.want)
			}
		})
	}
}
