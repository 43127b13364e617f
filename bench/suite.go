package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Column names of the baselines that targets refer to.
const (
	NativeName   = "native"
	LoopbackName = "loopback"
	// KillprivName is go-fuse loopback that also asks for
	// FUSE_HANDLE_KILLPRIV_V2, as cmfs does, so that a write through
	// passthrough asks the server nothing: what the kernel's passthrough
	// path costs a write, with nothing of cmfs in it. Not a default column.
	KillprivName    = "loopback_killpriv"
	PassthroughName = "passthrough_ll"
	CmfsName        = "cmfs"
	// IntervalName is cmfs mounted with --sync=interval: every event is
	// written before its operation returns and flushed within the
	// interval, instead of before it returns (--sync=always, the cmfs
	// column).
	IntervalName = "cmfs interval"
)

// RevisionName names the column of cmfs built at an earlier git revision
// (abbreviated hash): cmfs@c975bd5.
func RevisionName(rev string) string { return CmfsName + "@" + rev }

// Config sizes the workloads.
type Config struct {
	FileSize  int64 // the large file of the data-path workloads
	Files     int   // small files per metadata workload
	SmallSize int   // size of each small file
	Workers   int   // parallel workers of the parallel metadata workloads
	Writers   int   // concurrent writers of the many-writers workload
	Reps      int   // runs per metadata workload and implementation; the table shows the median
	DataReps  int   // runs per large-file workload: the virtual disk's throughput is noisier
	// Best shows the best run of each workload instead of the median:
	// interference on a shared machine only ever slows a run down.
	Best bool
	// Cold makes every run marked Cold start with sync and drop_caches.
	Cold bool
	// Timeout bounds one run; a FUSE mount that exceeds it is aborted and
	// counted as failed for the rest of the suite.
	Timeout time.Duration
	// FioRuntime is how long fio's random writes are counted, after a
	// ramp of at least FioRamp that outlasts the open (FioRandWrite).
	FioRuntime, FioRamp time.Duration
}

// DefaultConfig is the full benchmark of the issue.
func DefaultConfig() Config {
	return Config{
		FileSize:  1 << 30,
		Files:     10000,
		SmallSize: 4 << 10,
		Workers:   8,
		Writers:   64,
		Reps:      3,
		DataReps:  7,
		Cold:      true,
		Timeout:   3 * time.Minute,
		// FioRuntime as the issue measured; FioRamp covers most opens,
		// and a slower one lengthens it (fioRun).
		FioRuntime: 10 * time.Second,
		FioRamp:    3 * time.Second,
	}
}

// QuickConfig is a smoke run of the same workloads in well under a minute.
func QuickConfig() Config {
	cfg := DefaultConfig()
	cfg.FileSize = 64 << 20
	cfg.Files = 1000
	cfg.Reps = 1
	cfg.DataReps = 1
	cfg.Timeout = time.Minute
	cfg.FioRuntime, cfg.FioRamp = 3*time.Second, time.Second
	return cfg
}

// Workload is one row of the table: a timed run in a directory served by
// any implementation.
type Workload struct {
	Name    string
	Unit    Unit
	Targets []Target
	// Cold asks for sync and drop_caches before every run.
	Cold bool
	// Data marks a large-file workload, run Config.DataReps times.
	Data bool
	// PerOp marks a workload of many small changes whose operations are
	// timed one by one (FileSet) and around whose runs the commit path of
	// a mount that reports one (Mount.Commit) is read, for the per-op
	// table.
	PerOp bool
	// Threads is how many threads a small-file workload runs its
	// operations on (0: not one of those).
	Threads int
	// Run does one timed repetition in dir. Runs of different reps use
	// different files; a workload may use the files an earlier workload of
	// the same rep left (a read reads what the write wrote).
	Run func(dir string, rep int) (Measurement, error)
	// Prepare, if set, runs once in each subject's directory before the
	// workload's first run, untimed: it makes the files the runs change.
	Prepare func(dir string) error
	// Needs names the earlier workload of the same list whose files the
	// runs use (an overwrite, the creates'): picked alone, it runs too.
	Needs string
}

// Workloads returns the large-file rows of the suite, in the order they
// must run. SmallWorkloads follow them.
func Workloads(cfg Config) []Workload {
	big := func(dir string, rep int) string { return filepath.Join(dir, fmt.Sprintf("big-%d", rep)) }
	data := func(min float64) []Target { return []Target{{Base: NativeName, Min: min}} }
	size := Size(cfg.FileSize)

	// fioRun is fio's random writes into the large file of the rep (the
	// data rows leave it; laid out here, untimed, if they did not), with
	// an fsync every fsyncEvery writes. Its ramp outlasts twice the time
	// an open for writing of the file takes on the column (cmfs copies
	// the original at every such open), so fio counts only writes; the
	// cache is dropped again after that probe.
	fioRun := func(fsyncEvery int) func(dir string, rep int) (Measurement, error) {
		return func(dir string, rep int) (Measurement, error) {
			p := big(dir, rep)
			if fi, err := os.Stat(p); err != nil {
				if _, err := SeqWrite(p, cfg.FileSize, uint64(rep)+3000); err != nil {
					return Measurement{}, err
				}
			} else if fi.Size() != cfg.FileSize {
				if _, err := Overwrite(p, cfg.FileSize, uint64(rep)+3000); err != nil {
					return Measurement{}, err
				}
			}
			open, err := OpenTime(p)
			if err != nil {
				return Measurement{}, err
			}
			if cfg.Cold {
				if err := DropCaches(); err != nil {
					return Measurement{}, err
				}
			}
			return FioRandWrite(context.Background(), p, cfg.FileSize, fsyncEvery, max(cfg.FioRamp, 2*open+time.Second), cfg.FioRuntime)
		}
	}

	return []Workload{
		{
			Name: fmt.Sprintf("seq write %s (1 MiB writes, fsync)", size), Unit: MBps, Targets: data(0.9), Cold: true, Data: true,
			Run: func(dir string, rep int) (Measurement, error) {
				return SeqWrite(big(dir, rep), cfg.FileSize, uint64(rep)+1)
			},
		},
		{
			Name: fmt.Sprintf("seq read %s (cold)", size), Unit: MBps, Targets: data(0.95), Cold: true, Data: true,
			Run: func(dir string, rep int) (Measurement, error) {
				return SeqRead(big(dir, rep))
			},
		},
		{
			Name: fmt.Sprintf("O_TRUNC overwrite %s (fsync)", size), Unit: Seconds, Targets: data(1 / 1.1), Cold: true, Data: true,
			Run: func(dir string, rep int) (Measurement, error) {
				return Overwrite(big(dir, rep), cfg.FileSize, uint64(rep)+1000)
			},
		},
		{
			Name: fmt.Sprintf("4 KiB in-place pwrite into %s", size), Unit: Millis, Cold: true, Data: true,
			Run: func(dir string, rep int) (Measurement, error) {
				return WriteAt(big(dir, rep), cfg.FileSize/2, 4096, uint64(rep)+2000)
			},
		},
		// fio's 4 KiB random writes into that file, as a database updates
		// its files: ops/s are writes per second (IOPS). Runs as many
		// times as the metadata rows: each is ramp + FioRuntime long.
		{
			Name: fmt.Sprintf("fio 4 KiB random writes into %s, fsync every 64", size), Unit: OpsPerSec, Targets: data(0.8), Cold: true,
			Run: fioRun(64),
		},
		{
			Name: fmt.Sprintf("fio 4 KiB random writes into %s, no fsync", size), Unit: OpsPerSec, Targets: data(0.9), Cold: true,
			Run: fioRun(0),
		},
	}
}

// DataFootprint is about the most the large-file rows leave on the run's
// filesystem at once, columns of them cmfs's; none of it is removed
// before the whole run ends. Every column has a large file per run (the
// data rows run DataReps times, the fio rows Reps times), and a cmfs
// column keeps originals of them: the inode each O_TRUNC overwrite
// replaced, and the copy each open for writing took (the in-place
// write's, and each fio run's).
func DataFootprint(cfg Config, columns, cmfsColumns int) int64 {
	files := int64(max(cfg.DataReps, cfg.Reps))
	originals := 2*int64(cfg.DataReps) + 2*int64(cfg.Reps)
	return (int64(columns)*files + int64(cmfsColumns)*originals) * cfg.FileSize
}

// SmallFootprint is about what a column's small-file rows write on its
// fresh ext4: every rep's files, as much again for the originals cmfs
// keeps of the overwritten ones, and as much for the filesystem's own
// blocks. The image (SmallImageSize) is sparse: this is what it fills.
func SmallFootprint(cfg Config) int64 {
	return 3 * int64(cfg.Reps) * 3 * int64(cfg.Files) * int64(cfg.SmallSize)
}

// SmallImageSize is room on a column's filesystem of the small-file rows
// (SmallScratch) for every rep's files, the originals cmfs keeps of the
// overwritten and unlinked ones, and its state directory, with ext4's
// default inode ratio giving inodes to spare.
func SmallImageSize(cfg Config) int64 {
	files := int64(cfg.Reps) * 3 * int64(cfg.Files) // one, par and many sets
	return max(8*files*int64(cfg.SmallSize), 4<<30)
}

// SmallScratch is where the small-file rows run unless told otherwise:
// a fresh ext4 (mkfs.ext4's defaults, with its journal) for every
// column. Creates and unlinks are what a filesystem's history changes
// most; on a shared one, every column's runs would start from what the
// others left.
func SmallScratch(cfg Config) Scratch {
	return Scratch{Type: "ext4", Size: SmallImageSize(cfg), PerColumn: true}
}

// warmFiles bounds the files of the warm lstat row. The kernel keeps a
// FUSE entry for 1 s (go-fuse's default; loopback's and cmfs's): a timed
// pass is served from that cache only if the untimed pass before it ends
// well inside the second. Otherwise it meets entries that expired and asks
// the server for each, and for the next, at the cold row's pace: 10,000
// cold lookups take 0.8–1.3 s through FUSE here, 2,500 a quarter of that.
const warmFiles = 2500

func warm(cfg Config) int { return min(cfg.Files, warmFiles) }

// SmallWorkloads returns the rows of many small changes and lookups, in
// the order they must run: creates, lstats of what they made, overwrites
// of it, unlinks.
func SmallWorkloads(cfg Config) []Workload {
	set := func(dir string, rep int, name string, workers int) FileSet {
		return FileSet{Dir: filepath.Join(dir, fmt.Sprintf("small-%d", rep), name), N: cfg.Files, Workers: workers, Size: cfg.SmallSize}
	}
	one := func(dir string, rep int) FileSet { return set(dir, rep, "one", 1) }
	par := func(dir string, rep int) FileSet { return set(dir, rep, "par", cfg.Workers) }
	many := func(dir string, rep int) FileSet { return set(dir, rep, "many", cfg.Writers) }
	meta := []Target{{Base: LoopbackName, Min: 0.9}, {Base: PassthroughName, Min: 1.0}}
	// The commit-path issue's targets for the small changes, against
	// loopback run side by side: cmfs (--sync=always) and cmfs interval.
	commit := func(always, interval float64) []Target {
		return []Target{{Base: LoopbackName, Min: always}, {Subject: IntervalName, Base: LoopbackName, Min: interval}}
	}
	files, small := Count(cfg.Files), Size(int64(cfg.SmallSize))
	threads := func(n int) string {
		if n == 1 {
			return "1 thread"
		}
		return fmt.Sprintf("%d threads", n)
	}
	create := func(n int) string { return fmt.Sprintf("create+write+close %s × %s, %s", files, small, threads(n)) }
	createOne, createPar := create(1), create(cfg.Workers)
	return []Workload{
		{
			Name: createOne, Unit: OpsPerSec, Targets: commit(0.65, 0.95), Cold: true, PerOp: true, Threads: 1,
			Run: func(dir string, rep int) (Measurement, error) { return one(dir, rep).Create() },
		},
		{
			Name: createPar, Unit: OpsPerSec, Targets: commit(0.9, 0.95), Cold: true, PerOp: true, Threads: cfg.Workers,
			Run: func(dir string, rep int) (Measurement, error) { return par(dir, rep).Create() },
		},
		{
			Name: fmt.Sprintf("create+write+close %s × %s, %s", files, small, threads(cfg.Writers)), Unit: OpsPerSec, Targets: commit(0.9, 0.95), Cold: true, PerOp: true, Threads: cfg.Writers,
			Run: func(dir string, rep int) (Measurement, error) { return many(dir, rep).Create() },
		},
		{
			Name: fmt.Sprintf("lstat %s (cold)", files), Unit: OpsPerSec, Targets: meta, Cold: true, Needs: createOne,
			Run: func(dir string, rep int) (Measurement, error) { return one(dir, rep).Stat() },
		},
		{
			// Cold too: the untimed first pass starts from the same state on
			// every implementation, and passthrough_ll (an fd per known
			// inode) does not accumulate the inodes of every rep.
			Name: fmt.Sprintf("lstat %s (warm: 2nd pass)", Count(warm(cfg))), Unit: OpsPerSec, Targets: meta, Cold: true, Needs: createOne,
			Run: func(dir string, rep int) (Measurement, error) {
				s := one(dir, rep)
				s.N = warm(cfg)
				if _, err := s.Stat(); err != nil {
					return Measurement{}, err
				}
				return s.Stat()
			},
		},
		// A shell's `>` over each of the files the creates made (they are
		// then unlinked as overwritten). The commit-path issue sets a
		// target for one thread only; the 8-thread row reports what cmfs's
		// preserve-and-journal costs, against the baselines in the ratios.
		{
			Name: fmt.Sprintf("overwrite with > %s × %s, %s", files, small, threads(1)), Unit: OpsPerSec, Targets: commit(0.6, 0.9), Cold: true, PerOp: true, Threads: 1, Needs: createOne,
			Run: func(dir string, rep int) (Measurement, error) { return one(dir, rep).Overwrite() },
		},
		{
			Name: fmt.Sprintf("overwrite with > %s × %s, %s", files, small, threads(cfg.Workers)), Unit: OpsPerSec, Cold: true, PerOp: true, Threads: cfg.Workers, Needs: createPar,
			Run: func(dir string, rep int) (Measurement, error) { return par(dir, rep).Overwrite() },
		},
		{
			Name: fmt.Sprintf("unlink %s, %s", files, threads(1)), Unit: OpsPerSec, Targets: commit(0.6, 0.95), Cold: true, PerOp: true, Threads: 1, Needs: createOne,
			Run: func(dir string, rep int) (Measurement, error) { return one(dir, rep).Unlink() },
		},
		{
			Name: fmt.Sprintf("unlink %s, %s", files, threads(cfg.Workers)), Unit: OpsPerSec, Targets: commit(0.9, 0.95), Cold: true, PerOp: true, Threads: cfg.Workers, Needs: createPar,
			Run: func(dir string, rep int) (Measurement, error) { return par(dir, rep).Unlink() },
		},
	}
}

// XFSWorkloads returns the rows run with every backing directory on XFS
// (OnXFS), where cmfs keeps an original by reflink: the in-place pwrite of
// Workloads, into a file that Prepare writes once per column, through the
// column's mount, as the seq write makes it for the row on the run's own
// filesystem. Every run patches that file with new content, so cmfs keeps
// a new original each time, as it does for a fresh file; its checksum is
// cached from the close before, as the O_TRUNC overwrite leaves it for the
// other row.
func XFSWorkloads(cfg Config) []Workload {
	const file = "big-xfs"
	return []Workload{{
		Name: fmt.Sprintf("4 KiB in-place pwrite into %s, XFS", Size(cfg.FileSize)), Unit: Millis, Cold: true, Data: true,
		Targets: []Target{{Base: NativeName, Min: 0.5}}, // ≤ 2× native time
		Prepare: func(dir string) error {
			_, err := SeqWrite(filepath.Join(dir, file), cfg.FileSize, 4000)
			return err
		},
		Run: func(dir string, rep int) (Measurement, error) {
			return WriteAt(filepath.Join(dir, file), cfg.FileSize/2, 4096, uint64(rep)+2000)
		},
	}}
}

// Progress is told about every run as it completes.
type Progress interface {
	Ran(w *Workload, impl string, rep int, m Measurement, err error)
}

// Subject is one mounted implementation the suite runs on.
type Subject struct {
	Name  string
	Mount *Mount
}

// Run runs every workload on every subject and returns one row per
// workload. The runs of a workload are interleaved across subjects (and
// the order rotates from rep to rep) so that drift in the machine's load
// spreads over all columns instead of landing on one. A run that fails is
// recorded in its row; a run that times out aborts that subject's FUSE
// connection and fails it for the rest of the suite. Run stops early, with
// the rows so far, when ctx ends or caches cannot be dropped. The op times
// of a run are pooled into its row; for a PerOp workload on a mount with a
// commit path, the commit counters are read before the caches are dropped
// and after the run, outside the timed part.
func Run(ctx context.Context, cfg Config, workloads []Workload, subjects []Subject, p Progress) ([]*Row, error) {
	broken := map[string]error{}
	var rows []*Row
	for wi := range workloads {
		w := &workloads[wi]
		row := &Row{Name: w.Name, Unit: w.Unit, Targets: w.Targets, Best: cfg.Best, Threads: w.Threads}
		rows = append(rows, row)
		unprepared := map[string]bool{}
		for _, s := range subjects {
			if w.Prepare == nil {
				break
			}
			if err := ctx.Err(); err != nil {
				return rows, err
			}
			if _, ok := broken[s.Name]; ok {
				continue
			}
			_, err := runTimed(cfg.Timeout, s.Mount, func() (Measurement, error) { return Measurement{}, w.Prepare(s.Mount.Dir) })
			if err != nil {
				row.Fail(s.Name, fmt.Errorf("prepare: %w", err))
				unprepared[s.Name] = true
				if _, timedOut := err.(timeoutError); timedOut {
					broken[s.Name] = fmt.Errorf("not run: mount aborted after a timeout preparing %q", w.Name)
				}
			}
		}
		reps := cfg.Reps
		if w.Data {
			reps = cfg.DataReps
		}
		for rep := range reps {
			for k := range subjects {
				s := subjects[(k+rep)%len(subjects)]
				if err := ctx.Err(); err != nil {
					return rows, err
				}
				if err, ok := broken[s.Name]; ok {
					row.Fail(s.Name, err)
					continue
				}
				if unprepared[s.Name] {
					continue
				}
				commits := w.PerOp && s.Mount.Commit != nil
				var before *Commit
				var beforeErr error
				if commits {
					before, beforeErr = s.Mount.Commit(ctx)
				}
				if cfg.Cold && w.Cold {
					if err := DropCaches(); err != nil {
						return rows, fmt.Errorf("drop caches: %w", err)
					}
				}
				// The server's CPU, read as close around the run as can be:
				// its background work (a journal's flush) may fall on
				// either side, a small share of a run of thousands of
				// operations.
				cpu := w.PerOp && s.Mount.CPU != nil
				var cpuBefore time.Duration
				if cpu {
					var cerr error
					cpuBefore, cerr = s.Mount.CPU()
					cpu = cerr == nil
				}
				m, err := runTimed(cfg.Timeout, s.Mount, func() (Measurement, error) { return w.Run(s.Mount.Dir, rep) })
				if cpu && err == nil {
					if cpuAfter, cerr := s.Mount.CPU(); cerr == nil {
						row.AddCPU(s.Name, cpuAfter-cpuBefore, m.Ops)
					}
				}
				if p != nil {
					p.Ran(w, s.Name, rep, m, err)
				}
				if commits && err == nil {
					after, afterErr := s.Mount.Commit(ctx)
					row.AddCommit(s.Name, before, after, errors.Join(beforeErr, afterErr), m.Ops)
				}
				if err != nil {
					row.Fail(s.Name, err)
					if _, timedOut := err.(timeoutError); timedOut {
						broken[s.Name] = fmt.Errorf("not run: mount aborted after a timeout in %q", w.Name)
					}
					continue
				}
				row.Add(s.Name, w.Unit.Value(m))
				if w.PerOp && m.Latencies != nil {
					row.AddLatencies(s.Name, m.Latencies)
				}
			}
		}
	}
	return rows, nil
}

type timeoutError struct {
	after time.Duration
	abort error
}

func (e timeoutError) Error() string {
	if e.abort != nil {
		return fmt.Sprintf("timed out after %v (abort: %v)", e.after, e.abort)
	}
	return fmt.Sprintf("timed out after %v; FUSE connection aborted", e.after)
}

// runTimed runs fn, and if it outlives timeout aborts m's FUSE connection
// so that fn's blocked calls fail and it returns.
func runTimed(timeout time.Duration, m *Mount, fn func() (Measurement, error)) (Measurement, error) {
	type result struct {
		m   Measurement
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := fn()
		done <- result{r, err}
	}()
	if timeout <= 0 {
		r := <-done
		return r.m, r.err
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case r := <-done:
		return r.m, r.err
	case <-timer.C:
	}
	abortErr := m.Abort()
	if abortErr == nil {
		<-done // the aborted connection fails every pending call
	}
	return Measurement{}, timeoutError{after: timeout, abort: abortErr}
}

// Size formats a byte count the way the workload names use it: 1 GiB, 4 KiB.
func Size(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}

// Count formats a file count: 10k, 1000.
func Count(n int) string {
	if n >= 10000 && n%1000 == 0 {
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}
