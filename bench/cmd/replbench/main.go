// Command replbench measures replication (repl, source, replicad) against
// a baseline per workload, measured side by side in the same run, and
// prints a table of the results with the ratios and targets of the
// project's replication issue:
//
//	go run ./bench/cmd/replbench [-quick] [flags]
//
// Workloads: an incremental dump of synthetic journal events; a bootstrap
// dump of a tree of small files against `find` walks of it; a load of data
// written through a real cmfs mount against `cp -a` of the same data, with
// the bytes read at the source per byte loaded; the lag of a follower under
// a steady writer. It needs root and /dev/fuse (for the mount and for
// drop_caches). It builds cmfs (./cmd/cmfs) and, where it builds,
// replicad (./cmd/replicad) into .bench/; without replicad the load over
// gRPC and the follower run in this process on the source and repl
// packages, and the table says so. Progress goes to stderr, the machine
// description and the tables (aligned text, then markdown) to stdout.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cmfs-project/cmfs/bench"
	"github.com/cmfs-project/cmfs/internal/durable"
	"github.com/cmfs-project/cmfs/internal/statedir"
	"github.com/cmfs-project/cmfs/journal"
	"github.com/cmfs-project/cmfs/repl"
	"github.com/cmfs-project/cmfs/source"
)

// config sizes the workloads.
type config struct {
	events     int           // incremental dump: synthetic events
	treeFiles  int           // bootstrap: files in the tree
	treeParts  int           // bootstrap: partitions they are spread over
	treeSize   int           // bootstrap: bytes per file
	loadFiles  int           // load: files written through the mount
	loadSize   int           // load: bytes per file
	followRate int           // follow: files written per second
	followSize int           // follow: bytes per file
	followFor  time.Duration // follow: how long the writer writes
	interval   time.Duration // follow: the follower's interval
	poll       time.Duration // follow: how often the target is looked at
	reps       int           // timed runs of each workload and baseline
	cold       bool          // sync and drop_caches before every run
}

func defaultConfig() config {
	return config{
		events:    100_000,
		treeFiles: 100_000, treeParts: 100, treeSize: 4 << 10,
		loadFiles: 1024, loadSize: 1 << 20,
		followRate: 20, followSize: 64 << 10, followFor: 20 * time.Second,
		interval: time.Second, poll: 10 * time.Millisecond,
		reps: 3, cold: true,
	}
}

func quickConfig() config {
	c := defaultConfig()
	c.events = 10_000
	c.treeFiles, c.treeParts = 5_000, 50
	c.loadFiles = 64
	c.followFor = 5 * time.Second
	c.reps = 1
	return c
}

type options struct {
	cfg      config
	dir      string
	cmfs     string
	replicad string
	noCLI    bool
	keep     bool
}

func main() { bench.Main("replbench", parseFlags, run) }

func parseFlags(args []string) (options, error) {
	fl := flag.NewFlagSet("replbench", flag.ContinueOnError)
	def := defaultConfig()
	quick := fl.Bool("quick", false, "smoke run: 10k events, 5k tree files, 64 MiB load, 5 s follow, 1 run each (explicit flags still apply)")
	events := fl.Int("events", def.events, "events of the incremental dump")
	treeFiles := fl.Int("tree-files", def.treeFiles, "files of the bootstrap tree")
	treeParts := fl.Int("tree-partitions", def.treeParts, "partitions of the bootstrap tree")
	treeSize := fl.Int("tree-file-size", def.treeSize, "bytes per file of the bootstrap tree")
	loadFiles := fl.Int("load-files", def.loadFiles, "files of the load data set")
	loadSize := fl.Int("load-file-size", def.loadSize, "bytes per file of the load data set")
	rate := fl.Int("follow-rate", def.followRate, "files per second the follow writer writes")
	followSize := fl.Int("follow-file-size", def.followSize, "bytes per file the follow writer writes")
	followFor := fl.Duration("follow-for", def.followFor, "how long the follow writer writes")
	interval := fl.Duration("follow-interval", def.interval, "the follower's --interval (replicad's default: 1s)")
	poll := fl.Duration("poll", def.poll, "how often the follow target is polled for the files written")
	reps := fl.Int("reps", def.reps, "timed runs of each workload and baseline (the table shows the median)")
	noCold := fl.Bool("no-drop-caches", false, "do not sync and drop caches before runs")
	dir := fl.String("dir", "", "work directory (default .bench/repl at the module root)")
	cmfsBin := fl.String("cmfs", "", "cmfs binary (default: build ./cmd/cmfs into .bench/)")
	replicad := fl.String("replicad", "", "replicad binary (default: build ./cmd/replicad into .bench/ if it builds)")
	noCLI := fl.Bool("no-replicad", false, "do not use the replicad CLI: load over gRPC and follow in this process")
	keep := fl.Bool("keep", false, "keep the work directory")
	set, err := bench.ParseFlags(fl, args)
	if err != nil {
		return options{}, err
	}
	cfg := def
	if *quick {
		cfg = quickConfig()
	}
	apply := func(name string, dst *int, v int) {
		if set[name] || !*quick {
			*dst = v
		}
	}
	apply("events", &cfg.events, *events)
	apply("tree-files", &cfg.treeFiles, *treeFiles)
	apply("tree-partitions", &cfg.treeParts, *treeParts)
	apply("load-files", &cfg.loadFiles, *loadFiles)
	apply("reps", &cfg.reps, *reps)
	cfg.treeSize, cfg.loadSize, cfg.followRate, cfg.followSize = *treeSize, *loadSize, *rate, *followSize
	if set["follow-for"] || !*quick {
		cfg.followFor = *followFor
	}
	cfg.interval, cfg.poll, cfg.cold = *interval, *poll, !*noCold
	if cfg.events < 1 || cfg.treeFiles < 1 || cfg.treeParts < 1 || cfg.treeSize < 16 || cfg.loadFiles < 1 ||
		cfg.loadSize < 16 || cfg.followRate < 1 || cfg.followSize < 16 || cfg.followFor <= 0 || cfg.reps < 1 ||
		cfg.interval <= 0 || cfg.poll <= 0 {
		return options{}, errors.New("sizes, counts and durations must be positive (file sizes at least 16 bytes)")
	}
	return options{cfg: cfg, dir: *dir, cmfs: *cmfsBin, replicad: *replicad, noCLI: *noCLI, keep: *keep}, nil
}

// runner holds what a run started, so that it can all be stopped.
type runner struct {
	cfg      config
	dir      string
	cmfs     string
	replicad string // empty: no CLI, emulate in process
	logf     func(string, ...any)
	notes    []string
	token    string // of every replicad serve and client (bench.UseToken)
	procs    *bench.Procs

	mu      sync.Mutex
	mounts  []*bench.Mount
	servers []func() // stop the in-process source services
}

func run(ctx context.Context, stdout, stderr io.Writer, opts options) (err error) {
	root, err := bench.ModuleRoot()
	if err != nil {
		return err
	}
	work := filepath.Join(root, ".bench")
	dir, err := bench.RunDir(opts.dir, "repl")
	if err != nil {
		return err
	}
	// Nothing is deleted before the end of the run: the backing filesystem
	// may be mounted with online discard, which slows the I/O that follows
	// a large deletion for seconds.
	r := &runner{cfg: opts.cfg, dir: dir, procs: &bench.Procs{Dir: dir}, logf: func(format string, args ...any) { fmt.Fprintf(stderr, format+"\n", args...) }}
	if r.token, err = bench.UseToken(dir); err != nil {
		return err
	}
	defer func() {
		r.stopAll()
		if left, _ := bench.FUSEMountsUnder(dir); len(left) > 0 {
			r.logf("still mounted, not removing %s: %s", dir, strings.Join(left, " "))
			return
		}
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
	r.logf("building...")
	if r.cmfs = opts.cmfs; r.cmfs == "" {
		r.cmfs = filepath.Join(work, "cmfs")
		if err := bench.GoBuild(ctx, root, r.cmfs, "./cmd/cmfs"); err != nil {
			return err
		}
	}
	switch {
	case opts.noCLI:
		r.notes = append(r.notes, "-no-replicad: the gRPC load and the follower ran in this process (source.Server, source.Client, repl.Dump, repl.Load)")
	case opts.replicad != "":
		r.replicad = opts.replicad
	default:
		bin := filepath.Join(work, "replicad")
		if err := bench.GoBuild(ctx, root, bin, "./cmd/replicad"); err != nil {
			r.notes = append(r.notes, fmt.Sprintf("replicad CLI not used (%v): the gRPC load and the follower ran in this process on source.Server, source.Client, repl.Dump and repl.Load", err))
		} else {
			r.replicad = bin
		}
	}

	machine := bench.Describe(dir)
	machine.GoFuse = bench.RequiredVersion(filepath.Join(root, "go.mod"), "github.com/hanwen/go-fuse/v2")
	how := "in process (source + repl packages; cmd/replicad not used)"
	if r.replicad != "" {
		how = r.replicad + " serve / load --source / follow"
	}
	bench.WriteHeader(stdout, "replication benchmark", machine, "work directory: "+dir, "gRPC load and follower: "+how)
	fmt.Fprintf(stdout, "  median of %d run(s) per workload and baseline, runs interleaved", r.cfg.reps)
	if r.cfg.cold {
		fmt.Fprint(stdout, "; sync + drop_caches before every bootstrap and load run, for the baseline alike")
	}
	fmt.Fprint(stdout, "\n\n")

	start := time.Now()
	var rows []*bench.ReplRow
	phases := []func(context.Context) []*bench.ReplRow{r.dumpRows, r.bootstrapRows, r.loadRows, r.followRows}
	for _, phase := range phases {
		if ctx.Err() != nil {
			break
		}
		rows = append(rows, phase(ctx)...)
	}
	r.logf("ran for %v", time.Since(start).Round(time.Second))

	table := &bench.ReplTable{Subject: "replicad", Rows: rows}
	if err := bench.WriteReport(stdout, table, table.Legend(), append(r.notes, table.Notes(1.5)...), machine); err != nil {
		return err
	}
	return ctx.Err()
}

// cold makes the next run start with cold caches, if asked to.
func (r *runner) cold() { bench.Settle(r.cfg.cold, r.logf) }

// --- incremental dump ---

func (r *runner) dumpRows(ctx context.Context) []*bench.ReplRow {
	n := r.cfg.events
	row := &bench.ReplRow{
		Name:     fmt.Sprintf("incremental dump, %s events", bench.Count(n)),
		Unit:     "events/s",
		Higher:   true,
		Baseline: "mkdir+2 writes+rename loop, 1 syncfs",
	}
	dir := filepath.Join(r.dir, "dump")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		row.Fail(err)
		return []*bench.ReplRow{row}
	}
	// The journal is set up with NoSync and batched appends: its speed
	// is not what this row measures (see the journal benchmark).
	r.logf("[dump] journaling %d synthetic events (NoSync, batches of 1000)...", n)
	l, err := journal.Open(filepath.Join(dir, "journal.db"), journal.Options{NoSync: true})
	if err != nil {
		row.Fail(err)
		return []*bench.ReplRow{row}
	}
	defer l.Close()
	if err := bench.FillJournal(ctx, l, bench.SyntheticEvents(n), 1000); err != nil {
		row.Fail(err)
		return []*bench.ReplRow{row}
	}
	// The floor encodes from the journal's own events, ids and times set.
	var stored []*journal.Event
	if err := l.Range(1, uint64(n), func(e *journal.Event) error { stored = append(stored, e); return nil }); err != nil {
		row.Fail(err)
		return []*bench.ReplRow{row}
	}
	for rep := range r.cfg.reps {
		for k := range 2 {
			if ctx.Err() != nil {
				return []*bench.ReplRow{row}
			}
			syscall.Sync()
			if (k+rep)%2 == 0 {
				out := filepath.Join(dir, fmt.Sprintf("inc-%d", rep))
				start := time.Now()
				res, err := repl.Dump(ctx, repl.JournalEvents(l), out, repl.DumpOptions{From: 1, Source: "replbench"})
				d := time.Since(start)
				if err == nil && res.Events != n {
					err = fmt.Errorf("dumped %d events, want %d", res.Events, n)
				}
				if err != nil {
					row.Fail(err)
				} else {
					row.Add(float64(n) / d.Seconds())
					r.logf("[dump] repl.Dump run %d: %.0f events/s (%v)", rep+1, float64(n)/d.Seconds(), d.Round(time.Millisecond))
				}
			} else {
				out := filepath.Join(dir, fmt.Sprintf("floor-%d", rep))
				d, err := bench.DumpFloor(out, stored)
				if err != nil {
					row.FailBase(err)
				} else {
					row.AddBase(float64(n) / d.Seconds())
					r.logf("[dump] floor loop run %d: %.0f events/s (%v)", rep+1, float64(n)/d.Seconds(), d.Round(time.Millisecond))
				}
			}
		}
	}
	return []*bench.ReplRow{row}
}

// --- bootstrap ---

func (r *runner) bootstrapRows(ctx context.Context) []*bench.ReplRow {
	c := r.cfg
	name := fmt.Sprintf("bootstrap dump, %s files × %s (cold), from the catalog", bench.Count(c.treeFiles), bench.Size(int64(c.treeSize)))
	walk := &bench.ReplRow{Name: name, Unit: "s", Baseline: "find -type f | wc -l",
		Target: bench.ReplTarget{MinRatio: 0.5, Text: "≤ 2× find (≥ 0.50)"}}
	buildName := fmt.Sprintf("first bootstrap, %s files (cold): builds the catalog, reads and hashes every file", bench.Count(c.treeFiles))
	build := &bench.ReplRow{Name: buildName, Unit: "s", Baseline: "find -type f -exec cat {} + >/dev/null"}
	walkName := fmt.Sprintf("bootstrap dump --walk, %s files (cold): walks, reads and hashes every file", bench.Count(c.treeFiles))
	walked := &bench.ReplRow{Name: walkName, Unit: "s", Baseline: "find -type f -exec cat {} + >/dev/null"}
	rows := []*bench.ReplRow{walk, build, walked}
	fail := func(err error) []*bench.ReplRow { return bench.FailRows(rows, err) }
	dir := filepath.Join(r.dir, "bootstrap")
	tree := bench.Tree{Dir: filepath.Join(dir, "tree"), Files: c.treeFiles, Partitions: c.treeParts, Size: c.treeSize}
	r.logf("[bootstrap] writing %d files of %d bytes in %d partitions...", c.treeFiles, c.treeSize, c.treeParts)
	start := time.Now()
	if err := tree.Create(ctx, 8); err != nil {
		return fail(err)
	}
	r.logf("[bootstrap] tree written in %v", time.Since(start).Round(time.Second))
	// The tree was not written through a mount: its journal is empty and
	// the dump is pinned to event 0.
	l, err := journal.Open(filepath.Join(dir, "journal.db"), journal.Options{NoSync: true})
	if err != nil {
		return fail(err)
	}
	defer l.Close()

	want := fmt.Sprint(c.treeFiles)
	shell := func(row *bench.ReplRow, script string) {
		r.cold()
		start := time.Now()
		out, err := exec.CommandContext(ctx, "sh", "-c", script).CombinedOutput()
		d := time.Since(start)
		switch {
		case err != nil:
			row.FailBase(fmt.Errorf("%s: %w: %s", script, err, bench.FirstLines(string(out), 3)))
		case row == walk && strings.TrimSpace(string(out)) != want:
			row.FailBase(fmt.Errorf("%s counted %q files, want %s", script, strings.TrimSpace(string(out)), want))
		default:
			row.AddBase(d.Seconds())
			r.logf("[bootstrap] %s: %v", row.Baseline, d.Round(time.Millisecond))
		}
	}
	// dump runs one BOOTSTRAP into a new directory, from the catalog at
	// catalog (built there if it is not) or, with catalog empty, walking.
	n := 0
	dump := func(catalog string) (time.Duration, error) {
		n++
		out := filepath.Join(dir, fmt.Sprintf("dump-%d", n))
		opts := repl.DumpOptions{Source: "replbench", Tree: repl.LocalTree{Root: tree.Dir}}
		r.cold()
		start := time.Now()
		if catalog != "" {
			cat, err := repl.OpenCatalog(catalog)
			if err != nil {
				return 0, err
			}
			defer cat.Close()
			opts.Catalog = cat
		}
		res, err := repl.Dump(ctx, repl.JournalEvents(l), out, opts)
		d := time.Since(start)
		if err == nil && res.Files != c.treeFiles {
			err = fmt.Errorf("bootstrap listed %d files, want %d", res.Files, c.treeFiles)
		}
		return d, err
	}
	for rep := range c.reps {
		if ctx.Err() != nil {
			return rows
		}
		// The first bootstrap of a catalog: it walks, reads and hashes.
		catalog := filepath.Join(dir, fmt.Sprintf("catalog-%d.db", rep))
		d, err := dump(catalog)
		if err != nil {
			return fail(err)
		}
		build.Add(d.Seconds())
		r.logf("[bootstrap] first BOOTSTRAP (builds the catalog) run %d: %v", rep+1, d.Round(time.Millisecond))
		shell(build, fmt.Sprintf("find %s -type f -exec cat {} + >/dev/null", tree.Dir))
		if n := len(build.BaseRuns); n > 0 {
			walked.AddBase(build.BaseRuns[n-1]) // the same baseline
		}
		for k := range 3 {
			if ctx.Err() != nil {
				return rows
			}
			switch (k + rep) % 3 {
			case 0:
				d, err := dump(catalog)
				if err != nil {
					return fail(err)
				}
				walk.Add(d.Seconds())
				r.logf("[bootstrap] BOOTSTRAP from the catalog run %d: %v", rep+1, d.Round(time.Millisecond))
			case 1:
				shell(walk, fmt.Sprintf("find %s -type f | wc -l", tree.Dir))
			case 2:
				d, err := dump("")
				if err != nil {
					return fail(err)
				}
				walked.Add(d.Seconds())
				r.logf("[bootstrap] BOOTSTRAP --walk run %d: %v", rep+1, d.Round(time.Millisecond))
			}
		}
	}
	return rows
}

// --- load ---

func (r *runner) loadRows(ctx context.Context) []*bench.ReplRow {
	c := r.cfg
	total := int64(c.loadFiles) * int64(c.loadSize)
	what := fmt.Sprintf("%s in %d files (cold)", bench.Size(total), c.loadFiles)
	cp := "cp -a + sync"
	target := bench.ReplTarget{MinRatio: 0.9, Text: "≥ 0.9× cp -a"}
	local := &bench.ReplRow{Name: "load " + what + ", repl.Load + LocalFetcher", Unit: "s", Baseline: cp, Target: target}
	localBytes := &bench.ReplRow{Name: "bytes read at the source per byte loaded (LocalFetcher)", Unit: "B/B",
		Target: bench.ReplTarget{MaxValue: 1, Text: "1.0"}}
	how := "in-process source.Server + source.Client"
	if r.replicad != "" {
		how = "replicad serve + replicad load --source"
	}
	grpc := &bench.ReplRow{Name: "load " + what + ", loopback gRPC: " + how, Unit: "s", Baseline: cp, Target: target}
	bytesWhat := "bytes received per byte loaded (gRPC, in-process client's count)"
	if r.replicad != "" {
		bytesWhat = "bytes read at the source per byte loaded (replicad serve's rchar)"
	}
	grpcBytes := &bench.ReplRow{Name: bytesWhat, Unit: "B/B", Target: bench.ReplTarget{MaxValue: 1, Text: "1.0"}}
	if r.replicad != "" {
		// rchar counts the gRPC requests too (some 100 bytes a file).
		grpcBytes.Target = bench.ReplTarget{MaxValue: 1.01, Text: "1.0 (≤ 1.01: rchar counts requests)"}
	}
	rows := []*bench.ReplRow{local, localBytes, grpc, grpcBytes}
	fail := func(err error) []*bench.ReplRow { return bench.FailRows(rows, err) }

	dir := filepath.Join(r.dir, "load")
	backing, mnt := filepath.Join(dir, "backing"), filepath.Join(dir, "mnt")
	state := filepath.Join(backing, statedir.Name)
	m, err := r.mount(ctx, backing, mnt)
	if err != nil {
		return fail(err)
	}
	r.logf("[load] writing %s in %d files through the mount...", bench.Size(total), c.loadFiles)
	start := time.Now()
	err = writeDataSet(mnt, c.loadFiles, c.loadSize)
	if cerr := m.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fail(err)
	}
	r.logf("[load] written and unmounted in %v", time.Since(start).Round(time.Second))

	dump := filepath.Join(dir, "dump")
	l, err := journal.Open(filepath.Join(state, statedir.JournalFile), journal.Options{ReadOnly: true})
	if err != nil {
		return fail(err)
	}
	res, err := repl.Dump(ctx, repl.JournalEvents(l), dump, repl.DumpOptions{From: 1, Source: "replbench"})
	l.Close()
	if err != nil {
		return fail(fmt.Errorf("dump: %w", err))
	}
	r.logf("[load] incremental dump of events %d..%d written", res.From, res.To)

	var (
		addr   string
		server *bench.Proc
		client *source.Client
	)
	if r.replicad != "" {
		addr, server, err = r.serve(ctx, "load", state)
	} else {
		addr, client, err = r.serveInProcess(ctx, backing)
	}
	if err != nil {
		grpc.Fail(err)
		grpcBytes.Fail(err)
	}
	// What the source read so far: the file data the load reads comes on top.
	sourceRead := func() (int64, error) {
		if client != nil {
			return client.Stats().Bytes, nil
		}
		return readChars(server.Cmd.Process.Pid)
	}

	// timedLoad runs load into tgt from cold caches and checks what it
	// loaded; the time ends when tgt is durable.
	timedLoad := func(tgt string, load func() (repl.LoadResult, error)) (repl.LoadResult, time.Duration, error) {
		r.cold()
		start := time.Now()
		res, err := load()
		if err == nil {
			err = durable.SyncFS(tgt)
		}
		d := time.Since(start)
		if err == nil && (res.Files != c.loadFiles || res.Bytes != total) {
			err = fmt.Errorf("loaded %d files, %d bytes; want %d, %d", res.Files, res.Bytes, c.loadFiles, total)
		}
		return res, d, err
	}
	for rep := range c.reps {
		for k := range 3 {
			if ctx.Err() != nil {
				return rows
			}
			tgt := filepath.Join(dir, fmt.Sprintf("target-%d-%d", rep, k))
			if err := os.Mkdir(tgt, 0o755); err != nil {
				return fail(err)
			}
			switch (k + rep) % 3 {
			case 0:
				fetch := &repl.LocalFetcher{Root: backing, CMRoot: filepath.Join(state, statedir.CMRootDir)}
				res, d, err := timedLoad(tgt, func() (repl.LoadResult, error) {
					return repl.Load(ctx, dump, tgt, fetch, repl.LoadOptions{})
				})
				if err != nil {
					local.Fail(err)
					localBytes.Fail(err)
					break
				}
				local.Add(d.Seconds())
				localBytes.Add(float64(fetch.Stats().Bytes) / float64(res.Bytes))
				r.logf("[load] repl.Load local run %d: %v, %d bytes read for %d loaded", rep+1, d.Round(time.Millisecond), fetch.Stats().Bytes, res.Bytes)
			case 1:
				r.cold()
				start := time.Now()
				out, err := exec.CommandContext(ctx, "cp", "-a", filepath.Join(backing, "sales.db"), tgt+"/").CombinedOutput()
				if err == nil {
					err = durable.SyncFS(tgt)
				}
				d := time.Since(start)
				if err != nil {
					local.FailBase(fmt.Errorf("cp -a: %w: %s", err, bench.FirstLines(string(out), 3)))
					grpc.FailBase(fmt.Errorf("cp -a: %w: %s", err, bench.FirstLines(string(out), 3)))
					break
				}
				local.AddBase(d.Seconds())
				grpc.AddBase(d.Seconds())
				r.logf("[load] cp -a run %d: %v", rep+1, d.Round(time.Millisecond))
			case 2:
				if addr == "" {
					break
				}
				before, err := sourceRead()
				if err != nil {
					grpcBytes.Fail(err)
				}
				res, d, err := timedLoad(tgt, func() (repl.LoadResult, error) {
					if client != nil {
						return repl.Load(ctx, dump, tgt, client, repl.LoadOptions{})
					}
					return r.loadCLI(ctx, dump, tgt, addr)
				})
				if err != nil {
					grpc.Fail(err)
					grpcBytes.Fail(err)
					break
				}
				grpc.Add(d.Seconds())
				if after, err := sourceRead(); err != nil {
					grpcBytes.Fail(err)
				} else {
					grpcBytes.Add(float64(after-before) / float64(res.Bytes))
				}
				r.logf("[load] gRPC run %d: %v", rep+1, d.Round(time.Millisecond))
			}
		}
	}
	r.stopServers()
	return rows
}

// loadCLI runs `replicad load --source addr --json` and returns what it
// printed.
func (r *runner) loadCLI(ctx context.Context, dump, target, addr string) (repl.LoadResult, error) {
	cmd := exec.CommandContext(ctx, r.replicad, "load", "--dump", dump, "--target", target, "--source", addr, "--json")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return repl.LoadResult{}, fmt.Errorf("replicad load: %w: %s", err, bench.FirstLines(stderr.String(), 3))
	}
	var res repl.LoadResult
	if err := json.Unmarshal(out, &res); err != nil {
		return repl.LoadResult{}, fmt.Errorf("replicad load --json printed %q: %w", bench.FirstLines(string(out), 2), err)
	}
	return res, nil
}

// writeDataSet writes n files of size bytes, each with distinct content,
// under sales.db/orders/ in 16 partitions, one write each.
func writeDataSet(dir string, n, size int) error {
	for i := range n {
		p := filepath.Join(dir, "sales.db", "orders", fmt.Sprintf("dt=2024-01-%02d", i%16+1), fmt.Sprintf("part-%05d.parquet", i))
		if i < 16 {
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
		}
		if err := os.WriteFile(p, bench.Content(size, 0x6c6f6164, i), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// --- follow ---

func (r *runner) followRows(ctx context.Context) []*bench.ReplRow {
	c := r.cfg
	how := "in-process follower"
	if r.replicad != "" {
		how = "replicad follow"
	}
	what := fmt.Sprintf("%d files/s × %s for %v, %s --interval %v", c.followRate, bench.Size(int64(c.followSize)), c.followFor, how, c.interval)
	relay := "Source.Events follow stream"
	p50 := &bench.ReplRow{Name: "follow lag p50, " + what, Unit: "ms", Baseline: relay}
	p99 := &bench.ReplRow{Name: "follow lag p99, " + what, Unit: "ms", Baseline: relay,
		Target: bench.ReplTarget{MaxValue: 1000, Text: "≤ 1000 ms"}}
	rows := []*bench.ReplRow{p50, p99}
	fail := func(err error) []*bench.ReplRow {
		p50.Fail(err)
		p99.Fail(err)
		return rows
	}
	dir := filepath.Join(r.dir, "follow")
	backing, mnt, tgt := filepath.Join(dir, "backing"), filepath.Join(dir, "mnt"), filepath.Join(dir, "target")
	state := filepath.Join(backing, statedir.Name)
	if err := os.MkdirAll(tgt, 0o755); err != nil {
		return fail(err)
	}
	m, err := r.mount(ctx, backing, mnt)
	if err != nil {
		return fail(err)
	}
	defer m.Close()
	// A first directory, so that the follower starts on a journal with
	// an event in it.
	if err := os.MkdirAll(filepath.Join(mnt, "sales.db", "stream"), 0o755); err != nil {
		return fail(err)
	}

	fctx, stop := context.WithCancel(ctx)
	defer stop()
	var (
		addr   string
		client *source.Client
	)
	if r.replicad != "" {
		if addr, _, err = r.serve(ctx, "follow", state); err == nil {
			client, err = source.Dial(ctx, addr, source.WithStreaming(), source.WithToken(r.token))
		}
		if err == nil {
			_, err = r.procs.Start("replicad-follow", r.replicad, "follow", "--source", addr, "--target", tgt, "--interval", c.interval.String())
		}
	} else {
		addr, client, err = r.serveInProcess(ctx, backing)
	}
	if err != nil {
		return fail(err)
	}
	if r.replicad != "" {
		defer client.Close()
	}
	var followErr error
	var wg sync.WaitGroup
	if r.replicad == "" {
		wg.Add(1)
		go func() {
			defer wg.Done()
			followErr = follow(fctx, client, filepath.Join(dir, "dumps"), tgt, c.interval)
		}()
	}

	// The baseline: when each event reaches a client following the
	// journal through the same source service.
	type arrival struct {
		e  *journal.Event
		at time.Time
	}
	var (
		amu      sync.Mutex
		arrivals []arrival
		relayErr error
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		err := client.Follow(fctx, 1, func(e *journal.Event) error {
			amu.Lock()
			arrivals = append(arrivals, arrival{e, time.Now()})
			amu.Unlock()
			return nil
		})
		if err != nil && fctx.Err() == nil {
			relayErr = err
		}
	}()

	r.logf("[follow] writing %d files/s of %s for %v through the mount...", c.followRate, bench.Size(int64(c.followSize)), c.followFor)
	files, err := writeAndWatch(ctx, mnt, tgt, c)
	stop()
	wg.Wait()
	r.stopServers()
	if err == nil {
		err = followErr
	}
	if err != nil {
		return fail(err)
	}
	if relayErr != nil {
		p50.FailBase(relayErr)
		p99.FailBase(relayErr)
	}

	// Match every file with the event that journaled it.
	byPath := map[string]arrival{}
	for _, a := range arrivals {
		if a.e.Type == journal.Insert || a.e.Type == journal.Write {
			byPath[a.e.Path] = a
		}
	}
	var lags, relayLags []time.Duration
	var missing []string
	for _, f := range files {
		a, ok := byPath[f.rel]
		if !ok {
			missing = append(missing, f.rel)
			continue
		}
		lags = append(lags, f.seen.Sub(a.e.Time))
		relayLags = append(relayLags, a.at.Sub(a.e.Time))
	}
	if len(missing) > 0 {
		return fail(fmt.Errorf("%d of %d files have no INSERT/WRITE event on the follow stream (first: %s)", len(missing), len(files), missing[0]))
	}
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	p50.Add(ms(bench.Percentile(lags, 50)))
	p99.Add(ms(bench.Percentile(lags, 99)))
	if relayErr == nil {
		p50.AddBase(ms(bench.Percentile(relayLags, 50)))
		p99.AddBase(ms(bench.Percentile(relayLags, 99)))
	}
	r.logf("[follow] %d files: lag p50 %v, p99 %v, max %v; relay p50 %v, p99 %v", len(lags),
		bench.Percentile(lags, 50).Round(time.Millisecond), bench.Percentile(lags, 99).Round(time.Millisecond),
		bench.Percentile(lags, 100).Round(time.Millisecond),
		bench.Percentile(relayLags, 50).Round(time.Millisecond), bench.Percentile(relayLags, 99).Round(time.Millisecond))
	return rows
}

// follow is replicad follow's loop, emulated on the packages: every
// interval, an incremental dump from the target's last event to the
// source's newest, loaded and removed.
func follow(ctx context.Context, client *source.Client, dumps, target string, interval time.Duration) error {
	st, err := client.Status(ctx)
	if err != nil {
		return err
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for n := 0; ; n++ {
		err := func() error {
			last, err := client.Last(ctx)
			if err != nil {
				return err
			}
			have, _, err := repl.ReadState(target)
			if err != nil || last <= have.LastReplID {
				return err
			}
			dump := filepath.Join(dumps, fmt.Sprint(n))
			defer os.RemoveAll(dump)
			if _, err := repl.Dump(ctx, client, dump, repl.DumpOptions{From: have.LastReplID + 1, To: last, Source: st.SourceID}); err != nil {
				return fmt.Errorf("dump: %w", err)
			}
			if _, err := repl.Load(ctx, dump, target, client, repl.LoadOptions{}); err != nil {
				return fmt.Errorf("load: %w", err)
			}
			return nil
		}()
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("follower: %w", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// watched is a file the follow writer wrote and when it appeared, whole,
// at the target.
type watched struct {
	rel  string // slash-separated, relative to the warehouse root
	size int64
	sum  string
	seen time.Time
}

// writeAndWatch writes c.followRate files a second through mnt for
// c.followFor, polls tgt every c.poll for each file written until its
// bytes are there, and returns the files once all are seen (or fails 30 s
// after the writer ends).
func writeAndWatch(ctx context.Context, mnt, tgt string, c config) ([]*watched, error) {
	var (
		mu       sync.Mutex
		pending  []*watched
		writeErr error
		done     = make(chan struct{})
	)
	n := int(c.followFor.Seconds() * float64(c.followRate))
	go func() {
		defer close(done)
		start := time.Now()
		for i := range n {
			at := start.Add(time.Duration(i) * time.Second / time.Duration(c.followRate))
			select {
			case <-ctx.Done():
				writeErr = ctx.Err()
				return
			case <-time.After(time.Until(at)):
			}
			// A new partition every second, as a streaming ingest makes.
			rel := fmt.Sprintf("sales.db/stream/s=%04d/part-%06d", i/c.followRate, i)
			p := filepath.Join(mnt, filepath.FromSlash(rel))
			if i%c.followRate == 0 {
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					writeErr = err
					return
				}
			}
			b := bench.Content(c.followSize, 0x666f6c6c, i)
			if err := os.WriteFile(p, b, 0o644); err != nil {
				writeErr = err
				return
			}
			mu.Lock()
			pending = append(pending, &watched{rel: rel, size: int64(len(b)), sum: journal.Sum(b)})
			mu.Unlock()
		}
	}()

	var all []*watched
	var deadline time.Time
	tick := time.NewTicker(c.poll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
		mu.Lock()
		todo := pending
		pending = nil
		mu.Unlock()
		all = append(all, todo...)
		now := time.Now()
		left := 0
		for _, f := range all {
			if f.seen.IsZero() {
				if arrived(filepath.Join(tgt, filepath.FromSlash(f.rel)), f.size, f.sum) {
					f.seen = now
				} else {
					left++
				}
			}
		}
		select {
		case <-done:
			if writeErr != nil {
				return nil, fmt.Errorf("writer: %w", writeErr)
			}
			mu.Lock()
			more := len(pending)
			mu.Unlock()
			if left == 0 && more == 0 {
				return all, nil
			}
			if deadline.IsZero() {
				deadline = now.Add(30 * time.Second)
			} else if now.After(deadline) {
				return nil, fmt.Errorf("%d of %d files not at the target 30 s after the writer ended", left, len(all))
			}
		default:
		}
	}
}

// arrived reports whether path holds size bytes with xxh64 sum.
func arrived(path string, size int64, sum string) bool {
	fi, err := os.Stat(path)
	if err != nil || fi.Size() != size {
		return false
	}
	b, err := os.ReadFile(path)
	return err == nil && journal.Sum(b) == sum
}

// --- processes and mounts ---

func (r *runner) mount(ctx context.Context, backing, mnt string) (*bench.Mount, error) {
	for _, d := range []string{backing, mnt} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	d := &bench.Daemon{
		Label:          "cmfs",
		MountCommand:   func(backing, mnt string) []string { return []string{r.cmfs, "mount", "--daemon", backing, mnt} },
		UnmountCommand: func(mnt string) []string { return []string{r.cmfs, "umount", mnt} },
	}
	m, err := d.Mount(ctx, backing, mnt)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.mounts = append(r.mounts, m)
	r.mu.Unlock()
	return m, nil
}

// serve starts `replicad serve` on a free loopback port and waits until
// it answers.
func (r *runner) serve(ctx context.Context, name, state string) (string, *bench.Proc, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	addr := lis.Addr().String()
	lis.Close()
	p, err := r.procs.Start("replicad-serve-"+name, r.replicad, "serve", "--state", state, "--listen", addr)
	if err != nil {
		return "", nil, err
	}
	client, err := source.Dial(ctx, addr, source.WithToken(r.token))
	if err != nil {
		return "", nil, err
	}
	defer client.Close()
	deadline := time.Now().Add(bench.MountTimeout)
	for {
		_, err := client.Status(ctx)
		if err == nil {
			return addr, p, nil
		}
		select {
		case <-p.Done():
			return "", nil, fmt.Errorf("replicad serve exited: %s", p.Exited())
		default:
		}
		if time.Now().After(deadline) {
			return "", nil, fmt.Errorf("replicad serve on %s not answering after %v: %w", addr, bench.MountTimeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// serveInProcess serves the source on a free loopback port in this
// process and returns a client of it.
func (r *runner) serveInProcess(ctx context.Context, backing string) (string, *source.Client, error) {
	srv, err := source.NewServer(source.Config{Backing: backing, Token: r.token})
	if err != nil {
		return "", nil, err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	sctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() {
		defer close(served)
		if err := srv.Serve(sctx, lis); err != nil {
			r.logf("source server: %v", err)
		}
	}()
	client, err := source.Dial(ctx, lis.Addr().String(), source.WithStreaming(), source.WithToken(r.token))
	stop := func() {
		if client != nil {
			client.Close()
		}
		cancel()
		<-served
	}
	if err != nil {
		stop()
		return "", nil, err
	}
	r.mu.Lock()
	r.servers = append(r.servers, stop)
	r.mu.Unlock()
	return lis.Addr().String(), client, nil
}

// stopServers stops the source services started so far, in process or not.
func (r *runner) stopServers() {
	r.mu.Lock()
	stops := r.servers
	r.servers = nil
	r.mu.Unlock()
	for _, s := range stops {
		s()
	}
	r.procs.Stop()
}

// stopAll stops every process and server and unmounts every mount.
func (r *runner) stopAll() {
	r.stopServers()
	r.mu.Lock()
	mounts := r.mounts
	r.mounts = nil
	r.mu.Unlock()
	for i := len(mounts) - 1; i >= 0; i-- {
		if err := mounts[i].Close(); err != nil {
			r.logf("unmount: %v", err)
		}
	}
}

// --- helpers ---

// readChars returns the bytes process pid has read through read(2) and
// the like (rchar in /proc/PID/io): what a source service read, files
// and requests alike.
func readChars(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		var n int64
		if _, err := fmt.Sscanf(line, "rchar: %d", &n); err == nil {
			return n, nil
		}
	}
	return 0, fmt.Errorf("/proc/%d/io: no rchar", pid)
}
