package repl

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/internal/logtest"
	"github.com/cmfs-project/cmfs/internal/wait"
	"github.com/cmfs-project/cmfs/journal"
)

// followFake is a FollowSource over a test source: its events and
// files, and a Confirm that records every position and fails while
// confirmErrs holds errors.
type followFake struct {
	*sliceEvents
	*LocalFetcher

	mu          sync.Mutex
	confirms    []uint64
	confirmErrs []error
}

func newFollowFake(s *source) *followFake {
	return &followFake{sliceEvents: &s.ev, LocalFetcher: s.fetcher()}
}

func (f *followFake) Follow(ctx context.Context, from uint64, fn func(*journal.Event) error) error {
	<-ctx.Done()
	return ctx.Err()
}

func (f *followFake) SourceID(ctx context.Context) (string, error) { return "src", nil }

func (f *followFake) Confirm(ctx context.Context, slot string, pos uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.confirmErrs) > 0 {
		err := f.confirmErrs[0]
		f.confirmErrs = f.confirmErrs[1:]
		return err
	}
	f.confirms = append(f.confirms, pos)
	return nil
}

// recordMetrics is a FollowMetrics that keeps what it is told.
type recordMetrics struct {
	mu        sync.Mutex
	applied   []uint64
	untimed   int // events applied without a source time
	files     int
	bytes     int64
	failed    []int
	succeeded int
	source    uint64
}

func (m *recordMetrics) Positions(s, _ uint64) { m.mu.Lock(); m.source = s; m.mu.Unlock() }
func (m *recordMetrics) Applied(id uint64, at time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.applied = append(m.applied, id)
	if at.IsZero() {
		m.untimed++
	}
}
func (m *recordMetrics) Bytes(n int64) { m.mu.Lock(); m.bytes += n; m.mu.Unlock() }
func (m *recordMetrics) Files(n int)   { m.mu.Lock(); m.files += n; m.mu.Unlock() }
func (m *recordMetrics) Failed(n int, _ error) {
	m.mu.Lock()
	m.failed = append(m.failed, n)
	m.mu.Unlock()
}
func (m *recordMetrics) Succeeded() { m.mu.Lock(); m.succeeded++; m.mu.Unlock() }

func newTestFollower(t *testing.T, cfg FollowConfig) *Follower {
	t.Helper()
	f, err := NewFollower(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Close(); err != nil {
			t.Error(err)
		}
		if _, err := os.Stat(FollowWork(f.Target())); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("work directory left behind: %v", err)
		}
	})
	return f
}

// TestFollowerSyncInBatches: each Sync loads at most Batch events, says
// whether the source is still ahead, confirms every new position once,
// and tells the metrics about every event with its time at the source.
func TestFollowerSyncInBatches(t *testing.T) {
	s := opsSource(t)
	last := uint64(len(s.ev.events))
	src, m := newFollowFake(s), &recordMetrics{}
	target := t.TempDir() + "/rep"
	f := newTestFollower(t, FollowConfig{Source: src, Target: target, Batch: 8, Metrics: m})
	for _, want := range []struct {
		at   uint64
		more bool
	}{{8, true}, {16, true}, {last, false}, {last, false}} {
		more, err := f.Sync(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if got := lastID(t, target); got != want.at || more != want.more {
			t.Fatalf("after a round: target at %d (more %v), want %d (more %v)", got, more, want.at, want.more)
		}
		checkTarget(t, s, target, want.at)
	}
	if want := []uint64{0, 8, 16, last}; !slices.Equal(src.confirms, want) {
		t.Errorf("confirmed positions %v, want %v", src.confirms, want)
	}
	var ids []uint64
	for id := uint64(1); id <= last; id++ {
		ids = append(ids, id)
	}
	if !slices.Equal(m.applied, ids) || m.untimed != 0 || m.source != last || m.files == 0 || m.bytes == 0 {
		t.Errorf("metrics: %+v", m)
	}
}

// TestFollowerRunRetries: a failed round is retried (the status file and
// a line say so) until it succeeds; an error Classify says Stop to ends
// Run with it.
func TestFollowerRunRetries(t *testing.T) {
	s := opsSource(t)
	last := uint64(len(s.ev.events))
	errAway, errLost := errors.New("source away"), errors.New("source lost the target")
	src, m := newFollowFake(s), &recordMetrics{}
	src.confirmErrs = []error{errAway, errAway}
	rec, logger := logtest.New()
	target := t.TempDir() + "/rep"
	classify := func(err error) Verdict {
		if errors.Is(err, errLost) {
			return Stop
		}
		return Retry
	}
	f := newTestFollower(t, FollowConfig{
		Source: src, Addr: "src:1", Target: target, Interval: 20 * time.Millisecond, Metrics: m, Classify: classify,
		Logger: logger,
	})
	st, ok, err := ReadFollowStatus(target)
	if err != nil || !ok || st.State != FollowFollowing || st.PID != os.Getpid() || !st.Running || st.Source != "src:1" {
		t.Fatalf("status before running: %+v, %v, %v", st, ok, err)
	}
	const failedMsg, recoveredMsg = "a round failed; retrying", "a round succeeded after failures"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	following := func() bool {
		st, _, _ := ReadFollowStatus(target)
		return st.State == FollowFollowing && st.Failures == 0
	}
	if !wait.Until(20*time.Second, func() bool {
		return lastID(t, target) == last && len(rec.Find(recoveredMsg)) > 0 && following()
	}) {
		t.Fatalf("target at %d after 20s (want %d); lines: %v", lastID(t, target), last, rec.Lines(slog.LevelDebug))
	}
	failures := rec.Find(failedMsg)
	if len(failures) != 2 || failures[1].Level != slog.LevelWarn || failures[1].Attrs["err"] != "source away" ||
		failures[1].Attrs["failures"] != "2" || failures[1].Attrs["source"] != "src:1" || failures[1].Attrs["retry_in"] == "" {
		t.Errorf("failure lines: %v, want two warnings, the 2nd with failures=2, err, source and retry_in", failures)
	}
	if r := rec.Find(recoveredMsg); len(r) != 1 || r[0].Level != slog.LevelInfo || r[0].Attrs["failures"] != "2" ||
		r[0].Attrs["event"] != fmt.Sprint(last) {
		t.Errorf("recovery lines: %v, want one, failures=2 event=%d", r, last)
	}
	// A round is worth a line at debug only.
	if rounds := rec.Find("round"); len(rounds) == 0 || rounds[0].Level != slog.LevelDebug || rounds[0].Attrs["from"] != "1" {
		t.Errorf("round lines: %v, want debug lines from=1 ...", rounds)
	}
	if n := len(rec.Lines(slog.LevelInfo)); n != 3 {
		t.Errorf("%d lines at info and above, want 3 (2 failures, 1 recovery): %v", n, rec.Lines(slog.LevelInfo))
	}
	m.mu.Lock()
	failed := slices.Clone(m.failed)
	m.mu.Unlock()
	if !slices.Equal(failed, []int{1, 2}) {
		t.Errorf("metrics: failed %v, want [1 2]", failed)
	}
	if st, _, _ := ReadFollowStatus(target); st.State != FollowFollowing || st.Failures != 0 {
		t.Errorf("status after recovering: %+v", st)
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run after cancel: %v", err)
	}

	// The source can no longer serve the target: Run ends with that.
	src = newFollowFake(s)
	src.confirmErrs = []error{errLost}
	f = newTestFollower(t, FollowConfig{Source: src, Target: t.TempDir() + "/rep", Classify: classify})
	if err := f.Run(context.Background()); !errors.Is(err, errLost) {
		t.Fatalf("Run: got %v, want %v", err, errLost)
	}
}

// TestFollowerHoldsTarget: a Follower holds its target from NewFollower
// to Close: a Load or a second Follower is refused meanwhile.
func TestFollowerHoldsTarget(t *testing.T) {
	s := opsSource(t)
	target := t.TempDir() + "/rep"
	f, err := NewFollower(context.Background(), FollowConfig{Source: newFollowFake(s), Target: target})
	if err != nil {
		t.Fatal(err)
	}
	dump := mustDump(t, s, 1, uint64(len(s.ev.events)))
	if _, err := Load(context.Background(), dump, target, s.fetcher(), LoadOptions{}); !errors.Is(err, ErrTargetBusy) {
		t.Fatalf("Load while following: got %v, want ErrTargetBusy", err)
	}
	if _, err := NewFollower(context.Background(), FollowConfig{Source: newFollowFake(s), Target: target}); !errors.Is(err, ErrTargetBusy) {
		t.Fatalf("a second follower: got %v, want ErrTargetBusy", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	mustLoad(t, dump, target, s.fetcher())
}

// breakingStream is a source whose event stream breaks at once, but on
// call deliverOn delivers the event asked for first. Only Last and Follow
// are there: watch uses nothing else.
type breakingStream struct {
	FollowSource
	last      uint64
	deliverOn int
	froms     []uint64
}

func (s *breakingStream) Last(context.Context) (uint64, error) { return s.last, nil }

func (s *breakingStream) Follow(ctx context.Context, from uint64, fn func(*journal.Event) error) error {
	s.froms = append(s.froms, from)
	if len(s.froms) == s.deliverOn {
		if err := fn(&journal.Event{ID: from}); err != nil {
			return err
		}
	}
	return errors.New("stream broke")
}

// TestFollowerWatchBacksOff: an event stream that keeps breaking is taken
// up again after growing waits, soon again after one that delivered an
// event, from the event after the last delivered.
func TestFollowerWatchBacksOff(t *testing.T) {
	src := &breakingStream{last: 7, deliverOn: 5}
	// Without jitter; each wait is 0.5 to 1.5 times that, at most the cap.
	steps := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, time.Second, 2 * time.Second, 4 * time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var waits []time.Duration
	f := &Follower{cfg: FollowConfig{Source: src}, sleep: func(ctx context.Context, d time.Duration) error {
		waits = append(waits, d)
		if len(waits) == len(steps) {
			cancel()
		}
		return ctx.Err()
	}}
	f.watch(ctx, make(chan struct{}, 1))

	if len(waits) != len(steps) {
		t.Fatalf("got %d waits %v, want %d", len(waits), waits, len(steps))
	}
	for i, d := range waits {
		if lo, hi := steps[i]/2, min(steps[i]*3/2, followMaxBackoff); d < lo || d > hi {
			t.Errorf("wait %d: got %v, want %v to %v (all: %v)", i+1, d, lo, hi, waits)
		}
	}
	want := []uint64{8, 8, 8, 8, 8, 9, 9}
	if !slices.Equal(src.froms, want) {
		t.Errorf("streams from %v, want %v", src.froms, want)
	}
}

// handClock is a clock that moves only when told: the heartbeat's, in
// TestFollowerStalled.
type handClock struct {
	base time.Time
	off  atomic.Int64
}

func newHandClock() *handClock { return &handClock{base: time.Now()} }

func (c *handClock) now() time.Time          { return c.base.Add(time.Duration(c.off.Load())) }
func (c *handClock) advance(d time.Duration) { c.off.Add(int64(d)) }

// onHandClock puts f's heartbeat on a hand-moved clock.
func onHandClock(f *Follower) *handClock {
	c := newHandClock()
	f.now, f.epoch = c.now, c.now()
	return c
}

// hangingConfirm is a source whose Confirm does not return until release
// is closed; entered is closed at the first call.
type hangingConfirm struct {
	*followFake
	once             sync.Once
	entered, release chan struct{}
}

func (s *hangingConfirm) Confirm(ctx context.Context, slot string, pos uint64) error {
	s.once.Do(func() { close(s.entered) })
	select {
	case <-s.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.followFake.Confirm(ctx, slot, pos)
}

// stallMetrics checks, at every event applied and every failure, that
// the round is not stalled, then moves the clock an hour: the next check
// passes only if progress was noted since.
type stallMetrics struct {
	recordMetrics
	t     *testing.T
	f     *Follower
	clock *handClock
}

func (m *stallMetrics) check(what string) {
	if s := m.f.Stalled(); s != 0 {
		m.t.Errorf("%s: stalled for %v, want 0: progress since the last hour went by", what, s)
	}
	m.clock.advance(time.Hour)
}

func (m *stallMetrics) Applied(id uint64, at time.Time) {
	m.check(fmt.Sprintf("event %d applied", id))
	m.recordMetrics.Applied(id, at)
}

func (m *stallMetrics) Failed(n int, err error) {
	m.check(fmt.Sprintf("failure %d", n))
	m.recordMetrics.Failed(n, err)
}

// TestFollowerStalled: Stalled grows while a round is stuck in a call the
// source does not answer, and only then; a round that keeps applying
// events, and a follow retrying a source that fails, are not stalled, and
// neither is the loop waiting between rounds.
func TestFollowerStalled(t *testing.T) {
	s := opsSource(t)
	last := uint64(len(s.ev.events))

	t.Run("stuck in a call", func(t *testing.T) {
		src := &hangingConfirm{followFake: newFollowFake(s), entered: make(chan struct{}), release: make(chan struct{})}
		target := t.TempDir() + "/rep"
		f := newTestFollower(t, FollowConfig{Source: src, Target: target, Interval: time.Hour})
		clock := onHandClock(f)
		if got := f.Stalled(); got != 0 {
			t.Fatalf("before Run: stalled %v", got)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- f.Run(ctx) }()
		defer func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		}()
		<-src.entered
		for _, want := range []time.Duration{time.Hour, 2 * time.Hour} {
			clock.advance(time.Hour)
			if got := f.Stalled(); got != want {
				t.Fatalf("stuck in Confirm: stalled %v, want %v", got, want)
			}
		}
		close(src.release)
		if !wait.Until(20*time.Second, func() bool { return lastID(t, target) == last && f.Stalled() == 0 }) {
			t.Fatalf("after the call returned: target at %d (want %d), stalled %v; want the loop waiting", lastID(t, target), last, f.Stalled())
		}
	})

	t.Run("applying", func(t *testing.T) {
		target := t.TempDir() + "/rep"
		m := &stallMetrics{t: t}
		f := newTestFollower(t, FollowConfig{Source: newFollowFake(s), Target: target, Metrics: m})
		m.f, m.clock = f, onHandClock(f)
		f.begin() // as Run does before each round
		if _, err := f.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := lastID(t, target); got != last || len(m.applied) != int(last) {
			t.Fatalf("target at %d, %d events applied; want %d", got, len(m.applied), last)
		}
	})

	t.Run("retrying", func(t *testing.T) {
		src := newFollowFake(s)
		for range 5 {
			src.confirmErrs = append(src.confirmErrs, errors.New("source away"))
		}
		m := &stallMetrics{t: t}
		f := newTestFollower(t, FollowConfig{Source: src, Target: t.TempDir() + "/rep", Metrics: m})
		m.f, m.clock = f, onHandClock(f)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		waits := 0
		f.sleep = func(ctx context.Context, d time.Duration) error {
			if ctx.Err() != nil {
				return ctx.Err() // the event stream's, once Run ends
			}
			if s := f.Stalled(); s != 0 {
				t.Errorf("waiting after a failure: stalled %v, want 0", s)
			}
			m.clock.advance(time.Hour)
			if waits++; waits == 5 {
				cancel()
			}
			return ctx.Err()
		}
		if err := f.Run(ctx); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(m.failed, []int{1, 2, 3, 4, 5}) {
			t.Errorf("failures %v, want 1 to 5", m.failed)
		}
	})
}
