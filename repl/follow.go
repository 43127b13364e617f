package repl

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cmfs-project/cmfs/internal/backoff"
	"github.com/cmfs-project/cmfs/journal"
)

// FollowSource is what a Follower follows: a source's journal and files,
// and its replication slots.
type FollowSource interface {
	Events
	Fetcher
	// Follow calls fn for every event from id from on as the source
	// journals them, until ctx ends or the stream breaks.
	Follow(ctx context.Context, from uint64, fn func(*journal.Event) error) error
	// SourceID is the id the source's dumps carry.
	SourceID(ctx context.Context) (string, error)
	// Confirm tells the source the target is at event pos, moving slot
	// ("": none) there; an error when the source can no longer serve the
	// events after pos is one a Classify says Stop to.
	Confirm(ctx context.Context, slot string, pos uint64) error
}

// FollowMetrics is told what a Follower measures; the core never imports
// a metrics library. Applied and Bytes are called from the load's
// goroutines, concurrently; the others from the goroutine running Sync or
// Run.
type FollowMetrics interface {
	// Positions: at the start of a round, the source's newest event and
	// the target's last.
	Positions(sourceLast, targetLast uint64)
	// Applied: event id is applied at the target; at is its time at the
	// source (zero when not known).
	Applied(id uint64, at time.Time)
	// Bytes: n more bytes of content were placed.
	Bytes(n int64)
	// Files: a round's load placed n files.
	Files(n int)
	// Failed: a round failed with err, the n-th in a row.
	Failed(n int, err error)
	// Succeeded: a round succeeded.
	Succeeded()
}

// Verdict is what a Follower does after a failed round.
type Verdict int

const (
	// Retry soon: the source may be back any moment.
	Retry Verdict = iota
	// RetryLater: a retry is unlikely to help soon (a gap, a malformed
	// dump, content found nowhere); the backoff grows longer.
	RetryLater
	// Stop following: no retry can help (the source can no longer serve
	// the target). Run returns the error.
	Stop
)

// Defaults of FollowConfig.
const (
	DefaultFollowBatch    = 10000
	DefaultFollowInterval = time.Second
)

// Retry delays after a failed round: transient failures are retried
// sooner than lasting ones (RetryLater).
const (
	followMinBackoff     = 250 * time.Millisecond
	followMaxBackoff     = 10 * time.Second
	followMaxBackoffLate = time.Minute
	// watchMinBackoff is the first wait before a broken event stream is
	// taken up again; it grows to followMaxBackoff.
	watchMinBackoff = time.Second
)

// FollowConfig says what a Follower follows and how.
type FollowConfig struct {
	Source FollowSource
	// Addr names the source in the status and in messages.
	Addr   string
	Target string
	// Slot is the replication slot's name on the source; "" follows
	// without one.
	Slot string
	// Interval: a round at least this often; 0 means DefaultFollowInterval.
	Interval time.Duration
	// Batch bounds the events of one round; 0 means DefaultFollowBatch.
	Batch uint64
	// Wait is how long NewFollower waits for another loader of the target.
	Wait time.Duration
	// Metrics, if not nil, is told what the follow measures.
	Metrics FollowMetrics
	// Logger, if not nil, is told what an operator should see (a
	// failure, a recovery: warn and info) and, at debug, of every round.
	Logger *slog.Logger
	// Classify decides what follows a failed round; nil retries every
	// error soon. It is the one place that tells lasting from passing
	// failures and both from the end of following.
	Classify func(error) Verdict
}

// Follower keeps a target loaded from a source: round after round, dump
// the events past the target's last one into its work directory
// (FollowWork), load them, remove the dump. It holds the target's Lock
// from NewFollower to Close.
type Follower struct {
	cfg    FollowConfig
	target string
	work   string
	lock   *Lock

	sourceID    string
	confirmed   uint64 // the position the source last confirmed, once confirmedOK
	confirmedOK bool
	at          uint64 // the target's last event, as the last round left it

	mu    sync.Mutex
	times map[uint64]time.Time // event times of the round being loaded

	status  FollowStatus // what the status file says; written by the loop only
	lastErr string       // the last failure logged

	// The loop's heartbeat (Stalled): inRound says a round is under way,
	// beat when it began or last made progress, as time since epoch on
	// now's clock (monotonic: a step of the wall clock is no stall).
	inRound atomic.Bool
	beat    atomic.Int64
	epoch   time.Time

	// sleep waits between two attempts; tests count the waits.
	sleep func(ctx context.Context, d time.Duration) error
	// now is the heartbeat's clock; tests move it by hand.
	now func() time.Time
}

// NewFollower takes the target (waiting up to cfg.Wait for another
// loader), clears its work directory and says in its status that it
// follows. Close lets go of them.
//
// Errors: *BusyError (ErrTargetBusy), a target in the middle of a
// BOOTSTRAP (ErrMismatch), ctx's error while waiting, I/O errors.
func NewFollower(ctx context.Context, cfg FollowConfig) (*Follower, error) {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultFollowInterval
	}
	if cfg.Batch == 0 {
		cfg.Batch = DefaultFollowBatch
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	lock, err := LockTarget(ctx, cfg.Target, LockOptions{Wait: cfg.Wait})
	if err != nil {
		return nil, err
	}
	f := &Follower{cfg: cfg, target: lock.Target(), lock: lock, times: map[uint64]time.Time{}, sleep: backoff.Sleep, now: time.Now}
	f.epoch = f.now()
	f.work = FollowWork(f.target)
	if err := f.open(); err != nil {
		lock.Unlock()
		return nil, err
	}
	return f, nil
}

func (f *Follower) open() error {
	st, _, err := ReadState(f.target)
	if err != nil {
		return err
	}
	if st.Bootstrapping != "" {
		return fmt.Errorf("target %s is in the middle of loading %s: finish that with 'replicad load' first: %w", f.target, st.Bootstrapping, ErrMismatch)
	}
	f.at = st.LastReplID
	// Dumps are cheap to remake: whatever a stopped follow left is dropped.
	if err := os.RemoveAll(f.work); err != nil {
		return fmt.Errorf("clear work directory: %w", err)
	}
	if err := os.Mkdir(f.work, 0o755); err != nil {
		return fmt.Errorf("work directory: %w", err)
	}
	f.status = FollowStatus{PID: os.Getpid(), Source: f.cfg.Addr, State: FollowFollowing, Since: time.Now().UTC()}
	return f.writeStatus()
}

// Target is the absolute path of the target followed.
func (f *Follower) Target() string { return f.target }

// Close removes the work directory (and the status in it) and lets go of
// the target.
func (f *Follower) Close() error {
	err := os.RemoveAll(f.work)
	return errors.Join(err, f.lock.Unlock())
}

// Stalled says whether the loop Run drives is stuck: it returns how long
// the round under way has gone without progress, and 0 while the loop
// waits between rounds — for an event, the next Interval, or the backoff
// after a failure, waits that end by themselves. A round begins when the
// wait ends and lasts until the next wait begins (what it reports of
// itself, in the status file, the log and the metrics, included);
// progress within it is a call the source answered, an event read from
// the source or applied at the target, a chunk of content staged, so a
// large load that keeps moving is not stalled however long it takes. A
// follow retrying a source that is down is not stalled either: each
// attempt ends, in an error, and the loop waits. One stuck inside a round
// is, for as long as it stays stuck: a call the source never answers, a
// load wedged on the target's disk, a log line that cannot be written. A
// single step that reports nothing (one event that removes or renames a
// large tree) counts as a stall while it lasts. Safe to call from any
// goroutine, as a watchdog's probe does.
func (f *Follower) Stalled() time.Duration {
	if !f.inRound.Load() {
		return 0
	}
	return f.since() - time.Duration(f.beat.Load())
}

// since is the time since epoch on the heartbeat's clock.
func (f *Follower) since() time.Duration { return f.now().Sub(f.epoch) }

// alive notes progress of the round under way.
func (f *Follower) alive() { f.beat.Store(int64(f.since())) }

// begin and idle mark the start of a round and of the wait after it. The
// beat is set before the round is: a reader that sees the round sees its
// start or later.
func (f *Follower) begin() { f.alive(); f.inRound.Store(true) }
func (f *Follower) idle()  { f.inRound.Store(false) }

// Run runs rounds until ctx ends: right away while the source is ahead,
// else when the source journals an event or every Interval. A failed
// round is retried with backoff, the target staying at the last event
// applied, so a retry is always safe; only an error Classify says Stop to
// ends it, and Run returns that error. It returns nil when ctx ends.
// Stalled says whether it is stuck.
func (f *Follower) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wake := make(chan struct{}, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		f.watch(ctx, wake)
	}()

	tick := time.NewTicker(f.cfg.Interval)
	defer tick.Stop()
	b := backoff.Backoff{Min: followMinBackoff, Max: followMaxBackoff}
	defer f.idle()
	for {
		f.begin()
		more, err := f.Sync(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			verdict := Retry
			if f.cfg.Classify != nil {
				verdict = f.cfg.Classify(err)
			}
			if verdict == Stop {
				return err
			}
			b.Max = followMaxBackoff
			if verdict == RetryLater {
				b.Max = followMaxBackoffLate
			}
			wait := b.Next()
			f.failed(err, b.Failures(), wait)
			f.idle()
			if f.sleep(ctx, wait) != nil {
				return nil
			}
			continue
		}
		if m := f.cfg.Metrics; m != nil {
			m.Succeeded()
		}
		if b.Failures() > 0 {
			f.recovered(b.Failures())
			b.Reset()
		}
		if more {
			continue
		}
		f.idle()
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		case <-tick.C:
		}
	}
}

// Sync runs one round: dump the events past the target's last one (at
// most Batch) from the source, load them, remove the dump, and tell the
// source how far the target got. more says the source was still ahead
// when the round started.
func (f *Follower) Sync(ctx context.Context) (more bool, err error) {
	st, _, err := ReadState(f.target)
	if err != nil {
		return false, err
	}
	f.at = st.LastReplID
	last, err := f.cfg.Source.Last(ctx)
	if err != nil {
		return false, err
	}
	f.alive()
	if m := f.cfg.Metrics; m != nil {
		m.Positions(last, st.LastReplID)
	}
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
		if f.sourceID, err = f.cfg.Source.SourceID(ctx); err != nil {
			return false, err
		}
		f.alive()
	}
	to := min(last, from+f.cfg.Batch-1)
	dir := filepath.Join(f.work, fmt.Sprintf("incremental-%d-%d", from, to))
	defer os.RemoveAll(dir)
	f.mu.Lock()
	clear(f.times)
	f.mu.Unlock()
	if _, err := Dump(ctx, timedEvents{f.cfg.Source, f}, dir, DumpOptions{From: from, To: to, Source: f.sourceID}); err != nil {
		return false, err
	}
	f.alive()
	res, err := Load(ctx, dir, f.target, f.cfg.Source, LoadOptions{Progress: followProgress{f}, Lock: f.lock})
	if m := f.cfg.Metrics; m != nil {
		m.Files(res.Files)
	}
	if err != nil {
		return false, err
	}
	f.alive()
	f.cfg.Logger.Debug("round", slog.String("source", f.cfg.Addr), slog.Uint64("from", from), slog.Uint64("to", to),
		slog.Int("applied", res.Applied), slog.Int("files", res.Files), slog.Int64("bytes", res.Bytes))
	if st, _, err := ReadState(f.target); err == nil {
		f.at = st.LastReplID
		if err := f.confirm(ctx, st.LastReplID); err != nil {
			return false, err
		}
	}
	return to < last, nil
}

// confirm tells the source the target's position (moving the slot) when
// it changed since the last time.
func (f *Follower) confirm(ctx context.Context, pos uint64) error {
	if f.confirmedOK && f.confirmed == pos {
		return nil
	}
	if err := f.cfg.Source.Confirm(ctx, f.cfg.Slot, pos); err != nil {
		return err
	}
	f.alive()
	f.confirmed, f.confirmedOK = pos, true
	return nil
}

// failed reports the failure of a round, the n-th in a row, retried after
// wait: in the metrics, in the status file, and in a line when the error
// is new or n a power of two (a lasting failure is not a line every
// retry).
func (f *Follower) failed(err error, n int, wait time.Duration) {
	now := time.Now().UTC()
	if m := f.cfg.Metrics; m != nil {
		m.Failed(n, err)
	}
	if n == 1 {
		f.status.State, f.status.Since = FollowRetrying, now
	}
	f.status.Failures, f.status.LastError, f.status.NextRetry = n, err.Error(), now.Add(wait)
	werr := f.writeStatus()
	if msg := err.Error(); msg != f.lastErr || n&(n-1) == 0 {
		f.lastErr = msg
		f.cfg.Logger.Warn("a round failed; retrying", slog.String("source", f.cfg.Addr), slog.Any("err", err),
			slog.Int("failures", n), slog.Duration("retry_in", wait.Round(time.Millisecond)))
	}
	if werr != nil {
		f.cfg.Logger.Warn("status file", slog.Any("err", werr))
	}
}

// recovered reports a round that succeeded after n failed.
func (f *Follower) recovered(n int) {
	f.status = FollowStatus{PID: f.status.PID, Source: f.status.Source, State: FollowFollowing, Since: time.Now().UTC()}
	f.lastErr = ""
	f.cfg.Logger.Info("a round succeeded after failures", slog.String("source", f.cfg.Addr),
		slog.Int("failures", n), slog.Uint64("event", f.at))
	if err := f.writeStatus(); err != nil {
		f.cfg.Logger.Warn("status file", slog.Any("err", err))
	}
}

// followProgress is the Progress of a round's load: it hands each event,
// with its time at the source, to the metrics, and counts each event and
// chunk as the round's progress.
type followProgress struct{ f *Follower }

func (p followProgress) Event(id uint64) {
	p.f.alive()
	p.f.mu.Lock()
	t := p.f.times[id]
	delete(p.f.times, id)
	p.f.mu.Unlock()
	if m := p.f.cfg.Metrics; m != nil {
		m.Applied(id, t)
	}
}

func (p followProgress) Bytes(n int64) {
	p.f.alive()
	if m := p.f.cfg.Metrics; m != nil {
		m.Bytes(n)
	}
}

// timedEvents is the source's journal as the dump reads it, noting every
// event's time for the lag measured when it is applied, and each event
// read as the round's progress.
type timedEvents struct {
	Events
	f *Follower
}

func (e timedEvents) Range(ctx context.Context, from, to uint64, fn func(*journal.Event) error) error {
	return e.Events.Range(ctx, from, to, func(ev *journal.Event) error {
		e.f.alive()
		e.f.mu.Lock()
		e.f.times[ev.ID] = ev.Time
		e.f.mu.Unlock()
		return fn(ev)
	})
}

// watch follows the source's journal and signals wake at every new event,
// so a round starts as soon as there is something to load; a broken stream
// is taken up again after a backoff, which an event delivered resets (the
// rounds report the source's state).
func (f *Follower) watch(ctx context.Context, wake chan<- struct{}) {
	b := backoff.Backoff{Min: watchMinBackoff, Max: followMaxBackoff}
	var next uint64
	for ctx.Err() == nil {
		if next == 0 {
			if last, err := f.cfg.Source.Last(ctx); err == nil {
				next = last + 1
			}
		}
		if next != 0 {
			f.cfg.Source.Follow(ctx, next, func(e *journal.Event) error {
				next = e.ID + 1
				b.Reset()
				select {
				case wake <- struct{}{}:
				default:
				}
				return nil
			})
		}
		if f.sleep(ctx, b.Next()) != nil {
			return
		}
	}
}
