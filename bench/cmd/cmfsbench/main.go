// Command cmfsbench measures cmfs side by side with the backing directory
// itself (native), plain go-fuse loopback and libfuse's passthrough_ll, each
// over its own fresh backing directory, in one run, and prints a table of
// the results with the ratios and targets of the project's benchmark. Column
// "cmfs interval" is cmfs mounted with --sync=interval (n/a, with the
// mount's error under notes, where that cmfs has no such flag). A second
// table gives, for the small-file workloads, the p50 and p99 of a single
// operation in every column and, for the cmfs columns, the device flushes
// per operation their commit path reports (cmfs status --json).
//
//	go run ./bench/cmd/cmfsbench [-quick] [flags]
//
// It builds what it runs into .bench/ at the module root: the loopback
// server (bench/cmd/loopbackfs), passthrough_ll from the libfuse3-dev
// examples, cmfs (./cmd/cmfs, unless -cmfs names a binary) and the journal
// benchmark. With -base REV it also builds ./cmd/cmfs as it is at git
// revision REV and runs it as one more column, cmfs@REV, so that the table
// shows what the changes since REV cost. An implementation that does not
// build or mount is reported as n/a; the others still run. The small-file
// rows mount every implementation again, each over a fresh ext4 of its own
// made on a loop device (root and mkfs.ext4; -small-fs dir runs them on
// the -dir filesystem with the large-file rows instead). The XFS row
// mounts every implementation again over backing directories on an XFS
// image it makes on a loop device (root and mkfs.xfs; n/a without).
// Progress goes to stderr, the machine description and the tables
// (aligned text, then markdown) to stdout.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cmfs-project/cmfs/bench"
	"github.com/cmfs-project/cmfs/internal/loopfs"
)

type options struct {
	cfg           bench.Config
	dir           string // parent of the backing directories and mountpoints
	cmfs          string // prebuilt cmfs binary; empty builds ./cmd/cmfs
	base          string // git revision to build cmfs at for the cmfs@REV column; empty: no such column
	impls         []string
	journalEvents int
	keep          bool
	smallOnDir    bool           // the small-file rows on the -dir filesystem, not on fresh ext4s
	only          *regexp.Regexp // run only the workloads it matches; nil: all
	dataRepsSet   bool           // -data-reps given: fitRoom does not lower it
}

func main() { bench.Main("cmfsbench", parseFlags, run) }

func parseFlags(args []string) (options, error) {
	fl := flag.NewFlagSet("cmfsbench", flag.ContinueOnError)
	def := bench.DefaultConfig()
	quick := fl.Bool("quick", false, "smoke run: 64 MiB files, 1000 small files, 1 run each (explicit size flags still apply)")
	size := fl.String("size", "1G", "size of the large file (K, M, G suffixes)")
	files := fl.Int("files", def.Files, "small files per metadata workload")
	workers := fl.Int("workers", def.Workers, "workers of the parallel create and unlink")
	writers := fl.Int("writers", def.Writers, "writers of the many-writers create and the journal benchmark")
	reps := fl.Int("reps", def.Reps, "runs per metadata workload and implementation (the table shows the median)")
	dataReps := fl.Int("data-reps", def.DataReps, "runs per large-file workload and implementation")
	timeout := fl.Duration("timeout", def.Timeout, "bound on one run; a FUSE mount that exceeds it is aborted")
	dir := fl.String("dir", "", "where to create backing directories and mountpoints (default .bench/run at the module root)")
	cmfs := fl.String("cmfs", "", "cmfs binary to run (default: build ./cmd/cmfs into .bench/)")
	impls := fl.String("impls", "native,loopback,passthrough_ll,cmfs,cmfs interval", "implementations to run, comma-separated (quote the space of \"cmfs interval\"); also "+bench.KillprivName)
	base := fl.String("base", "", "also run cmfs built at this git revision, as column cmfs@REV (n/a if it does not build offline)")
	journalEvents := fl.Int("journal-events", 64000, "events of the journal benchmark (0 skips it)")
	keep := fl.Bool("keep", false, "keep the backing directories after the run")
	bestRun := fl.Bool("best", false, "show the best run of each workload instead of the median")
	noCold := fl.Bool("no-drop-caches", false, "do not sync and drop caches before runs")
	smallFS := fl.String("small-fs", "ext4", "where the small-file rows run: `ext4`, a fresh ext4 on a loop device for every implementation, or dir, the -dir filesystem the large-file rows run on")
	only := fl.String("only", "", "run only the workloads whose name matches this `REGEXP` (the journal's row is named \"journal appends\"); a workload that needs an earlier one's files (lstat, overwrite, unlink need the creates') brings it along")
	set, err := bench.ParseFlags(fl, args)
	if err != nil {
		return options{}, err
	}

	cfg := def
	if *quick {
		cfg = bench.QuickConfig()
		if !set["journal-events"] {
			*journalEvents = 6400
		}
	}
	if set["size"] || !*quick {
		n, err := parseSize(*size)
		if err != nil {
			return options{}, fmt.Errorf("-size: %w", err)
		}
		cfg.FileSize = n
	}
	if set["files"] || !*quick {
		cfg.Files = *files
	}
	if set["reps"] || !*quick {
		cfg.Reps = *reps
	}
	if set["data-reps"] || !*quick {
		cfg.DataReps = *dataReps
	}
	if set["timeout"] || !*quick {
		cfg.Timeout = *timeout
	}
	cfg.Workers, cfg.Writers = *workers, *writers
	cfg.Cold = !*noCold
	cfg.Best = *bestRun
	if cfg.Files < 1 || cfg.Workers < 1 || cfg.Writers < 1 || cfg.Reps < 1 || cfg.DataReps < 1 || cfg.FileSize < 8192 {
		return options{}, errors.New("sizes and counts must be positive (and -size at least 8K)")
	}
	opts := options{cfg: cfg, dir: *dir, cmfs: *cmfs, base: *base, journalEvents: *journalEvents, keep: *keep, dataRepsSet: set["data-reps"]}
	switch *smallFS {
	case "ext4":
	case "dir":
		opts.smallOnDir = true
	default:
		return options{}, fmt.Errorf("-small-fs: %q is neither ext4 nor dir", *smallFS)
	}
	if *only != "" {
		if opts.only, err = regexp.Compile(*only); err != nil {
			return options{}, fmt.Errorf("-only: %w", err)
		}
	}
	known := map[string]bool{bench.NativeName: true, bench.LoopbackName: true, bench.KillprivName: true, bench.PassthroughName: true, bench.CmfsName: true, bench.IntervalName: true}
	for _, name := range strings.Split(*impls, ",") {
		name = strings.TrimSpace(name)
		if !known[name] {
			return options{}, fmt.Errorf("-impls: unknown implementation %q", name)
		}
		opts.impls = append(opts.impls, name)
	}
	return opts, nil
}

func parseSize(s string) (int64, error) {
	mult := int64(1)
	switch strings.ToUpper(s[len(s)-1:]) {
	case "K":
		mult = 1 << 10
	case "M":
		mult = 1 << 20
	case "G":
		mult = 1 << 30
	}
	if mult > 1 {
		s = s[:len(s)-1]
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, err
	}
	return n * mult, nil
}

func run(ctx context.Context, stdout, stderr io.Writer, opts options) (err error) {
	root, err := bench.ModuleRoot()
	if err != nil {
		return err
	}
	work := filepath.Join(root, ".bench")
	runDir := opts.dir
	if runDir == "" {
		runDir = filepath.Join(work, "run")
	}
	if runDir, err = filepath.Abs(runDir); err != nil {
		return err
	}
	if err := os.MkdirAll(work, 0o755); err != nil {
		return err
	}
	if err := bench.CleanRunDir(runDir); err != nil {
		return err
	}
	if err := os.MkdirAll(runDir, 0o755); err != nil {
		return err
	}
	logf := func(format string, args ...any) { fmt.Fprintf(stderr, format+"\n", args...) }
	var st syscall.Statfs_t
	if err := syscall.Statfs(runDir, &st); err != nil {
		return err
	}
	roomNote, err := opts.fitRoom(int64(st.Bavail) * st.Bsize)
	if err != nil {
		return fmt.Errorf("%s: %w", runDir, err)
	}

	cfg := opts.cfg
	var notes []string
	if roomNote != "" {
		notes = append(notes, roomNote)
		logf("%s", roomNote)
	}
	small := bench.SmallWorkloads(cfg)
	brought := opts.needed(small)
	for _, w := range small {
		if brought[w.Name] {
			note := fmt.Sprintf("%s: run too, -only's rows use its files", w.Name)
			notes = append(notes, note)
			logf("%s", note)
		}
	}
	nofile, err := raiseFileLimit()
	if err != nil {
		notes = append(notes, fmt.Sprintf("RLIMIT_NOFILE not raised (%v): servers that keep an fd per inode (passthrough_ll) may fail with EMFILE", err))
	}
	if cfg.Cold {
		var note string
		if cfg.Cold, note = bench.CanDropCaches(); !cfg.Cold {
			notes = append(notes, note)
		}
	}

	machine := bench.Describe(runDir)
	machine.GoFuse = bench.RequiredVersion(filepath.Join(root, "go.mod"), "github.com/hanwen/go-fuse/v2")
	header := []string{"backing directories: " + runDir}
	if nofile > 0 {
		header = append(header, fmt.Sprintf("open files limit (RLIMIT_NOFILE) of every server: %d", nofile))
	}
	bench.WriteHeader(stdout, "cmfs benchmark", machine, header...)
	fmt.Fprintln(stdout)

	// Build and mount every implementation. One that does not is
	// reported as n/a and the others run anyway.
	logf("building...")
	var base revision
	if opts.base != "" {
		base = resolve(ctx, root, opts.base)
		opts.impls = withColumn(opts.impls, base.name)
	}
	impls, describe, buildNotes := prepare(ctx, root, work, runDir, opts, base)
	notes = append(notes, buildNotes...)
	var subjects []bench.Subject
	defer func() {
		for i := len(subjects) - 1; i >= 0; i-- {
			if cerr := subjects[i].Mount.Close(); cerr != nil {
				logf("%s: %v", subjects[i].Name, cerr)
				if err == nil {
					err = cerr
				}
			}
		}
		if left, _ := bench.FUSEMountsUnder(runDir); len(left) > 0 {
			logf("still mounted, not removing %s: %s", runDir, strings.Join(left, " "))
			return
		}
		if !opts.keep {
			if rerr := os.RemoveAll(runDir); rerr != nil {
				logf("remove %s: %v", runDir, rerr)
			}
		}
	}()
	for _, impl := range impls {
		backing := filepath.Join(runDir, bench.DirName(impl.Name()), "backing")
		mnt := filepath.Join(runDir, bench.DirName(impl.Name()), "mnt")
		if err := os.MkdirAll(backing, 0o755); err != nil {
			return err
		}
		if err := os.MkdirAll(mnt, 0o755); err != nil {
			return err
		}
		logf("mounting %s...", impl.Name())
		m, err := impl.Mount(ctx, backing, mnt)
		if err != nil {
			notes = append(notes, fmt.Sprintf("%s: not measured, mount failed: %v", impl.Name(), err))
			logf("%s: mount failed: %v", impl.Name(), err)
			continue
		}
		subjects = append(subjects, bench.Subject{Name: impl.Name(), Mount: m})
	}
	if len(subjects) == 0 {
		return errors.New("nothing mounted")
	}

	stat := "median"
	if cfg.Best {
		stat = "best"
	}
	fmt.Fprintln(stdout, "implementations:")
	for _, name := range opts.impls {
		fmt.Fprintf(stdout, "  %-15s %s\n", name, describe[name])
	}
	fmt.Fprintf(stdout, "\nworkloads: large file %s, %d small files of %s, %d workers, %d writers; %s of %d run(s) per large-file and %d per metadata workload, runs interleaved across implementations;\n",
		bench.Size(cfg.FileSize), cfg.Files, bench.Size(int64(cfg.SmallSize)), cfg.Workers, cfg.Writers, stat, cfg.DataReps, cfg.Reps)
	if cfg.Cold {
		fmt.Fprintln(stdout, "sync + drop_caches (echo 3 > /proc/sys/vm/drop_caches) before every run (the warm lstat: before its untimed first pass), for every implementation alike.")
	}
	fmt.Fprintln(stdout)

	var costs *bench.FlushCosts
	if len(opts.pick(bench.SmallWorkloads(cfg))) > 0 && slices.Contains(opts.impls, bench.CmfsName) && slices.Contains(opts.impls, bench.LoopbackName) {
		logf("measuring a device flush and a journal commit where the small-file rows run...")
		if c, err := smallFlushCost(runDir, opts.smallOnDir); err != nil {
			notes = append(notes, fmt.Sprintf("the ceilings of one flush or commit per operation are not shown: %v", err))
		} else {
			costs = &c
			logf("one flush: %v, one commit: %v", c.Flush, c.Commit)
		}
	}

	start := time.Now()
	workloads := bench.Workloads(cfg)
	if opts.smallOnDir {
		workloads = append(workloads, bench.SmallWorkloads(cfg)...)
	}
	rows, runErr := bench.Run(ctx, cfg, opts.pick(workloads), subjects, progress{logf})
	if small := opts.pick(bench.SmallWorkloads(cfg)); runErr == nil && !opts.smallOnDir && len(small) > 0 {
		// The same implementations again, each over a fresh filesystem
		// of its own.
		logf("making an ext4 on a loop device for every implementation, for the small-file rows...")
		smallRows, err := bench.OnScratch(ctx, cfg, filepath.Join(runDir, "small"), bench.SmallScratch(cfg), impls, small, progress{logf})
		rows = append(rows, smallRows...)
		runErr = err
	}
	if xfs := opts.pick(bench.XFSWorkloads(cfg)); runErr == nil && len(xfs) > 0 {
		// The same implementations again, over backing directories on an
		// XFS image made for them, where cmfs keeps originals by reflink.
		logf("making XFS on a loop device for the XFS rows...")
		xfsRows, err := bench.OnScratch(ctx, cfg, filepath.Join(runDir, "xfs"), bench.Scratch{Type: "xfs", Size: bench.XFSImageSize(cfg, len(impls))}, impls, xfs, progress{logf})
		rows = append(rows, xfsRows...)
		runErr = err
	}
	if runErr == nil && opts.journalEvents > 0 && slices.Contains(opts.impls, bench.CmfsName) && opts.picks(journalRowName) {
		row := journalRow(ctx, work, runDir, cfg.Writers, opts.journalEvents, logf)
		rows = append(rows, row)
	}
	logf("ran for %v", time.Since(start).Round(time.Second))

	table := &bench.Table{Impls: opts.impls, Subject: bench.CmfsName, Rows: rows, Best: cfg.Best, Before: base.name,
		Extra: []bench.RatioColumn{{Subject: bench.IntervalName, Base: bench.LoopbackName}}}
	perOp := &bench.OpTable{Impls: opts.impls, Rows: rows, Costs: costs, Ceiling: bench.CmfsName, CeilingBase: bench.LoopbackName}
	for _, name := range opts.impls {
		if name == bench.CmfsName || name == bench.IntervalName || name == base.name {
			perOp.Flushes = append(perOp.Flushes, name)
		}
		if name != bench.NativeName {
			perOp.CPU = append(perOp.CPU, name)
		}
	}
	notes = append(notes, table.Notes()...)
	notes = append(notes, perOp.Notes()...)
	for _, l := range table.Spread(1.5) {
		notes = append(notes, "runs differ by more than 1.5× (slowest to fastest) in "+l)
	}
	legend := table.Legend() + "\n\n" + perOp.Legend()
	if err := bench.WriteReport(stdout, bench.Reports{table, perOp}, legend, notes, machine); err != nil {
		return err
	}
	if runErr != nil {
		return fmt.Errorf("run stopped early: %w", runErr)
	}
	return nil
}

// flushRounds is how many flushes smallFlushCost takes the median of.
const flushRounds = 200

// smallFlushCost measures bench.FlushCosts where the small-file rows run:
// on the run directory's filesystem with onDir, else on a fresh ext4 on a
// loop device made for it, as each column's is.
func smallFlushCost(runDir string, onDir bool) (bench.FlushCosts, error) {
	if onDir {
		return bench.FlushCost(runDir, flushRounds)
	}
	if why := loopfs.Missing("ext4"); why != "" {
		return bench.FlushCosts{}, errors.New("no ext4: " + why)
	}
	dir := filepath.Join(runDir, "flush")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return bench.FlushCosts{}, err
	}
	defer os.Remove(dir)
	fs, err := loopfs.Make(dir+".img", dir, "ext4", 256<<20)
	if err != nil {
		return bench.FlushCosts{}, err
	}
	c, err := bench.FlushCost(dir, flushRounds)
	return c, errors.Join(err, fs.Close())
}

// minDataReps is the fewest large-file runs fitRoom lowers -data-reps'
// default to.
const minDataReps = 3

// fitRoom makes the picked rows fit in free bytes, the space free on the
// run directory's filesystem: a disk that fills fails every row after
// the one that filled it, and whatever else uses that disk with them.
// Unless -data-reps was given, it lowers the large-file runs as far as
// minDataReps and says so in the returned note; a run that still does not
// fit is refused. What the rows write: DataFootprint, SmallFootprint per
// column, the XFS image.
func (o *options) fitRoom(free int64) (note string, err error) {
	columns, cmfsColumns := len(o.impls), 0
	for _, name := range o.impls {
		if strings.HasPrefix(name, bench.CmfsName) {
			cmfsColumns++
		}
	}
	if o.base != "" { // the cmfs@REV column, added once it resolves
		columns++
		cmfsColumns++
	}
	need := func(cfg bench.Config) (total, data int64) {
		if len(o.pick(bench.Workloads(cfg))) > 0 {
			data = bench.DataFootprint(cfg, columns, cmfsColumns)
		}
		total = data
		if len(o.pick(bench.SmallWorkloads(cfg))) > 0 {
			total += int64(columns) * bench.SmallFootprint(cfg)
		}
		if len(o.pick(bench.XFSWorkloads(cfg))) > 0 {
			total += bench.XFSImageSize(cfg, columns)
		}
		return total, data
	}
	total, data := need(o.cfg)
	if total <= free {
		return "", nil
	}
	if data > 0 && !o.dataRepsSet {
		cfg := o.cfg
		for cfg.DataReps > minDataReps {
			cfg.DataReps--
			if t, _ := need(cfg); t <= free {
				note = fmt.Sprintf("large-file rows run %d times, not %d: %d runs need about %s and %s is free", cfg.DataReps, o.cfg.DataReps, o.cfg.DataReps, gib(total), gib(free))
				o.cfg = cfg
				return note, nil
			}
		}
	}
	hint := "make room, or run elsewhere with -dir"
	if data > 0 {
		hint += ", a smaller -size, fewer -data-reps"
	}
	return "", fmt.Errorf("the picked rows need about %s and %s is free: %s", gib(total), gib(free), hint)
}

func gib(n int64) string { return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30)) }

// picks says whether the workload named name runs.
func (o options) picks(name string) bool { return o.only == nil || o.only.MatchString(name) }

// pick returns the workloads that run, in their order: those -only
// matches and those they need.
func (o options) pick(ws []bench.Workload) []bench.Workload {
	run := o.needed(ws)
	return slices.DeleteFunc(ws, func(w bench.Workload) bool { return !o.picks(w.Name) && !run[w.Name] })
}

// needed returns the names of the workloads of ws that -only does not
// match but a picked one needs (Workload.Needs), however indirectly.
func (o options) needed(ws []bench.Workload) map[string]bool {
	run := map[string]bool{}
	for i := len(ws) - 1; i >= 0; i-- { // a workload needs an earlier one
		if w := ws[i]; w.Needs != "" && (o.picks(w.Name) || run[w.Name]) && !o.picks(w.Needs) {
			run[w.Needs] = true
		}
	}
	return run
}

// revision is the cmfs@REV column: cmfs as it is at an earlier commit.
type revision struct {
	rev   string // as given to -base
	short string // abbreviated hash; empty if rev does not resolve
	name  string // the column
	err   error  // why rev does not resolve
}

func resolve(ctx context.Context, root, rev string) revision {
	short, err := bench.ShortRevision(ctx, root, rev)
	if err != nil {
		return revision{rev: rev, name: bench.RevisionName(rev), err: err}
	}
	return revision{rev: rev, short: short, name: bench.RevisionName(short)}
}

// withColumn adds the cmfs@REV column to impls, just before cmfs (the
// table reads before, then after), or last when cmfs is not run.
func withColumn(impls []string, name string) []string {
	if slices.Contains(impls, name) {
		return impls
	}
	i := slices.Index(impls, bench.CmfsName)
	if i < 0 {
		i = len(impls)
	}
	return slices.Insert(slices.Clone(impls), i, name)
}

// prepare builds the implementations that were asked for. It returns those
// that built, a description of each column and a note for each that did not.
func prepare(ctx context.Context, root, work, runDir string, opts options, base revision) ([]bench.Impl, map[string]string, []string) {
	var (
		impls []bench.Impl
		notes []string
		desc  = map[string]string{}
	)
	// cmfs and cmfs interval run the same binary, built once.
	var cmfsBin string
	var cmfsErr error
	buildCmfs := func() (string, error) {
		if cmfsBin == "" && cmfsErr == nil {
			cmfsBin = opts.cmfs
			if cmfsBin == "" {
				cmfsBin = filepath.Join(work, "cmfs")
				if cmfsErr = bench.GoBuild(ctx, root, cmfsBin, "./cmd/cmfs"); cmfsErr != nil {
					cmfsBin = ""
				}
			}
		}
		return cmfsBin, cmfsErr
	}
	for _, name := range opts.impls {
		switch name {
		case bench.NativeName:
			impls = append(impls, bench.Native{})
			desc[name] = "the backing directory itself, no FUSE"
		case bench.LoopbackName, bench.KillprivName:
			bin := filepath.Join(work, "loopbackfs")
			if err := bench.GoBuild(ctx, root, bin, "./bench/cmd/loopbackfs"); err != nil {
				notes = append(notes, fmt.Sprintf("%s: not measured: %v", name, err))
				desc[name] = "n/a (build failed)"
				continue
			}
			argv := []string{bin}
			desc[name] = "go-fuse fs.NewLoopbackRoot + fs.Mount, default options (1 s entry/attr timeouts, FUSE passthrough as root), separate process"
			if name == bench.KillprivName {
				argv = append(argv, "-killpriv")
				desc[name] = "as loopback, and asking for FUSE_HANDLE_KILLPRIV_V2 as cmfs does (a write through passthrough then asks the server nothing)"
			}
			impls = append(impls, &bench.Server{
				Label:   name,
				Command: func(backing, mnt string) []string { return append(slices.Clone(argv), backing, mnt) },
				Log:     filepath.Join(runDir, name+".log"),
			})
		case bench.PassthroughName:
			bin, err := buildPassthrough(ctx, work)
			if err != nil {
				notes = append(notes, fmt.Sprintf("%s: not measured: %v", name, err))
				desc[name] = "n/a (build failed)"
				continue
			}
			impls = append(impls, &bench.Server{
				Label:   name,
				Command: func(backing, mnt string) []string { return []string{bin, "-f", "-o", "source=" + backing, mnt} },
				Log:     filepath.Join(runDir, name+".log"),
			})
			desc[name] = "libfuse example passthrough_ll -f -o source=DIR: default cache=auto (1 s timeouts), multi-threaded, no writeback cache, no kernel passthrough"
		case bench.CmfsName, bench.IntervalName:
			bin, err := buildCmfs()
			if err != nil {
				notes = append(notes, fmt.Sprintf("%s: not measured, n/a: %v", name, err))
				desc[name] = "n/a (./cmd/cmfs does not build)"
				continue
			}
			if name == bench.CmfsName {
				impls = append(impls, cmfsDaemon(name, bin))
				desc[name] = bin + " mount --daemon BACKING MNT (defaults: state in BACKING/.cmfs, --sync=always), unmounted with cmfs umount"
				continue
			}
			impls = append(impls, cmfsDaemon(name, bin, "--sync=interval"))
			desc[name] = bin + " mount --daemon --sync=interval BACKING MNT (events written before an operation returns, flushed within the default interval), otherwise as cmfs"
		case base.name:
			if base.err != nil {
				notes = append(notes, fmt.Sprintf("%s: not measured, n/a: %v", name, base.err))
				desc[name] = "n/a (no such revision)"
				continue
			}
			bin := filepath.Join(work, "cmfs-"+base.short)
			if err := bench.BuildRevision(ctx, root, base.short, filepath.Join(work, "base-src"), bin, "./cmd/cmfs"); err != nil {
				notes = append(notes, fmt.Sprintf("%s: not measured, n/a: %v", name, err))
				desc[name] = "n/a (./cmd/cmfs at " + base.short + " does not build)"
				continue
			}
			impls = append(impls, cmfsDaemon(name, bin))
			desc[name] = fmt.Sprintf("cmfs as of %s (-base %s; git archive, go build ./cmd/cmfs offline) into %s, mounted and unmounted as cmfs is", base.short, base.rev, bin)
		}
	}
	return impls, desc, notes
}

// cmfsDaemon runs the cmfs binary bin as column name, mounted with flags
// added to mount --daemon; its commit counters are read with cmfs status.
func cmfsDaemon(name, bin string, flags ...string) *bench.Daemon {
	return &bench.Daemon{
		Label: name,
		MountCommand: func(backing, mnt string) []string {
			return append(append([]string{bin, "mount", "--daemon"}, flags...), backing, mnt)
		},
		UnmountCommand: func(mnt string) []string { return []string{bin, "umount", mnt} },
		StatusCommand: func(backing, _ string) []string {
			return []string{bin, "status", "--state", filepath.Join(backing, ".cmfs"), "--json"}
		},
	}
}

// exampleDir holds libfuse's examples as Debian's libfuse3-dev ships them.
const exampleDir = "/usr/share/doc/libfuse3-dev/examples"

// buildPassthrough compiles passthrough_ll from the installed libfuse3-dev
// examples (gunzipping them when Debian shipped them compressed); the
// sources are never part of this repository.
func buildPassthrough(ctx context.Context, work string) (string, error) {
	src := filepath.Join(work, "passthrough_ll-src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", err
	}
	for _, name := range []string{"passthrough_ll.c", "passthrough_helpers.h"} {
		if err := copyExample(ctx, name, filepath.Join(src, name)); err != nil {
			return "", err
		}
	}
	flags, err := exec.CommandContext(ctx, "pkg-config", "fuse3", "--cflags", "--libs").Output()
	if err != nil {
		return "", fmt.Errorf("pkg-config fuse3 (is libfuse3-dev installed?): %w", err)
	}
	bin := filepath.Join(work, "passthrough_ll")
	args := append([]string{"-O2", "-Wall", "-o", bin, filepath.Join(src, "passthrough_ll.c")}, strings.Fields(string(flags))...)
	if out, err := exec.CommandContext(ctx, "cc", args...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("cc passthrough_ll.c: %w: %s", err, bench.FirstLines(string(out), 4))
	}
	return bin, nil
}

func copyExample(ctx context.Context, name, dst string) error {
	plain := filepath.Join(exampleDir, name)
	if b, err := os.ReadFile(plain); err == nil {
		return os.WriteFile(dst, b, 0o644)
	}
	out, err := exec.CommandContext(ctx, "gunzip", "-c", plain+".gz").Output()
	if err != nil {
		return fmt.Errorf("%s (or .gz) from libfuse3-dev: %w", plain, err)
	}
	return os.WriteFile(dst, out, 0o644)
}

// journalRowName begins the journal benchmark's row name.
const journalRowName = "journal appends"

// journalRow runs the journal benchmark: writers concurrent appenders,
// durable, on the filesystem of the backing directories.
func journalRow(ctx context.Context, work, runDir string, writers, events int, logf func(string, ...any)) *bench.Row {
	row := &bench.Row{
		Name:    fmt.Sprintf("%s, %d writers (durable)", journalRowName, writers),
		Unit:    bench.EventsPerSec,
		Targets: []bench.Target{{Min: 50000}},
		Only:    bench.CmfsName,
	}
	root := filepath.Dir(work)
	bin := filepath.Join(work, "journalbench")
	if err := bench.GoBuild(ctx, root, bin, "./bench/cmd/journalbench"); err != nil {
		row.Fail(bench.CmfsName, err)
		return row
	}
	dir := filepath.Join(runDir, "journal")
	out, err := exec.CommandContext(ctx, bin, "-dir", dir, "-writers", fmt.Sprint(writers), "-events", fmt.Sprint(events)).CombinedOutput()
	if err != nil {
		row.Fail(bench.CmfsName, fmt.Errorf("journalbench: %w: %s", err, bench.FirstLines(string(out), 3)))
		logf("[%s] cmfs: %v", row.Name, err)
		return row
	}
	var n int
	var secs float64
	if _, err := fmt.Sscanf(string(bytes.TrimSpace(out)), "events=%d seconds=%g", &n, &secs); err != nil || secs <= 0 {
		row.Fail(bench.CmfsName, fmt.Errorf("journalbench printed %q", out))
		return row
	}
	m := bench.Measurement{Elapsed: time.Duration(secs * float64(time.Second)), Ops: n}
	row.Add(bench.CmfsName, bench.EventsPerSec.Value(m))
	logf("[%s] cmfs: %s events/s (%d events in %.2fs)", row.Name, bench.EventsPerSec.Format(bench.EventsPerSec.Value(m)), n, secs)
	return row
}

// progress logs every run to stderr as it completes.
type progress struct{ logf func(string, ...any) }

func (p progress) Ran(w *bench.Workload, impl string, rep int, m bench.Measurement, err error) {
	if err != nil {
		p.logf("[%s] %s run %d: %v", w.Name, impl, rep+1, err)
		return
	}
	p.logf("[%s] %s run %d: %s %s (%v)", w.Name, impl, rep+1, w.Unit.Format(w.Unit.Value(m)), w.Unit, m.Elapsed.Round(time.Millisecond))
}

// fileLimit is the RLIMIT_NOFILE the servers inherit: passthrough_ll holds
// an O_PATH descriptor per inode the kernel knows, tens of thousands here.
const fileLimit = 1 << 20

// raiseFileLimit raises RLIMIT_NOFILE (hard limit too, as root) for this
// process and, because it is set explicitly, for the servers it starts.
func raiseFileLimit() (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	want := syscall.Rlimit{Cur: max(lim.Cur, fileLimit), Max: max(lim.Max, fileLimit)}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err != nil {
		// Unprivileged: the soft limit can still go up to the hard one.
		want = syscall.Rlimit{Cur: lim.Max, Max: lim.Max}
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err != nil {
			return 0, err
		}
	}
	return want.Cur, nil
}
