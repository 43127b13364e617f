package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/cmfs-project/cmfs/internal/backoff"
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
	creds    credFlags
}

func newFollowCmd(g *globalOptions) *cobra.Command {
	var opts followOptions
	cmd := &cobra.Command{
		Use:   "follow --source ADDR --target DIR [--interval DUR] [--metrics ADDR]",
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
failure is a line on stderr (once per distinct error, and at the 2nd,
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
(--token-file, or the certificate). --no-slot follows without a slot (the source's retention
alone).`,
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
	opts.creds.register(f, "client", "")
	return cmd
}

// followBatch bounds the events of one round, so that a target far behind
// advances (and reports) in steps.
const followBatch = 10000

// Retry delays after a failed round: transient failures (the source
// unreachable) are retried sooner than lasting ones (see lasting).
const (
	minBackoff        = 250 * time.Millisecond
	maxBackoff        = 10 * time.Second
	maxBackoffLasting = time.Minute
)

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
	if st, _, err := repl.ReadState(target); err != nil {
		return err
	} else if st.Bootstrapping != "" {
		return fmt.Errorf("target %s is in the middle of loading %s: finish that with 'replicad load' first", target, st.Bootstrapping)
	}
	work := followWork(target)
	// Dumps are cheap to remake: whatever a stopped follow left is dropped.
	if err := os.RemoveAll(work); err != nil {
		return fmt.Errorf("clear work directory: %w", err)
	}
	if err := os.Mkdir(work, 0o755); err != nil {
		return fmt.Errorf("work directory: %w", err)
	}
	defer os.RemoveAll(work)

	f := &follower{
		g: g, addr: opts.source, client: client, target: target, work: work, slot: slotName,
		m: newMetrics(), tty: isTerminal(g.stderr), times: map[uint64]time.Time{},
	}
	f.status = followStatus{PID: os.Getpid(), Source: opts.source, State: stateFollowing, Since: time.Now().UTC()}
	if err := f.writeStatus(); err != nil {
		return err
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	if opts.metrics != "" {
		lis, err := net.Listen("tcp", opts.metrics)
		if err != nil {
			return fmt.Errorf("metrics: listen %s: %w", opts.metrics, unwrapOp(err))
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", f.m.handler())
		hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		wg.Add(1)
		go func() {
			defer wg.Done()
			hs.Serve(lis) // ends with Shutdown below
		}()
		context.AfterFunc(ctx, func() {
			sctx, c := context.WithTimeout(context.Background(), time.Second)
			defer c()
			hs.Shutdown(sctx)
		})
		fmt.Fprintf(g.stdout, "metrics on http://%s/metrics\n", lis.Addr())
	}
	if slotName != "" {
		fmt.Fprintf(g.stdout, "following %s into %s (slot %q)\n", opts.source, target, slotName)
	} else {
		fmt.Fprintf(g.stdout, "following %s into %s (no slot)\n", opts.source, target)
	}

	wake := make(chan struct{}, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		f.watch(ctx, wake)
	}()
	err = f.loop(ctx, opts.interval, wake)
	f.endLine()
	cancel()   // stop the watcher
	return err // nil when interrupted
}

// follower is the state of one follow: the source, the target, what it
// measured.
type follower struct {
	g      *globalOptions
	addr   string
	client *source.Client
	target string
	work   string
	m      *metrics
	tty    bool

	sourceID string
	// slot is the replication slot's name ("": none); confirmed is the
	// position the source last confirmed, once confirmedOK.
	slot        string
	confirmed   uint64
	confirmedOK bool

	mu    sync.Mutex
	times map[uint64]time.Time // event times of the round being loaded
	line  bool                 // a progress line is open on the terminal

	status  followStatus // what status shows; written by the loop only
	lastErr string       // the last failure printed
}

// loop runs rounds until ctx ends: right away while the source is ahead,
// else when woken or every interval. A failed round is retried with
// backoff: follow is a daemon, and the target stays at the last event
// applied, so a retry is always safe. Only a target the source can no
// longer serve (source.ErrLost: the originals it needs are gone), or a
// source that refuses this client's credential, ends it, with that error.
func (f *follower) loop(ctx context.Context, interval time.Duration, wake <-chan struct{}) error {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	b := backoff.Backoff{Min: minBackoff, Max: maxBackoff}
	for {
		more, err := f.sync(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, source.ErrLost) {
			return err
		}
		if errors.Is(err, source.ErrUnauthenticated) { // refused again on every retry
			return fmt.Errorf("--source %s: %w", f.addr, err)
		}
		if err != nil {
			b.Max = maxBackoff
			if lasting(err) {
				b.Max = maxBackoffLasting
			}
			wait := b.Next()
			f.failed(err, b.Failures(), wait)
			if backoff.Sleep(ctx, wait) != nil {
				return nil
			}
			continue
		}
		if b.Failures() > 0 {
			f.recovered(b.Failures())
			b.Reset()
		}
		f.m.update(func(m *metricValues) { m.lastSuccess = time.Now() })
		f.progress()
		if more {
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		case <-tick.C:
		}
	}
}

// failed reports the failure of a round, the n-th in a row, retried after
// wait: in the metrics, in the status file, and on stderr when the error
// is new or n a power of two (a lasting failure is not a line every
// retry).
func (f *follower) failed(err error, n int, wait time.Duration) {
	now := time.Now().UTC()
	f.m.update(func(m *metricValues) { m.errors++; m.failing = uint64(n) })
	if n == 1 {
		f.status.State, f.status.Since = stateRetrying, now
	}
	f.status.Failures, f.status.LastError, f.status.NextRetry = n, err.Error(), now.Add(wait)
	werr := f.writeStatus()
	if msg := err.Error(); msg != f.lastErr || n&(n-1) == 0 {
		f.lastErr = msg
		f.say("%v; retrying in %s (failure %d in a row)", err, wait.Round(time.Millisecond), n)
	}
	if werr != nil {
		f.say("status: %v", werr)
	}
}

// recovered reports a round that succeeded after n failed.
func (f *follower) recovered(n int) {
	f.m.update(func(m *metricValues) { m.failing = 0 })
	f.status = followStatus{PID: f.status.PID, Source: f.status.Source, State: stateFollowing, Since: time.Now().UTC()}
	f.lastErr = ""
	f.say("source %s: a round succeeded after %d failed; target at event %d", f.addr, n, f.m.snapshot().targetLast)
	if err := f.writeStatus(); err != nil {
		f.say("status: %v", err)
	}
}

// sync runs one round: dump the events past the target's last one (at
// most followBatch) from the source, load them, remove the dump. more
// says the source was still ahead when the round started.
func (f *follower) sync(ctx context.Context) (more bool, err error) {
	st, _, err := repl.ReadState(f.target)
	if err != nil {
		return false, err
	}
	last, err := f.client.Last(ctx)
	if err != nil {
		return false, err
	}
	f.m.update(func(m *metricValues) { m.sourceLast, m.targetLast = last, st.LastReplID })
	from := st.LastReplID + 1
	if last < from {
		return false, f.confirm(ctx, st.LastReplID)
	}
	// Before a round: the source says if an event the round needs can no
	// longer be reproduced, and the slot holds what the round needs.
	if err := f.confirm(ctx, st.LastReplID); err != nil {
		return false, err
	}
	if f.sourceID == "" {
		s, err := f.client.Status(ctx)
		if err != nil {
			return false, err
		}
		f.sourceID = s.SourceID
	}
	to := min(last, from+followBatch-1)
	dir := filepath.Join(f.work, dumpName(repl.Incremental, from, to, "", ""))
	defer os.RemoveAll(dir)
	f.mu.Lock()
	clear(f.times)
	f.mu.Unlock()
	if _, err := repl.Dump(ctx, timedEvents{f.client, f}, dir, repl.DumpOptions{From: from, To: to, Source: f.sourceID}); err != nil {
		return false, err
	}
	res, err := repl.Load(ctx, dir, f.target, f.client, repl.LoadOptions{Progress: f})
	f.m.update(func(m *metricValues) {
		m.files += uint64(res.Files)
	})
	if err != nil {
		return false, err
	}
	if st, _, err := repl.ReadState(f.target); err == nil {
		if err := f.confirm(ctx, st.LastReplID); err != nil {
			return false, err
		}
	}
	return to < last, nil
}

// confirm tells the source the target's position (moving the slot) when
// it changed since the last time, and turns a refusal into one line that
// says how to bootstrap again.
func (f *follower) confirm(ctx context.Context, pos uint64) error {
	if f.confirmedOK && f.confirmed == pos {
		return nil
	}
	_, err := f.client.Confirm(ctx, f.slot, pos)
	var lost *source.LostError
	if errors.As(err, &lost) {
		state := lost.State
		if state == "" {
			state = "STATE"
		}
		return fmt.Errorf("target %s is at event %d and cannot catch up: %w; bootstrap it again: on the source run 'replicad dump --state %s --out DUMPROOT', then 'replicad load --dump DUMPROOT/bootstrap-N --target NEW_DIR --source %s' into a new, empty directory, and follow that",
			f.target, pos, err, state, f.addr)
	}
	if err != nil {
		return err
	}
	f.confirmed, f.confirmedOK = pos, true
	return nil
}

// Event implements repl.Progress: event id is applied at the target.
func (f *follower) Event(id uint64) {
	f.mu.Lock()
	t, ok := f.times[id]
	delete(f.times, id)
	f.mu.Unlock()
	if ok {
		f.m.observeLag(time.Since(t))
	}
	f.m.update(func(m *metricValues) { m.targetLast = max(m.targetLast, id) })
}

// Bytes implements repl.Progress.
func (f *follower) Bytes(n int64) {
	f.m.update(func(m *metricValues) { m.bytes += n })
}

// timedEvents is the source's journal as the dump reads it, noting every
// event's time for the lag measured when it is applied.
type timedEvents struct {
	*source.Client
	f *follower
}

func (e timedEvents) Range(ctx context.Context, from, to uint64, fn func(*journal.Event) error) error {
	return e.Client.Range(ctx, from, to, func(ev *journal.Event) error {
		e.f.mu.Lock()
		e.f.times[ev.ID] = ev.Time
		e.f.mu.Unlock()
		return fn(ev)
	})
}

// watch follows the source's journal and signals wake at every new event,
// so a round starts as soon as there is something to load; a broken stream
// is taken up again after a pause (the loop reports the source's state).
func (f *follower) watch(ctx context.Context, wake chan<- struct{}) {
	var next uint64
	for ctx.Err() == nil {
		if next == 0 {
			if last, err := f.client.Last(ctx); err == nil {
				next = last + 1
			}
		}
		if next != 0 {
			f.client.Follow(ctx, next, func(e *journal.Event) error {
				next = e.ID + 1
				select {
				case wake <- struct{}{}:
				default:
				}
				return nil
			})
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// lasting reports whether a failed round would likely fail the same way
// for a while: it is retried less often than a source that is away.
func lasting(err error) bool {
	for _, target := range []error{
		repl.ErrGap, repl.ErrMismatch, repl.ErrFormat, repl.ErrNoCopy, repl.ErrChecksum, repl.ErrUnsafePath,
		source.ErrNotFound, source.ErrRefused, source.ErrInvalid, source.ErrMismatch, source.ErrInsecure,
		journal.ErrCorrupt,
	} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

// progress redraws the progress line on a terminal.
func (f *follower) progress() {
	if !f.tty {
		return
	}
	s := f.m.snapshot()
	f.mu.Lock()
	defer f.mu.Unlock()
	fmt.Fprintf(f.g.stderr, "\rfollow %s: target at %d, source at %d, lag %s, %d events, %s applied   ",
		f.addr, s.targetLast, s.sourceLast, time.Duration(s.lastLag*float64(time.Second)).Round(time.Millisecond),
		s.applied, shortBytes(s.bytes))
	f.line = true
}

// say prints a line on stderr, after ending an open progress line.
func (f *follower) say(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.line {
		fmt.Fprintln(f.g.stderr)
		f.line = false
	}
	fmt.Fprintf(f.g.stderr, "replicad: "+format+"\n", args...)
}

// endLine ends an open progress line.
func (f *follower) endLine() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.line {
		fmt.Fprintln(f.g.stderr)
		f.line = false
	}
}
