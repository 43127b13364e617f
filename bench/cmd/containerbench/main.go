// Command containerbench measures replicad's container replication with
// real processes — two `replicad serve` nodes on loopback addresses, the
// `replicad container` commands between them — against baselines measured
// side by side in the same run, and prints a table of the results with the
// ratios and targets of the project's container issue:
//
//	go run ./bench/cmd/containerbench [-quick] [flags]
//
// Workloads:
//
//   - push: `replicad container replicate` of a container of incompressible
//     files from node A to a fresh node B, against `tar c | tar x` of the
//     same files through a loopback TCP connection (target ≥ 0.8×) and
//     against a local `rsync -a` (report only). Every side ends with a
//     syncfs of its destination, as Import does.
//   - compression: the same replication of a container of JSON lines with
//     A's bandwidth limit on (--replication-bandwidth), per compression,
//     against --compression none.
//   - RSS: the peak resident set of the source and the target serve
//     processes while a large container is pushed (target ≤ 100 MiB each).
//   - drain: `replicad admin decommission` of a node holding replica:1
//     containers (2 GiB by default, --drain-size; the issue names 10 GiB)
//     in a cluster of it, a coordinator and five more peers, until it is
//     DECOMMISSIONED, against one `replicate` of the same bytes.
//   - failover: three `--coordinator`s on one etcd (the `etcd` binary),
//     the leader killed with SIGKILL three times (and started again),
//     timed until a standby answers `admin status` as the leader, against
//     --leader-lease (target ≤ 10 s).
//   - ec-recovery, ec-read, ec-rss (-only ec: all three): a cluster of
//     twelve nodes on four racks and an ec:rs-6-3-1024k container encoded
//     into nine indexes: the bytes every node sends (its /metrics) to
//     recover one lost index by copy (decommission) and by reconstruction
//     (kill), per byte of the index, in push and pull mode, against the
//     container's bytes; `container get --cluster` of a 256 MiB block
//     with 1 and 3 data index holders killed against all up; the
//     allocated bytes on disk of the nine indexes against replica:3 of the
//     same file; the peak RSS of the nodes reconstructing three indexes
//     of a 6 GiB container, in push and pull mode (target ≤ 256 MiB),
//     against an idle node's RSS.
//
// Caches are dropped before every timed run (root), the runs of a row and
// of its baselines are interleaved, and the table shows medians. It needs
// tar, and rsync for its row. It builds replicad (./cmd/replicad) into
// .bench/ unless --replicad names a binary. Progress goes to stderr, the
// machine description and the tables (aligned text, then markdown) to
// stdout.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cmfs-project/cmfs/bench"
	"github.com/cmfs-project/cmfs/internal/cli"
)

// config sizes the workloads.
type config struct {
	pushSize        int64    // push: bytes of the container's data
	pushFiles       int      // push: files they are put as
	compSize        int64    // compression: bytes of JSON lines
	compFiles       int      // compression: files they are put as
	bandwidth       int64    // compression: the source's limit, bytes/s
	compressions    []string // compression: the ones compared with none
	rssSize         int64    // RSS: bytes of the container pushed
	rssFiles        int      // RSS: files they are put as
	rssLimit        int64    // RSS: the target, bytes
	drainSize       int64    // drain: bytes the decommissioning node holds
	drainFiles      int      // drain: files they are put as
	drainContainers int      // drain: containers they are put into
	ecRecoverySize  int64    // ec-recovery: bytes of the EC container losing an index
	ecReadSize      int64    // ec-read: bytes of the block read (and stored)
	ecRSSSize       int64    // ec-rss: bytes of the container reconstructed
	ecRSSLimit      int64    // ec-rss: the target, bytes
	reps            int      // timed runs of each workload and baseline
	cold            bool     // sync and drop_caches before every run
	only            map[string]bool
}

func defaultConfig() config {
	return config{
		pushSize: 1 << 30, pushFiles: 64,
		compSize: 256 << 20, compFiles: 16, bandwidth: 64 << 20,
		compressions: []string{"gzip", "snappy", "lz4", "zstd"},
		rssSize:      4 << 30, rssFiles: 64, rssLimit: 100 << 20,
		drainSize: 2 << 30, drainFiles: 64, drainContainers: 16,
		ecRecoverySize: 768 << 20, ecReadSize: 256 << 20, ecRSSSize: 6 << 30, ecRSSLimit: 256 << 20,
		reps: 3, cold: true,
	}
}

func quickConfig() config {
	c := defaultConfig()
	c.pushSize, c.pushFiles = 64<<20, 8
	c.compSize, c.compFiles = 32<<20, 4
	c.rssSize, c.rssFiles = 256<<20, 8
	c.drainSize = 192 << 20
	c.ecRecoverySize, c.ecReadSize, c.ecRSSSize = 96<<20, 32<<20, 512<<20
	c.reps = 1
	return c
}

var phases = []string{"push", "compression", "rss", "drain", "failover", "ec-recovery", "ec-read", "ec-rss"}

// phaseGroups are names -only takes for several phases.
var phaseGroups = map[string][]string{"ec": {"ec-recovery", "ec-read", "ec-rss"}}

type options struct {
	cfg      config
	dir      string
	replicad string
	keep     bool
}

func main() { bench.Main("containerbench", parseFlags, run) }

// sizeFlag is a byte count as cli.ParseBytes reads it: 1073741824, 1GiB,
// 256MiB, 64K.
type sizeFlag struct{ n *int64 }

func (s sizeFlag) String() string {
	if s.n == nil {
		return ""
	}
	return strings.ReplaceAll(bench.Size(*s.n), " ", "")
}

func (s sizeFlag) Set(v string) error {
	n, err := cli.ParseBytes(v)
	if err != nil {
		return err
	}
	if n <= 0 {
		return fmt.Errorf("size %q: want more than 0 bytes", v)
	}
	*s.n = n
	return nil
}

func parseFlags(args []string) (options, error) {
	fl := flag.NewFlagSet("containerbench", flag.ContinueOnError)
	def := defaultConfig()
	cfg := def
	quick := fl.Bool("quick", false, "smoke run: 64 MiB push, 32 MiB compression, 256 MiB RSS push, EC 96 MiB recovery, 32 MiB read, 512 MiB RSS, 1 run each (explicit flags still apply)")
	fl.Var(sizeFlag{&cfg.pushSize}, "push-size", "data of the pushed container (1GiB)")
	fl.IntVar(&cfg.pushFiles, "push-files", def.pushFiles, "files the pushed container's data is put as")
	fl.Var(sizeFlag{&cfg.compSize}, "compression-size", "JSON lines of the compression workload (256MiB)")
	fl.IntVar(&cfg.compFiles, "compression-files", def.compFiles, "files the JSON lines are put as")
	fl.Var(sizeFlag{&cfg.bandwidth}, "bandwidth", "the source's --replication-bandwidth in the compression workload, per second (64MiB)")
	comps := fl.String("compressions", strings.Join(def.compressions, ","), "compressions compared with none")
	fl.Var(sizeFlag{&cfg.rssSize}, "rss-size", "data of the container pushed while RSS is watched (4GiB)")
	fl.IntVar(&cfg.rssFiles, "rss-files", def.rssFiles, "files that container's data is put as")
	fl.Var(sizeFlag{&cfg.rssLimit}, "rss-limit", "the peak RSS target per process (100MiB)")
	fl.Var(sizeFlag{&cfg.drainSize}, "drain-size", "data on the decommissioning node of the drain workload (2GiB; the issue's 10GiB needs 6× that on disk per run)")
	fl.IntVar(&cfg.drainFiles, "drain-files", def.drainFiles, "files that data is put as")
	fl.IntVar(&cfg.drainContainers, "drain-containers", def.drainContainers, "containers those files go into (a divisor of --drain-files)")
	fl.Var(sizeFlag{&cfg.ecRecoverySize}, "ec-recovery-size", "data of the EC container losing an index (768MiB; a multiple of the 6 MiB stripe and of 8 files)")
	fl.Var(sizeFlag{&cfg.ecReadSize}, "ec-read-size", "the block read from the EC cluster, and stored as EC and replica:3 (256MiB)")
	fl.Var(sizeFlag{&cfg.ecRSSSize}, "ec-rss-size", "data of the EC container whose 3 indexes are reconstructed while RSS is watched (6GiB; needs about 4× that on disk)")
	fl.Var(sizeFlag{&cfg.ecRSSLimit}, "ec-rss-limit", "the peak RSS target of a reconstructing node (256MiB)")
	fl.IntVar(&cfg.reps, "reps", def.reps, "timed runs of each workload and baseline (the table shows the median)")
	noCold := fl.Bool("no-drop-caches", false, "do not sync and drop caches before runs")
	only := fl.String("only", strings.Join(phases, ","), "workloads to run: "+strings.Join(phases, ", ")+" (ec: the three EC ones)")
	dir := fl.String("dir", "", "work directory (default .bench/container at the module root)")
	replicad := fl.String("replicad", "", "replicad binary (default: build ./cmd/replicad into .bench/)")
	keep := fl.Bool("keep", false, "keep the work directory")
	set, err := bench.ParseFlags(fl, args)
	if err != nil {
		return options{}, err
	}
	if *quick {
		// Quick sizes, except where a flag was given.
		q := quickConfig()
		keepSet := func(name string, dst *int64, v int64) {
			if !set[name] {
				*dst = v
			}
		}
		keepSet("push-size", &cfg.pushSize, q.pushSize)
		keepSet("compression-size", &cfg.compSize, q.compSize)
		keepSet("rss-size", &cfg.rssSize, q.rssSize)
		keepSet("drain-size", &cfg.drainSize, q.drainSize)
		keepSet("ec-recovery-size", &cfg.ecRecoverySize, q.ecRecoverySize)
		keepSet("ec-read-size", &cfg.ecReadSize, q.ecReadSize)
		keepSet("ec-rss-size", &cfg.ecRSSSize, q.ecRSSSize)
		for name, p := range map[string][2]*int{
			"push-files": {&cfg.pushFiles, &q.pushFiles}, "compression-files": {&cfg.compFiles, &q.compFiles},
			"rss-files": {&cfg.rssFiles, &q.rssFiles}, "reps": {&cfg.reps, &q.reps},
		} {
			if !set[name] {
				*p[0] = *p[1]
			}
		}
	}
	cfg.cold = !*noCold
	cfg.compressions = nil
	for _, c := range strings.Split(*comps, ",") {
		if c = strings.TrimSpace(c); c != "" && c != "none" {
			cfg.compressions = append(cfg.compressions, c)
		}
	}
	cfg.only = map[string]bool{}
	for _, p := range strings.Split(*only, ",") {
		p = strings.TrimSpace(p)
		if group, ok := phaseGroups[p]; ok {
			for _, g := range group {
				cfg.only[g] = true
			}
			continue
		}
		if !contains(phases, p) {
			return options{}, fmt.Errorf("--only %q: want some of %s, or ec", p, strings.Join(phases, ", "))
		}
		cfg.only[p] = true
	}
	if cfg.pushFiles < 1 || cfg.compFiles < 1 || cfg.rssFiles < 1 || cfg.drainFiles < 1 || cfg.reps < 1 {
		return options{}, errors.New("file counts and --reps must be positive")
	}
	if cfg.drainContainers < 1 || cfg.drainFiles%cfg.drainContainers != 0 {
		return options{}, fmt.Errorf("--drain-containers %d must be a positive divisor of --drain-files %d", cfg.drainContainers, cfg.drainFiles)
	}
	if cfg.ecRecoverySize%(ecStripe*ecRecoveryFiles) != 0 {
		return options{}, fmt.Errorf("--ec-recovery-size must be a multiple of %s (the 6 MiB stripe × %d files)", bench.Size(ecStripe*ecRecoveryFiles), ecRecoveryFiles)
	}
	if cfg.ecRSSSize%int64(cfg.ecRSSFiles()) != 0 {
		return options{}, fmt.Errorf("--ec-rss-size must split evenly into %d files", cfg.ecRSSFiles())
	}
	for _, s := range []struct {
		name        string
		size, files int64
	}{{"push", cfg.pushSize, int64(cfg.pushFiles)}, {"compression", cfg.compSize, int64(cfg.compFiles)}, {"rss", cfg.rssSize, int64(cfg.rssFiles)}, {"drain", cfg.drainSize, int64(cfg.drainFiles)}} {
		if s.size%s.files != 0 || s.size/s.files < 1024 {
			return options{}, fmt.Errorf("--%s-size must split evenly into --%s-files files of at least 1 KiB", s.name, s.name)
		}
	}
	return options{cfg: cfg, dir: *dir, replicad: *replicad, keep: *keep}, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// runner holds what a run started, so that it can all be stopped.
type runner struct {
	cfg      config
	dir      string
	replicad string
	logf     func(string, ...any)
	notes    []string
	token    string // of every replicad serve and client (bench.UseToken)
	procs    *bench.Procs
}

func run(ctx context.Context, stdout, stderr io.Writer, opts options) (err error) {
	root, err := bench.ModuleRoot()
	if err != nil {
		return err
	}
	work := filepath.Join(root, ".bench")
	dir, err := bench.RunDir(opts.dir, "container")
	if err != nil {
		return err
	}
	// Nothing is deleted before the end of the run (but the RSS targets,
	// after their run): the backing filesystem may be mounted with online
	// discard, which slows the I/O that follows a large deletion.
	r := &runner{cfg: opts.cfg, dir: dir, procs: &bench.Procs{Dir: dir}, logf: func(format string, args ...any) { fmt.Fprintf(stderr, format+"\n", args...) }}
	if r.token, err = bench.UseToken(dir); err != nil {
		return err
	}
	defer func() {
		r.procs.Stop()
		if !opts.keep {
			if rerr := os.RemoveAll(dir); rerr != nil {
				r.logf("remove %s: %v", dir, rerr)
			}
		}
	}()

	if r.cfg.cold {
		var note string
		if r.cfg.cold, note = bench.CanDropCaches(); !r.cfg.cold {
			r.notes = append(r.notes, note)
		}
	}
	if r.replicad = opts.replicad; r.replicad == "" {
		r.logf("building replicad...")
		r.replicad = filepath.Join(work, "replicad")
		if err := bench.GoBuild(ctx, root, r.replicad, "./cmd/replicad"); err != nil {
			return err
		}
	} else if r.replicad, err = filepath.Abs(r.replicad); err != nil {
		return err
	}
	if err := r.checkCLI(ctx); err != nil {
		return err
	}

	machine := bench.Describe(dir)
	machine.GoFuse = bench.RequiredVersion(filepath.Join(root, "go.mod"), "github.com/hanwen/go-fuse/v2")
	bench.WriteHeader(stdout, "container benchmark", machine,
		"work directory: "+dir,
		fmt.Sprintf("replicad: %s (serve on 127.0.0.1, one process per node)", r.replicad))
	fmt.Fprintf(stdout, "  median of %d run(s) per workload and baseline, runs interleaved", r.cfg.reps)
	if r.cfg.cold {
		fmt.Fprint(stdout, "; sync + drop_caches before every timed run, baselines alike")
	}
	fmt.Fprint(stdout, "\n\n")

	start := time.Now()
	var rows []*bench.ReplRow
	for _, phase := range []struct {
		name string
		run  func(context.Context) []*bench.ReplRow
	}{{"push", r.pushRows}, {"compression", r.compressionRows}, {"rss", r.rssRows}, {"drain", r.drainRows}, {"failover", r.failoverRows},
		{"ec-recovery", r.ecRecoveryRows}, {"ec-read", r.ecReadRows}, {"ec-rss", r.ecRSSRows}} {
		if ctx.Err() != nil {
			break
		}
		if r.cfg.only[phase.name] {
			rows = append(rows, phase.run(ctx)...)
		}
	}
	r.logf("ran for %v", time.Since(start).Round(time.Second))

	table := &bench.ReplTable{Subject: "replicad", Rows: rows}
	if err := bench.WriteReport(stdout, table, legend, append(r.notes, table.Notes(1.5)...), machine); err != nil {
		return err
	}
	return ctx.Err()
}

const legend = "Values are medians of the runs. MB/s is 10^6 bytes of container data (the files put) per second, " +
	"from the start of `replicad container replicate` (or of the baseline's command) until it returns with the " +
	"data durable at the target. Ratios are replicad÷baseline, so ≥ 1 means replicad is at least as fast. " +
	"RSS rows: the highest of VmHWM (reset before the push) and VmRSS sampled every 50 ms, in MiB, lower is better. " +
	"Failover: seconds from the leader's SIGKILL until a standby answers `admin status` as the leader; its ratio is lease÷failover. " +
	"EC rows: B/B is bytes per byte (sent per byte of the lost index; on disk per byte of data), lower is better, the ratio baseline÷value; " +
	"degraded reads are MB/s of the block from the start of `container get --cluster` until it exits with the block written and checked; " +
	"EC RSS is the highest VmHWM (reset before the kill) of the reconstructing nodes, in MiB."

// cold makes the next run start with cold caches, if asked to.
func (r *runner) cold() { bench.Settle(r.cfg.cold, r.logf) }

// mbps is the row value of size bytes moved in d.
func mbps(size int64, d time.Duration) float64 { return float64(size) / 1e6 / d.Seconds() }
