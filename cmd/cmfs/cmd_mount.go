package main

import (
	"github.com/cmfs-project/cmfs/internal/cli"

	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/cmfs-project/cmfs/cmroot"
	"github.com/cmfs-project/cmfs/control"
	"github.com/cmfs-project/cmfs/fusefs"
	"github.com/cmfs-project/cmfs/internal/statedir"
	"github.com/cmfs-project/cmfs/internal/systemd"
	"github.com/cmfs-project/cmfs/journal"
	"github.com/cmfs-project/cmfs/protect"
	"github.com/cmfs-project/cmfs/upkeep"
)

type mountOptions struct {
	state             string
	cmroot            string
	retain            time.Duration
	exclude           []string
	noDefaultExcludes bool
	options           []string
	daemon            bool
	readyTimeout      time.Duration
	debug             bool
	journalReserve    cli.ByteSize
	sync              string
	metrics           string
	log               cli.LogFlags
}

func newMountCmd(g *globalOptions) *cobra.Command {
	var opts mountOptions
	cmd := &cobra.Command{
		Use:   "mount [flags] BACKING MOUNTPOINT",
		Short: "Mount BACKING at MOUNTPOINT with protection",
		Long: `Mount the backing directory at the mountpoint. Every delete or overwrite
through the mount preserves the original in cmroot and journals an event.

With --metrics ADDR the mount serves Prometheus metrics at
http://ADDR/metrics while it runs: operations by result, originals
preserved by method, cmroot's size, the journal's flushes and their
latency, intents in flight, what recovery found and the --sync mode
(docs/metrics.md lists them). Plain HTTP without authentication: bind
it where only those who may see these numbers can reach it.

The mount runs in the foreground until SIGINT/SIGTERM or until it is
unmounted (cmfs umount, or umount(8)), then exits 0 with everything
flushed. With --daemon it runs in the background and the command returns
once the mount is ready; the background process logs to STATE/cmfs.log.

Under systemd (Type=notify: NOTIFY_SOCKET set) the foreground mount
reports READY=1 once the mount answers through FUSE, STATUS= lines on
the way, and STOPPING=1 as it begins to unmount; with WatchdogSec= it
sends WATCHDOG=1 while a statfs through the mount answers.`,
		Example: `  cmfs mount /data/warehouse /mnt/warehouse
  cmfs mount --daemon --retain 72h --exclude '_tmp*' -o allow_other /data/warehouse /mnt/warehouse
  cmfs mount --daemon --metrics 127.0.0.1:9890 /data/warehouse /mnt/warehouse`,
		Args: exactArgs(2, "BACKING and MOUNTPOINT"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runMount(cmd.Context(), g, opts, args)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.state, "state", "", "state `DIR` for the journal, cmroot and control socket (default BACKING/.cmfs)")
	f.StringVar(&opts.cmroot, "cmroot", "", "cmroot `DIR` for preserved originals (default STATE/cmroot; keep it on the backing filesystem)")
	f.DurationVar(&opts.retain, "retain", cmroot.DefaultRetain, "keep preserved originals at least this long")
	f.StringArrayVar(&opts.exclude, "exclude", nil, "path component `GLOB` not to protect, added to the defaults (repeatable)")
	f.BoolVar(&opts.noDefaultExcludes, "no-default-excludes", false, "protect engine scratch paths too ("+strings.Join(statedir.DefaultExcludes, ", ")+")")
	f.StringArrayVarP(&opts.options, "options", "o", nil, "mount `OPTS`, comma separated (allow_other implies default_permissions)")
	f.BoolVar(&opts.daemon, "daemon", false, "run in the background; return once the mount is ready")
	f.DurationVar(&opts.readyTimeout, "ready-timeout", daemonTimeout, "with --daemon, stop the mount if it is not ready within this long (0: wait as long as it works toward it: recovery after a power loss may take long)")
	f.BoolVar(&opts.debug, "debug", false, "log every FUSE request (implies --log-level debug)")
	opts.journalReserve = journal.DefaultReserve
	f.Var(&opts.journalReserve, "journal-reserve", "space kept allocated for the journal; changes are refused (ENOSPC) while it cannot be kept")
	f.StringVar(&opts.sync, "sync", "always", "when a change is durable: `always` (before it returns) or interval[:DUR] (written before it returns, so a kill -9 loses nothing; flushed within DUR, default 50ms, so a power loss may take back the last DUR)")
	f.StringVar(&opts.metrics, "metrics", "", "serve Prometheus metrics on `ADDR` (default: off)")
	opts.log.Register(f)
	return cmd
}

// exactArgs is cobra.ExactArgs with a message that names the arguments.
func exactArgs(n int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return fmt.Errorf("%s: need %s, got %d argument(s) (see '%s --help')", cmd.Name(), names, len(args), cmd.CommandPath())
		}
		return nil
	}
}

// mountPlan is a validated mount request.
type mountPlan struct {
	mountpoint string
	cfg        fusefs.Config
	metrics    string // --metrics, checked
}

func (p mountPlan) target() target {
	return target{state: p.cfg.State, backing: p.cfg.Backing}
}

// planMount validates the request and prepares the state directory.
func planMount(opts mountOptions, args []string) (mountPlan, error) {
	var p mountPlan
	backing, err := cli.Directory("backing directory", args[0])
	if err != nil {
		return p, err
	}
	state := filepath.Join(backing, statedir.Name)
	if opts.state != "" {
		if state, err = filepath.Abs(opts.state); err != nil {
			return p, err
		}
	}
	cmrootDir := filepath.Join(state, statedir.CMRootDir)
	if opts.cmroot != "" {
		if cmrootDir, err = filepath.Abs(opts.cmroot); err != nil {
			return p, err
		}
	}
	if opts.retain <= 0 {
		return p, fmt.Errorf("--retain %s: must be positive", opts.retain)
	}
	excludes := append([]string{}, statedir.DefaultExcludes...)
	if opts.noDefaultExcludes {
		excludes = []string{}
	}
	for _, g := range opts.exclude {
		if _, err := filepath.Match(g, ""); err != nil || g == "" || strings.Contains(g, "/") {
			return p, fmt.Errorf("--exclude %q: not a glob of one path component", g)
		}
		excludes = append(excludes, g)
	}
	// Symlinks resolved, so that a cmroot spelled through one is compared
	// as what it is.
	state, cmrootDir = resolvePath(state), resolvePath(cmrootDir)
	if err := checkStateDirs(backing, state, cmrootDir); err != nil {
		return p, err
	}
	mnt, err := checkMountpoint(args[1], backing, state)
	if err != nil {
		return p, err
	}
	if within(cmrootDir, mnt) {
		return p, fmt.Errorf("cmroot %s is inside the mountpoint %s", cmrootDir, mnt)
	}
	if sock := filepath.Join(state, statedir.SocketFile); len(sock) > maxSocketPath {
		return p, fmt.Errorf("state directory %s is too deep: the control socket path would be %d bytes, a unix socket allows %d", state, len(sock), maxSocketPath)
	}
	syncMode, syncInterval, err := journal.ParseSync(opts.sync)
	if err != nil {
		return p, err
	}
	if err := checkMetricsAddr(opts.metrics); err != nil {
		return p, err
	}
	cfg := fusefs.Config{
		Sync:           syncMode,
		SyncInterval:   syncInterval,
		Backing:        backing,
		State:          state,
		CMRoot:         cmrootDir,
		Retain:         opts.retain,
		JournalReserve: int64(opts.journalReserve),
		Exclude:        excludes,
		Debug:          opts.debug,
	}
	for _, o := range opts.options {
		for _, kv := range strings.Split(o, ",") {
			switch kv = strings.TrimSpace(kv); kv {
			case "":
			case "allow_other":
				cfg.AllowOther = true
			default:
				cfg.Options = append(cfg.Options, kv)
			}
		}
	}
	if err := prepareState(state); err != nil {
		return p, err
	}
	return mountPlan{mountpoint: mnt, cfg: cfg.WithDefaults(), metrics: opts.metrics}, nil
}

// resolvePath returns p with the symlinks of its longest existing prefix
// resolved (the rest may not exist yet).
func resolvePath(p string) string {
	rest := ""
	for d := p; ; d = filepath.Dir(d) {
		if r, err := filepath.EvalSymlinks(d); err == nil {
			return filepath.Join(r, rest)
		}
		if filepath.Dir(d) == d {
			return p
		}
		rest = filepath.Join(filepath.Base(d), rest)
	}
}

// prepareState creates the state directory (0700) and checks that it is
// writable.
func prepareState(state string) error {
	if err := os.MkdirAll(state, 0o700); err != nil {
		return fmt.Errorf("state directory %s cannot be created: %w", state, cli.UnwrapPath(err))
	}
	f, err := os.CreateTemp(state, ".probe*")
	if err != nil {
		return fmt.Errorf("state directory %s is not writable: %w", state, cli.UnwrapPath(err))
	}
	f.Close()
	return os.Remove(f.Name())
}

func runMount(ctx context.Context, g *globalOptions, opts mountOptions, args []string) error {
	plan, err := planMount(opts, args)
	if err != nil {
		return err
	}
	if opts.debug {
		opts.log.Level = cli.LogLevel(slog.LevelDebug) // the FUSE requests are debug lines
	}
	if opts.daemon {
		return runMountDaemon(ctx, g, opts, plan)
	}
	plan.cfg.Logger = opts.log.Logger(g.stderr)
	return runMountForeground(ctx, plan)
}

// openMountJournal opens the journal for writing. The lock says whether
// another mount holds it; a mount that is just exiting (or a reader) gets
// a moment to let go.
//
// With tail, the events the write-ahead file holds whose group flush was
// never confirmed are judged against the disk (protect.TailCheck), and
// tail says what that found; without, they are kept.
func openMountJournal(ctx context.Context, plan mountPlan, tail *protect.TailReport) (*journal.Log, error) {
	path := filepath.Join(plan.cfg.State, statedir.JournalFile)
	jopts := journal.Options{Reserve: plan.cfg.JournalReserve, Sync: plan.cfg.Sync, Interval: plan.cfg.SyncInterval}
	if plan.cfg.Sync == journal.SyncInterval {
		jopts.FlushAll = protect.SyncFS(plan.cfg.Backing, plan.cfg.CMRoot, plan.cfg.State)
	}
	if tail != nil {
		jopts.CheckTail = plan.cfg.TailCheck(tail)
	}
	j, err := journal.Open(path, jopts)
	if errors.Is(err, journal.ErrLocked) {
		if c, st := live(ctx, plan.target()); c != nil {
			c.Close()
			return nil, fmt.Errorf("%s is already mounted at %s (pid %d)", plan.cfg.Backing, st.Mountpoint, st.PID)
		}
		jopts.LockTimeout = 3 * time.Second
		j, err = journal.Open(path, jopts)
	}
	if errors.Is(err, journal.ErrLocked) {
		return nil, fmt.Errorf("%s is already mounted: journal %s is locked by another process", plan.cfg.Backing, path)
	}
	if err != nil {
		return nil, err // journal.Open names the file
	}
	if err := j.Verify(); err != nil {
		j.Close()
		return nil, fmt.Errorf("journal %s fails verification: %w", path, err)
	}
	return j, nil
}

func runMountForeground(ctx context.Context, plan mountPlan) (err error) {
	cfg := plan.cfg
	log := cfg.Logger
	// CMFS_CPUPROFILE=FILE profiles the mount's process until it exits
	// (for measuring; a --daemon child inherits it).
	if p := os.Getenv("CMFS_TRACE"); p != "" {
		if f, perr := os.Create(p); perr == nil {
			if trace.Start(f) == nil {
				defer func() { trace.Stop(); f.Close() }()
			}
		}
	}
	if p := os.Getenv("CMFS_CPUPROFILE"); p != "" {
		if f, perr := os.Create(p); perr == nil {
			if pprof.StartCPUProfile(f) == nil {
				defer func() { pprof.StopCPUProfile(); f.Close() }()
			}
		}
	}
	// The metrics address is taken first: one in use fails the mount
	// before anything is opened. Served once mounted, stopped before the
	// journal and cmroot close (the deferred close below, once served).
	metrics, err := listenMetrics(plan.metrics)
	if err != nil {
		return err
	}
	defer metrics.close()
	cfg.Stats = metrics.opStats()
	// The last mount's record, before this one replaces it (a live mount
	// holding the journal makes the open below fail). One that did not
	// stop cleanly, with a reboot since, may have lost to a power cut what
	// it wrote without flushing: the journal's unverified tail is judged
	// against the disk, and the tree reconciled with the journal. After
	// a kill -9 alone the page cache kept everything: the tail is kept
	// whole (under --sync=interval it holds acknowledged events) and the
	// in-flight table suffices.
	prev, recErr := statedir.ReadRecord(cfg.State)
	boot := statedir.BootID()
	lost := recErr != nil || prev.LostWrites(boot)
	var tail *protect.TailReport
	if lost {
		tail = &protect.TailReport{}
	}
	notifyStatus(log, "opening the journal in "+cfg.State)
	j, err := openMountJournal(ctx, plan, tail)
	if err != nil {
		return err
	}
	if recErr != nil {
		log.Warn("mount record unreadable: reconciling the tree with the journal", slog.Any("err", recErr))
	}
	// The record says the mount stopped cleanly only once the journal and
	// cmroot are closed, everything flushed (this runs after their
	// closes): a mount that exits otherwise is reconciled after a reboot.
	recorded := false
	defer func() {
		if err == nil && recorded {
			if merr := statedir.MarkClean(cfg.State); merr != nil {
				err = fmt.Errorf("mount record: %w", merr)
			}
		}
	}()
	defer func() {
		if cerr := j.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close journal: %w", cerr)
		}
	}()
	store, err := cmroot.Open(cfg.CMRoot, cmroot.Options{Retain: cfg.Retain})
	if err != nil {
		return err // cmroot.Open names the directory
	}
	if store.IndexInMemory() {
		log.Warn("cmroot index kept in memory: no room for it on disk; it is written back at unmount if there is room then, else rebuilt at the next mount",
			slog.String("cmroot", cfg.CMRoot))
	}
	defer func() {
		if cerr := store.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close cmroot: %w", cerr)
		}
	}()

	// Crash recovery: bring cmroot and the journal back into agreement
	// before anything new happens.
	rep, err := upkeep.FsckRetain(j, store, true, cfg.Retain, time.Now())
	if err != nil {
		return fmt.Errorf("recovery fsck: %w", err)
	}
	if !rep.Clean() {
		log.Warn("recovery fsck", slog.String("found", summarize(rep)))
	}

	cfg.Reconcile, cfg.Since, cfg.Tail = lost, prev.Started, tail
	if err := statedir.WriteRecord(cfg.State, statedir.Record{
		Backing:    cfg.Backing,
		Mountpoint: plan.mountpoint,
		CMRoot:     cfg.CMRoot,
		Retain:     cfg.Retain.String(),
		PID:        os.Getpid(),
		Started:    time.Now().UTC(),
		BootID:     boot,
	}); err != nil {
		return err
	}
	recorded = true

	// The control socket answers only once the mount has fully come up
	// (Mount returns after go-fuse's own first requests): that is what
	// "ready" means to `mount --daemon` and to scripts, and a kill -9
	// before it cannot leave the process waiting on its own mount.
	if lost {
		notifyStatus(log, "recovering after an unclean stop and a reboot: judging the journal's tail, reconciling the tree; then mounting "+plan.mountpoint)
	} else {
		notifyStatus(log, "recovering and mounting "+plan.mountpoint)
	}
	server, rec, err := fusefs.Mount(plan.mountpoint, cfg, j, store)
	if f := rec.Findings(cfg.State); f != "" {
		// What recovery found is for the operator (--daemon copies it).
		log.Warn("recovery", slog.Int("journaled", rec.Journaled), slog.Int("damaged", rec.Damaged),
			slog.Int("tail_dropped", rec.TailDropped), slog.Bool("reconciled", rec.Reconciled),
			slog.Int("changed", rec.Changed), slog.Int("added", rec.Added), slog.Int("removed", rec.Removed),
			slog.Int("lost", rec.Lost), slog.String("found", f))
	}
	if rec.Reconciled {
		log.Info("reconciled the tree with the journal after an unclean shutdown and a reboot",
			slog.Int("walked", rec.Walked), slog.Int("hashed", rec.Hashed))
	}
	if err != nil {
		return fmt.Errorf("mount %s: %w", plan.mountpoint, err)
	}
	if addr := metrics.serve(j, store, rec); addr != "" {
		defer metrics.close()
		log.Debug("metrics", slog.String("url", "http://"+addr+"/metrics"))
	}
	ctlCtx, stopCtl := context.WithCancel(context.Background())
	ctlDone := make(chan struct{})
	var ctlErr error
	srv := control.NewServer(j, store, control.Info{
		Mountpoint: plan.mountpoint,
		Backing:    cfg.Backing,
		State:      cfg.State,
		CMRoot:     cfg.CMRoot,
		Retain:     cfg.Retain,
		PathSyncs:  protect.Syncs,
	})
	go func() {
		ctlErr = srv.Serve(ctlCtx, filepath.Join(cfg.State, statedir.SocketFile))
		close(ctlDone)
	}()
	defer func() {
		stopCtl()
		<-ctlDone
	}()
	if err := waitControl(ctx, plan.target(), ctlDone); err != nil {
		server.Unmount()
		if errors.Is(err, errControlExited) {
			return fmt.Errorf("control socket: %w", ctlErr)
		}
		return err
	}
	// Under systemd, ready means the mount answers: a statfs through FUSE
	// (the kernel always asks the daemon) finds it, from this process as a
	// unit ordered after this one would.
	probe := answerProbe{mnt: plan.mountpoint}
	// The watchdog stops as the unmount begins: a busy mount, detached,
	// answers no statfs while it waits for its open files.
	stopWatchdog := func() {}
	if systemd.Enabled() {
		actx, cancel := context.WithTimeout(ctx, answerTimeout)
		err := probe.answers(actx)
		cancel()
		if err != nil {
			server.Unmount()
			return err
		}
		if err := systemd.Ready(fmt.Sprintf("mounted %s on %s (state %s)", cfg.Backing, plan.mountpoint, cfg.State)); err != nil {
			log.Warn("service manager", slog.Any("err", err))
		}
		wctx, cancel := context.WithCancel(context.Background())
		stopWatchdog = cancel
		wdDone := make(chan struct{})
		go func() {
			defer close(wdDone)
			if err := systemd.Watchdog(wctx, probe.answers, log); err != nil {
				log.Warn("service manager", slog.Any("err", err))
			}
		}()
		defer func() {
			cancel()
			<-wdDone
		}()
	}

	log.Debug("mounted", slog.String("backing", cfg.Backing), slog.String("mountpoint", plan.mountpoint),
		slog.String("state", cfg.State), slog.Int("pid", os.Getpid()))
	unmounted := make(chan struct{})
	go func() {
		server.Wait()
		close(unmounted)
	}()

	signalled, ctlStopped := ctx.Done(), (<-chan struct{})(ctlDone)
	for {
		select {
		case <-unmounted:
			log.Debug("unmounted", slog.String("mountpoint", plan.mountpoint))
			// Unmounted from outside (umount, cmfs umount): a clean stop
			// all the same.
			if signalled != nil {
				stopWatchdog()
				notifyStopping(log, "unmounted; closing the journal and cmroot")
			}
			return nil
		case <-signalled:
			signalled = nil
			stopWatchdog()
			notifyStopping(log, "unmounting "+plan.mountpoint)
			if err := server.Unmount(); err != nil {
				if lazyUnmount(log, plan.mountpoint, err) {
					notifyStatus(log, "busy: detached "+plan.mountpoint+"; waiting for its open files to close")
				}
			}
		case <-ctlStopped:
			// The mount keeps protecting; only the sidecar access is gone.
			log.Error("control socket stopped; the mount goes on protecting", slog.Any("err", ctlErr))
			ctlStopped = nil
		}
	}
}

// lazyUnmount detaches a mount that is busy; the kernel ends it when the
// last open file closes, and Wait returns then. It says whether it did.
func lazyUnmount(log *slog.Logger, mnt string, cause error) bool {
	out, err := exec.Command("fusermount3", "-u", "-z", mnt).CombinedOutput()
	if err != nil {
		log.Error("unmount", slog.String("mountpoint", mnt), slog.Any("err", cause), slog.String("fusermount3", firstLine(out, err)))
		return false
	}
	log.Warn("busy: detached it, waiting for open files to close (interrupt again to quit)", slog.String("mountpoint", mnt), slog.Any("err", cause))
	return true
}

// probeChild runs fuseAnswers on mnt in a child process and returns its
// refusal, its first line.
func probeChild(mnt string) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), probeEnv+"="+mnt)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return errors.New(firstLine(out.Bytes(), fmt.Errorf("probe: %w", err)))
	}
	return nil
}

// fuseAnswers is answerProbe's test, run by its child.
func fuseAnswers(mnt string) error {
	m, ok := findMount(mnt)
	if !ok || m.FSType != "fuse.cmfs" {
		return errors.New("no cmfs mount there")
	}
	var st syscall.Stat_t
	if err := syscall.Stat(mnt, &st); err != nil {
		return err
	}
	if unix.Major(st.Dev) != m.Major || unix.Minor(st.Dev) != m.Minor {
		return fmt.Errorf("its stat names device %d:%d, not the mount's %d:%d", unix.Major(st.Dev), unix.Minor(st.Dev), m.Major, m.Minor)
	}
	var fs syscall.Statfs_t
	if err := syscall.Statfs(mnt, &fs); err != nil {
		return err
	}
	if fs.Type != fuseMagic {
		return fmt.Errorf("statfs: not a FUSE file system (f_type %#x)", fs.Type)
	}
	return nil
}

// notifyStopping and notifyStatus tell a service manager, if one
// listens; what fails to reach it is logged, never fatal.
func notifyStopping(log *slog.Logger, status string) {
	if err := systemd.Stopping(status); err != nil {
		log.Warn("service manager", slog.Any("err", err))
	}
}

func notifyStatus(log *slog.Logger, status string) {
	if err := systemd.Status(status); err != nil {
		log.Warn("service manager", slog.Any("err", err))
	}
}

// answerTimeout bounds how long a mount that is up may take to answer a
// statfs before it is not ready.
const answerTimeout = 10 * time.Second

// answerProbe asks a mount whether it answers through FUSE.
type answerProbe struct {
	mnt string
	// busy is held while a statfs is in flight: one stuck in a mount that
	// no longer answers is not joined by another each time the probe
	// runs.
	busy sync.Mutex
}

// fuseMagic is statfs's f_type of a FUSE file system.
const fuseMagic = 0x65735546

// probeEnv, set to a mountpoint in the environment, makes this program
// run fuseAnswers on it and exit: answerProbe's child.
const probeEnv = "CMFS_PROBE_MOUNT"

// answers says whether the mountpoint is this cmfs mount and answers
// within ctx: mountinfo lists a fuse.cmfs mount there, the mountpoint's
// stat names its device, and a statfs, which the kernel sends to the FUSE
// daemon whatever it caches, succeeds.
//
// The stat and statfs run in a child process (this program again, with
// probeEnv), never in the mount's own: a thread waiting on its own mount
// for a request the daemon has read waits uninterruptibly, so a mount
// killed then (the watchdog's SIGABRT of a stopped one) could never
// exit: its /dev/fuse stays open while the thread waits, and the kernel
// aborts the connection only when it closes. A child still waiting when
// the mount dies gets ENOTCONN then.
func (p *answerProbe) answers(ctx context.Context) error {
	if !p.busy.TryLock() {
		return fmt.Errorf("mount %s does not answer: an earlier statfs is still waiting", p.mnt)
	}
	done := make(chan error, 1)
	go func() {
		defer p.busy.Unlock()
		done <- probeChild(p.mnt)
	}()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("mount %s does not answer: %w", p.mnt, err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("mount %s does not answer: statfs: %w", p.mnt, ctx.Err())
	}
}

// errControlExited says the control server ended before it answered.
var errControlExited = errors.New("control server exited")

// waitControl waits until the control server answers.
func waitControl(ctx context.Context, t target, done <-chan struct{}) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		if c, _ := live(ctx, t); c != nil {
			c.Close()
			return nil
		}
		select {
		case <-done:
			return errControlExited
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("control socket %s does not answer", t.socket())
		}
	}
}

// daemonTimeout bounds how long --daemon waits for the mount.
const daemonTimeout = 10 * time.Second

// runMountDaemon starts this program again without --daemon in its own
// session and waits until the mount is ready (its control socket answers
// and the mountpoint is mounted) or the child fails.
func runMountDaemon(ctx context.Context, g *globalOptions, opts mountOptions, plan mountPlan) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("daemon: %w", err)
	}
	// The child gets every option this process settled on, from the
	// command line, the environment or a config file, as flags, which win
	// over the same environment and file it inherits: --daemon=false
	// above all, or a file that says daemon: true would fork it again.
	cfg := plan.cfg
	args := []string{"mount", "--daemon=false", "--state", cfg.State, "--cmroot", cfg.CMRoot, "--retain", cfg.Retain.String(),
		"--journal-reserve", strconv.FormatInt(cfg.JournalReserve, 10), "--sync", journal.FormatSync(cfg.Sync, cfg.SyncInterval),
		"--no-default-excludes=" + strconv.FormatBool(opts.noDefaultExcludes), "--debug=" + strconv.FormatBool(opts.debug)}
	args = append(args, opts.log.Args()...)
	for _, x := range opts.exclude {
		args = append(args, "--exclude", x)
	}
	for _, o := range opts.options {
		args = append(args, "-o", o)
	}
	if plan.metrics != "" {
		args = append(args, "--metrics", plan.metrics)
	}
	args = append(args, "--", cfg.Backing, plan.mountpoint)

	logPath := filepath.Join(cfg.State, statedir.LogFile)
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("daemon log: %w", err)
	}
	defer logf.Close()
	start, err := logf.Seek(0, io.SeekEnd)
	if err != nil {
		return fmt.Errorf("daemon log: %w", err)
	}
	child := exec.Command(exe, args...)
	child.Stdin, child.Stdout, child.Stderr = nil, nil, logf // nil: /dev/null
	// The background process is not a service's main process: a
	// manager's notify socket and watchdog are not its to use.
	child.Env = systemd.Environ(os.Environ())
	child.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := child.Start(); err != nil {
		return fmt.Errorf("daemon: start %s: %w", exe, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- child.Wait() }()

	// No deadline with --ready-timeout 0: a nil channel never fires.
	var deadline <-chan time.Time
	if opts.readyTimeout > 0 {
		timer := time.NewTimer(opts.readyTimeout)
		defer timer.Stop()
		deadline = timer.C
	}
	probe := answerProbe{mnt: plan.mountpoint}
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-exited:
			line := lastLine(logPath, start)
			if line == "" {
				line = fmt.Sprintf("mount process exited (%v) before the mount was ready", err)
			}
			return &cli.ExitError{Code: 1, Msg: strings.TrimPrefix(line, "cmfs: ")}
		case <-deadline:
			child.Process.Signal(syscall.SIGTERM)
			return fmt.Errorf("mount not ready after %s; stopped it (log: %s; recovery after an unclean stop can take longer: --ready-timeout 0 waits for it)", opts.readyTimeout, logPath)
		case <-ctx.Done():
			child.Process.Signal(syscall.SIGTERM)
			return fmt.Errorf("interrupted while waiting for the mount; stopped it")
		case <-tick.C:
		}
		if c, _ := live(ctx, plan.target()); c != nil {
			c.Close()
			actx, cancel := context.WithTimeout(ctx, time.Second)
			err := probe.answers(actx)
			cancel()
			if err == nil {
				// What the mount process said on its way up (recovery
				// findings) is for the operator, not only for the log.
				for _, l := range linesSince(logPath, start) {
					fmt.Fprintln(g.stderr, l)
				}
				if opts.debug {
					fmt.Fprintf(g.stderr, "cmfs: mounted %s on %s (pid %d, log %s)\n", cfg.Backing, plan.mountpoint, child.Process.Pid, logPath)
				}
				return child.Process.Release()
			}
		}
	}
}

// linesSince returns the non-empty lines written to the file after
// offset.
func linesSince(path string, offset int64) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return nil
	}
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// lastLine returns the last non-empty line written to the file after
// offset.
func lastLine(path string, offset int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return ""
	}
	var last string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			last = l
		}
	}
	return last
}

// firstLine returns the first line of a command's output, or err.
func firstLine(out []byte, err error) string {
	out = bytes.TrimSpace(out)
	if len(out) == 0 {
		return err.Error()
	}
	l, _, _ := bytes.Cut(out, []byte("\n"))
	return string(l)
}
