package repl

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
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
func (m *recordMetrics) Failed(n int)  { m.mu.Lock(); m.failed = append(m.failed, n); m.mu.Unlock() }
func (m *recordMetrics) Succeeded()    { m.mu.Lock(); m.succeeded++; m.mu.Unlock() }

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
