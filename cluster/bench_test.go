package cluster_test

import (
	"fmt"
	"testing"

	"github.com/cmfs-project/cmfs/cluster"
	"github.com/cmfs-project/cmfs/cluster/sim"
)

// benchSpec is rmbench's cluster at n containers: 1,000 nodes on 20
// racks, 1% under-replicated, 5 dead nodes, one decommissioning.
func benchSpec(n int) sim.Spec {
	return sim.Spec{Nodes: 1000, Racks: 20, Containers: n, UnderReplicated: 0.01, Dead: 5, Decommissioning: 1, Seed: 1}
}

// BenchmarkDecide times a full cycle; BenchmarkCount the walk every cycle
// pays, its baseline.
func BenchmarkDecide(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		s := sim.Generate(benchSpec(n))
		c := cfg()
		b.Run(fmt.Sprintf("containers=%d", n), func(b *testing.B) {
			var cmds int
			for b.Loop() {
				d, err := cluster.Decide(s, c)
				if err != nil {
					b.Fatal(err)
				}
				cmds = len(d.Commands)
			}
			b.ReportMetric(float64(cmds), "commands")
		})
	}
}

func BenchmarkCount(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		s := sim.Generate(benchSpec(n))
		b.Run(fmt.Sprintf("containers=%d", n), func(b *testing.B) {
			for b.Loop() {
				if sim.Count(s) == 0 {
					b.Fatal("no container short: the spec makes 1%")
				}
			}
		})
	}
}
