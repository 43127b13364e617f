// Command rmbench measures the replication manager's decision cycle
// (cluster.Decide) on synthetic clusters of 1,000 nodes on 20 racks with
// 100k, 1M and 3M replica:3 containers — 1% under-replicated, 5 dead
// nodes, one decommissioning — against the floor any cycle pays: one
// walk over the same containers counting their replicas (sim.Count),
// timed in the same run. With -ec F, a fraction F of the containers are
// ec:rs-6-3-1024k instead, encoded (nine indexes; 1% with eight). It
// prints the machine and a table:
//
//	go run ./bench/cmd/rmbench [-sizes 100000,1000000,3000000] [-reps 3] [-ec 0]
//
// Per size: the best of -reps cycles, the baseline's best, their ratio
// (baseline÷decide: ≥ 1 would mean Decide is as fast as counting), the
// commands decided, the heap the state holds (HeapAlloc after GC, with
// and without it) and what one cycle allocates. Targets: a cycle < 10 s
// and the state ≤ 1 GiB at 1M containers.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cmfs-project/cmfs/bench"
	"github.com/cmfs-project/cmfs/cluster"
	"github.com/cmfs-project/cmfs/cluster/sim"
)

func main() {
	sizes := flag.String("sizes", "100000,1000000,3000000", "container counts, comma-separated")
	reps := flag.Int("reps", 3, "timed cycles per size (the table shows the best)")
	nodes := flag.Int("nodes", 1000, "nodes")
	racks := flag.Int("racks", 20, "racks")
	ec := flag.Float64("ec", 0, "fraction of the containers that are ec:rs-6-3-1024k")
	flag.Parse()
	ns, err := parseSizes(*sizes)
	if err == nil && (*reps < 1 || *nodes < 3 || *racks < 1 || *racks > *nodes) {
		err = fmt.Errorf("want -reps ≥ 1, -nodes ≥ 3, 1 ≤ -racks ≤ -nodes")
	}
	if err == nil && (*ec < 0 || *ec > 1 || *ec > 0 && *nodes < 9) {
		err = fmt.Errorf("-ec %v: want a fraction from 0 to 1, and 9 nodes or more", *ec)
	}
	if err != nil || flag.NArg() > 0 {
		if err == nil {
			err = fmt.Errorf("unexpected argument %q", flag.Arg(0))
		}
		fmt.Fprintln(os.Stderr, "rmbench:", err)
		os.Exit(2)
	}
	if err := run(os.Stdout, os.Stderr, ns, *reps, *nodes, *racks, *ec); err != nil {
		fmt.Fprintln(os.Stderr, "rmbench:", err)
		os.Exit(1)
	}
}

func parseSizes(s string) ([]int, error) {
	var ns []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-sizes %q: want positive container counts, comma-separated", s)
		}
		ns = append(ns, n)
	}
	return ns, nil
}

type result struct {
	containers, replicas int
	decide, count        time.Duration
	commands, waiting    int
	stateBytes, allocs   uint64
}

func run(stdout, stderr io.Writer, sizes []int, reps, nodes, racks int, ec float64) error {
	cwd, _ := os.Getwd()
	machine := bench.Describe(cwd)
	fmt.Fprintf(stdout, "replication manager benchmark, %s\n\n", time.Now().Format(time.RFC3339))
	for _, l := range machine.Lines()[:3] {
		fmt.Fprintln(stdout, "  "+l)
	}
	fmt.Fprintf(stdout, "  %s, GOMAXPROCS %d\n", runtime.Version(), runtime.GOMAXPROCS(0))
	kinds := "replica:3"
	if ec > 0 {
		kinds = fmt.Sprintf("%.0f%% ec:rs-6-3-1024k, the rest replica:3", 100*ec)
	}
	fmt.Fprintf(stdout, "  %d nodes on %d racks; %s, 1%% under-replicated, 5 dead nodes, 1 decommissioning; best of %d cycle(s)\n\n",
		nodes, racks, kinds, reps)
	var results []result
	for _, n := range sizes {
		fmt.Fprintf(stderr, "%d containers: generating...\n", n)
		r, err := measure(sim.Spec{Nodes: nodes, Racks: racks, Containers: n, UnderReplicated: 0.01, Dead: 5,
			Decommissioning: 1, EC: ec, Seed: 1}, reps)
		if err != nil {
			return fmt.Errorf("%d containers: %w", n, err)
		}
		results = append(results, r)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "containers\treplicas\tdecide s\tcount s\tcount/decide\tcommands\twaiting\tstate MiB\tcycle alloc MiB\ttarget (1M: < 10 s, ≤ 1024 MiB)\t")
	for _, r := range results {
		goal := "—"
		if r.containers == 1_000_000 {
			goal = "MISS"
			if r.decide < 10*time.Second && r.stateBytes <= 1<<30 {
				goal = "ok"
			}
		}
		fmt.Fprintf(tw, "%d\t%d\t%.3f\t%.4f\t%.3f\t%d\t%d\t%.0f\t%.0f\t%s\t\n", r.containers, r.replicas,
			r.decide.Seconds(), r.count.Seconds(), r.count.Seconds()/r.decide.Seconds(), r.commands, r.waiting,
			float64(r.stateBytes)/(1<<20), float64(r.allocs)/(1<<20), goal)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "\ncount/decide is the baseline's time over Decide's: the share of a cycle the walk over the state "+
		"alone takes (1 would be a cycle as cheap as counting). waiting: containers needing work that node limits "+
		"held back this cycle. state MiB: heap in use after GC with the state built, less before.")
	return nil
}

func measure(spec sim.Spec, reps int) (result, error) {
	before := heap()
	s := sim.Generate(spec)
	r := result{containers: len(s.Containers), replicas: len(s.Replicas), stateBytes: heap() - before}
	cfg := cluster.DefaultConfig()
	cfg.Now = time.Now()
	for range reps {
		start := time.Now()
		if sim.Count(s) == 0 {
			return r, fmt.Errorf("baseline: no container short, the spec makes 1%%")
		}
		if d := time.Since(start); r.count == 0 || d < r.count {
			r.count = d
		}
		runtime.GC()
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		start = time.Now()
		d, err := cluster.Decide(s, cfg)
		elapsed := time.Since(start)
		runtime.ReadMemStats(&m1)
		if err != nil {
			return r, err
		}
		if r.decide == 0 || elapsed < r.decide {
			r.decide = elapsed
		}
		r.commands, r.waiting, r.allocs = len(d.Commands), d.Waiting, m1.TotalAlloc-m0.TotalAlloc
	}
	runtime.KeepAlive(s)
	return r, nil
}

// heap is the heap in use once the garbage is collected.
func heap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
