package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/cmfs-project/cmfs/internal/cli"
	"github.com/cmfs-project/cmfs/internal/metricsrv"
	"github.com/cmfs-project/cmfs/internal/systemd"
	"github.com/cmfs-project/cmfs/journal"
	"github.com/cmfs-project/cmfs/repl"
	"github.com/cmfs-project/cmfs/slot"
	"github.com/cmfs-project/cmfs/source"
)

type followOptions struct {
	source   string
	target   string
	interval time.Duration
	metrics  string
	slot     string
	noSlot   bool
	wait     time.Duration
	creds    credFlags
	log      cli.LogFlags
}

func newFollowCmd(g *globalOptions) *cobra.Command {
	var opts followOptions
	cmd := &cobra.Command{
		Use:   "follow --source ADDR --target DIR [--interval DUR] [--metrics ADDR] [--wait DUR]",
		Short: "Keep a destination warehouse loaded from a source, continuously",
		Long: `Keep TARGET (created if missing) up to date with the 'replicad serve' at
--source: whenever the source has events past the target's last loaded
one, dump them (at most 10000 per round) into a work directory next to
the target (.<target name>.repl-dumps, never inside it), load the dump,
remove it, repeat. A target never loaded starts from event 1: the whole
journal is replayed (bootstrap it first with dump and load when cmroot no
longer holds old content).

It wakes up as soon as the source journals an event (a following stream),
and at least every --interval. Lag — from an event's time at the source to
its being applied at the target — and events, files and bytes applied are
exposed in the Prometheus text format at http://ADDR/metrics with
--metrics ADDR (off by default). On a terminal a progress line is drawn on
stderr.

A failed round — the source down or restarting, content the source
could not find, a disk full at the target, anything — never ends it: it
is retried with backoff (250ms doubling to 10s; to 1m for errors a retry
is unlikely to fix soon: a gap, another source, a malformed dump, content
found nowhere), the target staying at the last event applied. Each
failure is a warning in the log on stderr (once per distinct error, and at the 2nd,
4th, 8th… in a row), counts in the metrics, and shows in 'replicad
status --target' while it lasts. SIGINT or SIGTERM stop it between or
within rounds, leaving the target at the last event
applied; exit 0.

It keeps a replication slot on the source (--slot NAME, default
HOST:TARGET): the source's gc keeps every preserved original the events
past the target's last one need, however long the follow is stopped, up to
the source's 'cmfs gc --retain-max' (7 days by default). Each round tells
the source how far the target got. A target that fell behind what the
source kept (no slot, or past --retain-max) is refused with one line
naming the first event it can no longer reproduce and how to bootstrap it
again, and following ends there (exit 1): no retry can bring those
originals back. So does a source that refuses this client's credential
(--token-file, or the certificate). --no-slot follows without a slot (the
source's retention alone).

A target is loaded by one loader at a time: follow holds it for as long
as it runs, and a 'replicad load' or another follow of it is refused with
one line naming the holder. Started while another loader holds the
target, follow is refused the same way; with --wait DUR it waits that
long for it first.

Under a service manager (systemd, Type=notify, as
replicad-follow@.service runs it) it says READY=1 at the first round
that leaves the target caught up with the source, with a STATUS= line
naming the source, the target and the target's event; STATUS= again
when its state changes (catching up, caught up, retrying and the error;
new numbers at most every minute), and STOPPING=1 at SIGTERM. A follow
that ends (exit 1) before it was ready never says READY=1. With
WatchdogSec= it sends WATCHDOG=1 every half of it while the follow loop
is not stuck: a round that goes longer than WatchdogSec without
progress (a call the source never answers, a load that does not move;
an event applied, a chunk of content, an answer of the source are
progress) stops the pings, and the manager restarts it. A follow
retrying a source that is down is not stuck: it keeps pinging. Until it
is ready the same check extends the start (EXTEND_TIMEOUT_USEC), so a
first catch-up as long as the backlog, or a wait for a source that is
down, does not fail it, while a stuck one does.`,
		Example: `  replicad follow --source 127.0.0.1:9860 --target /replica
  replicad follow --source 127.0.0.1:9860 --target /replica --metrics 127.0.0.1:9861`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runFollow(cmd.Context(), g, opts, args)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.source, "source", "", "`ADDR` of the source's 'replicad serve'")
	f.StringVar(&opts.target, "target", "", "the destination warehouse `DIR`")
	f.DurationVar(&opts.interval, "interval", time.Second, "poll the source at least this often")
	f.StringVar(&opts.metrics, "metrics", "", "serve Prometheus metrics on `ADDR` (default: off)")
	f.StringVar(&opts.slot, "slot", "", "the replication slot's `NAME` on the source (default: HOST:TARGET)")
	f.BoolVar(&opts.noSlot, "no-slot", false, "follow without a replication slot")
	f.DurationVar(&opts.wait, "wait", 0, "wait this long for another loader of the target (default: refuse at once)")
	opts.creds.register(f, "client", "")
	opts.log.Register(f)
	return cmd
}

func runFollow(ctx context.Context, g *globalOptions, opts followOptions, _ []string) error {
	if opts.source == "" {
		return errors.New("follow what? give --source ADDR")
	}
	if opts.target == "" {
		return errors.New("where to? give --target DIR")
	}
	if opts.interval <= 0 {
		return fmt.Errorf("--interval %s must be positive", opts.interval)
	}
	if opts.wait < 0 {
		return fmt.Errorf("--wait %s must not be negative", opts.wait)
	}
	if opts.noSlot && opts.slot != "" {
		return errors.New("give --slot NAME or --no-slot, not both")
	}
	// Before the target is touched: a client without a credential is
	// refused up front.
	client, err := dialSource(ctx, opts.source, opts.creds)
	if err != nil {
		return err
	}
	defer client.Close()
	target, err := makeDirectory("target", opts.target)
	if err != nil {
		return err
	}
	slotName := opts.slot
	if slotName == "" && !opts.noSlot {
		host, err := os.Hostname()
		if err != nil {
			host = "localhost"
		}
		slotName = host + ":" + target
	}
	if slotName != "" {
		if err := slot.CheckName(slotName); err != nil {
			return fmt.Errorf("--slot: %w", err)
		}
	}

	ui := newFollowUI(g.stderr, opts.source, target)
	logger := opts.log.Logger(ui)
	f, err := repl.NewFollower(ctx, repl.FollowConfig{
		Source: followSource{client, target, opts.source}, Addr: opts.source, Target: target, Slot: slotName,
		Interval: opts.interval, Batch: followBatch, Wait: opts.wait,
		Metrics: ui, Logger: logger, Classify: classify,
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil // interrupted while waiting for the target
		}
		return err
	}
	defer f.Close()

	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if opts.metrics != "" {
		lis, err := metricsrv.Listen(opts.metrics)
		if err != nil {
			return err
		}
		fmt.Fprintf(g.stdout, "metrics on http://%s/metrics\n", metricsrv.Serve(ctx, &wg, lis, ui.m.handler()))
	}
	if slotName != "" {
		fmt.Fprintf(g.stdout, "following %s into %s (slot %q)\n", opts.source, target, slotName)
	} else {
		fmt.Fprintf(g.stdout, "following %s into %s (no slot)\n", opts.source, target)
	}
	notifyService(ctx, &wg, ui.service(f), logger)
	err = f.Run(ctx)
	ui.endLine()
	if errors.Is(err, source.ErrUnauthenticated) {
		return fmt.Errorf("--source %s: %w", opts.source, err)
	}
	return err // nil when interrupted
}

// followBatch bounds the events of one round, so that a target far behind
// advances (and reports) in steps.
const followBatch = 10000

// classify decides what follows a failed round of follow: the end of
// following for a target the source can no longer serve (source.ErrLost:
// the originals it needs are gone) or a source that refuses this client's
// credential, a longer backoff for errors a retry
// is unlikely to fix soon, a short one for the rest (the source away).
func classify(err error) repl.Verdict {
	if errors.Is(err, source.ErrLost) || errors.Is(err, source.ErrUnauthenticated) {
		return repl.Stop // refused again on every retry
	}
	for _, target := range []error{
		repl.ErrGap, repl.ErrMismatch, repl.ErrFormat, repl.ErrNoCopy, repl.ErrChecksum, repl.ErrUnsafePath,
		source.ErrNotFound, source.ErrRefused, source.ErrInvalid, source.ErrMismatch, source.ErrInsecure,
		journal.ErrCorrupt,
	} {
		if errors.Is(err, target) {
			return repl.RetryLater
		}
	}
	return repl.Retry
}

// followSource is a 'replicad serve' as a Follower follows it.
type followSource struct {
	*source.Client
	target string
	addr   string
}

func (s followSource) SourceID(ctx context.Context) (string, error) {
	st, err := s.Status(ctx)
	return st.SourceID, err
}

// Confirm moves the slot, and turns a refusal into one line that says how
// to bootstrap again.
func (s followSource) Confirm(ctx context.Context, slotName string, pos uint64) error {
	_, err := s.Client.Confirm(ctx, slotName, pos)
	var lost *source.LostError
	if errors.As(err, &lost) {
		state := lost.State
		if state == "" {
			state = "STATE"
		}
		return fmt.Errorf("target %s is at event %d and cannot catch up: %w; bootstrap it again: on the source run 'replicad dump --state %s --out DUMPROOT', then 'replicad load --dump DUMPROOT/bootstrap-N --target NEW_DIR --source %s' into a new, empty directory, and follow that",
			s.target, pos, err, state, s.addr)
	}
	return err
}

// followUI is what a follow shows: its metrics (repl.FollowMetrics), its
// log on stderr (it is the log's io.Writer), on a terminal a progress
// line, and under a service manager its state (service).
type followUI struct {
	stderr io.Writer
	addr   string
	target string
	m      *metrics
	tty    bool

	mu   sync.Mutex
	line bool // a progress line is open on the terminal

	// What the service manager is told (service), kept by the rounds:
	// ready is closed at the first round that leaves the target caught
	// up; changed is signalled when the status line is worth sending.
	ready   chan struct{}
	changed chan struct{}
	smu     sync.Mutex
	isReady bool
	state   string    // what the status line says, without its numbers
	status  string    // the status line
	told    string    // the status line the manager was last told of
	toldAt  time.Time // and when
}

func newFollowUI(stderr io.Writer, addr, target string) *followUI {
	u := &followUI{
		stderr: stderr, addr: addr, target: target, m: newMetrics(), tty: isTerminal(stderr),
		ready: make(chan struct{}), changed: make(chan struct{}, 1),
	}
	u.report("starting", fmt.Sprintf("following %s into %s: first round", addr, target), false)
	return u
}

var _ repl.FollowMetrics = (*followUI)(nil)

func (u *followUI) Positions(sourceLast, targetLast uint64) {
	u.m.update(func(m *metricValues) { m.sourceLast, m.targetLast = sourceLast, targetLast })
}

func (u *followUI) Applied(id uint64, at time.Time) {
	if !at.IsZero() {
		u.m.observeLag(time.Since(at))
	}
	u.m.update(func(m *metricValues) { m.targetLast = max(m.targetLast, id) })
}

func (u *followUI) Bytes(n int64) { u.m.update(func(m *metricValues) { m.bytes += n }) }

func (u *followUI) Files(n int) { u.m.update(func(m *metricValues) { m.files += uint64(n) }) }

func (u *followUI) Failed(n int, err error) {
	u.m.update(func(m *metricValues) { m.errors++; m.failing = uint64(n) })
	u.report("retrying: "+err.Error(), fmt.Sprintf("following %s into %s: at event %d; retrying (%d failed in a row): %v",
		u.addr, u.target, u.m.snapshot().targetLast, n, err), false)
}

func (u *followUI) Succeeded() {
	u.m.update(func(m *metricValues) { m.failing = 0; m.lastSuccess = time.Now() })
	u.progress()
	s := u.m.snapshot()
	if s.targetLast >= s.sourceLast {
		u.report("caught up", fmt.Sprintf("following %s into %s: caught up, at event %d", u.addr, u.target, s.targetLast), true)
	} else {
		u.report("catching up", fmt.Sprintf("following %s into %s: at event %d, the source at %d",
			u.addr, u.target, s.targetLast, s.sourceLast), false)
	}
}

// statusEvery is how often, at most, the service manager is told of new
// numbers in a status line that says the same otherwise; a new state is
// told at once.
const statusEvery = time.Minute

// report makes text the status line, saying state; caughtUp says the
// round that ended left the target at the source's newest event, which
// the first time makes the follow ready. The line is sent with READY=1,
// at a new state, or when its numbers changed at least statusEvery after
// the last sent (the rounds, at least every --interval, bring a late one).
func (u *followUI) report(state, text string, caughtUp bool) {
	u.smu.Lock()
	defer u.smu.Unlock()
	fresh := state != u.state
	u.state, u.status = state, text
	switch {
	case caughtUp && !u.isReady:
		u.isReady = true
		close(u.ready) // READY=1 carries the line
	case text == u.told:
		return
	case fresh || time.Since(u.toldAt) >= statusEvery:
		select {
		case u.changed <- struct{}{}:
		default:
		}
	default:
		return
	}
	u.told, u.toldAt = text, time.Now()
}

// statusLine is the status line as the rounds left it.
func (u *followUI) statusLine() string {
	u.smu.Lock()
	defer u.smu.Unlock()
	return u.status
}

// service is follow as notifyService tells of it: ready at the first
// round that leaves the target caught up with the source (a follow that
// ends before is never ready), alive while f's loop is not stalled
// (followAlive) — before it is ready too, so that a first catch-up as
// long as the backlog, or a wait for a source that is down, extends the
// start instead of failing it, while a loop stuck does not.
func (u *followUI) service(f *repl.Follower) service {
	return service{
		ready: func(ctx context.Context) bool {
			select {
			case <-u.ready:
				return true
			case <-ctx.Done():
				return false
			}
		},
		status:   u.statusLine,
		changed:  u.changed,
		alive:    followAlive(f),
		extend:   true,
		stopping: "stopping: the target stays at the last event applied",
	}
}

// followAlive is follow's watchdog probe: it fails once f's loop has been
// stalled (repl.Follower.Stalled) for longer than the watchdog interval.
// A follow retrying a source that is down passes: each attempt ends.
func followAlive(f *repl.Follower) systemd.Probe {
	bound, _ := systemd.WatchdogInterval() // its error is Watchdog's to report
	return func(context.Context) error {
		if s := f.Stalled(); s > bound {
			return fmt.Errorf("the follow loop has made no progress for %s (a call the source does not answer, a load that does not move)", s.Round(time.Second))
		}
		return nil
	}
}

// progress redraws the progress line on a terminal.
func (u *followUI) progress() {
	if !u.tty {
		return
	}
	s := u.m.snapshot()
	u.mu.Lock()
	defer u.mu.Unlock()
	fmt.Fprintf(u.stderr, "\rfollow %s: target at %d, source at %d, lag %s, %d events, %s applied   ",
		u.addr, s.targetLast, s.sourceLast, time.Duration(s.lastLag*float64(time.Second)).Round(time.Millisecond),
		s.applied, shortBytes(s.bytes))
	u.line = true
}

// Write writes a log line on stderr, after ending an open progress line.
func (u *followUI) Write(p []byte) (int, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.line {
		fmt.Fprintln(u.stderr)
		u.line = false
	}
	return u.stderr.Write(p)
}

// endLine ends an open progress line.
func (u *followUI) endLine() {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.line {
		fmt.Fprintln(u.stderr)
		u.line = false
	}
}
