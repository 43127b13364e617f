package peer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/internal/wait"

	"github.com/prometheus/client_golang/prometheus"
)

// runSupervisor runs a supervisor of do until the test ends.
func runSupervisor(t *testing.T, cfg Config, do ReplicateFunc) *Supervisor {
	t.Helper()
	s, err := NewSupervisor(cfg, do)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		s.Run(ctx)
		close(done)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return s
}

// gated is a ReplicateFunc whose tasks wait for the gate to close,
// counting calls and the most running at once.
type gated struct {
	gate    chan struct{}
	mu      sync.Mutex
	calls   map[taskKey]int
	order   []uint64
	running int
	most    int
}

func newGated() *gated { return &gated{gate: make(chan struct{}), calls: make(map[taskKey]int)} }

func (g *gated) do(ctx context.Context, t Task) (Result, error) {
	g.mu.Lock()
	g.calls[taskKey{t.Container, t.Target}]++
	g.order = append(g.order, t.Container)
	g.running++
	g.most = max(g.most, g.running)
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.running--
		g.mu.Unlock()
	}()
	select {
	case <-g.gate:
		return Result{Bytes: int64(t.Container)}, nil
	case <-ctx.Done():
		return Result{}, fmt.Errorf("task %d: %w", t.Container, ctx.Err())
	}
}

func (g *gated) stats() (most int, order []uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.most, append([]uint64(nil), g.order...)
}

func TestSupervisorDedup(t *testing.T) {
	g := newGated()
	s := runSupervisor(t, Config{}, g.do)
	a := s.Submit(Task{Container: 1, Target: "b:1"})
	if again := s.Submit(Task{Container: 1, Target: "b:1", Mode: Pull}); again != a {
		t.Error("a second Submit of the same container and target made a second job")
	}
	other := s.Submit(Task{Container: 1, Target: "c:1"})
	if other == a {
		t.Error("another target shares the job")
	}
	wait.For(t, 10*time.Second, "both running", func() bool { _, r := s.Len(); return r == 2 })
	if again := s.Submit(Task{Container: 1, Target: "b:1"}); again != a {
		t.Error("a Submit while the job runs made a second job")
	}
	close(g.gate)
	ctx := context.Background()
	for _, j := range []*Job{a, other} {
		if res, err := j.Wait(ctx); err != nil || res.Bytes != 1 {
			t.Errorf("%+v: %+v, %v", j.Task(), res, err)
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.calls[taskKey{1, "b:1"}] != 1 || g.calls[taskKey{1, "c:1"}] != 1 {
		t.Errorf("calls %v, want one per target", g.calls)
	}
	if a.Task().Mode != Push {
		t.Error("a duplicate changed the job's mode")
	}
}

func TestSupervisorConcurrency(t *testing.T) {
	g := newGated()
	s := runSupervisor(t, Config{Concurrency: 3}, g.do)
	var jobs []*Job
	for i := range 10 {
		jobs = append(jobs, s.Submit(Task{Container: uint64(i + 1), Target: "t:1"}))
	}
	wait.For(t, 10*time.Second, "3 running, 7 queued", func() bool { q, r := s.Len(); return q == 7 && r == 3 })
	wait.For(t, 10*time.Second, "3 tasks inside the replicate function", func() bool { g.mu.Lock(); defer g.mu.Unlock(); return g.running == 3 })
	// The supervisor counts a task running when it starts it, so 3 running
	// and 7 queued is the limit holding; the function's own count says
	// it never saw more, now and (below) once all have run.
	if most, _ := g.stats(); most != 3 {
		t.Fatalf("%d ran at once, limit 3", most)
	}
	s.SetDecommissioning(true)
	if s.Limit() != 6 {
		t.Errorf("limit %d while decommissioning, want 6", s.Limit())
	}
	wait.For(t, 10*time.Second, "6 running, 4 queued", func() bool { q, r := s.Len(); return q == 4 && r == 6 })
	// The supervisor counts a task running before its function is entered:
	// wait for all six to be inside before letting them finish.
	wait.For(t, 10*time.Second, "6 tasks inside the replicate function", func() bool { g.mu.Lock(); defer g.mu.Unlock(); return g.running == 6 })
	close(g.gate)
	for _, j := range jobs {
		if _, err := j.Wait(context.Background()); err != nil {
			t.Error(err)
		}
	}
	if most, _ := g.stats(); most != 6 {
		t.Errorf("%d ran at once, limit 6", most)
	}
	s.SetDecommissioning(false)
	if s.Limit() != 3 {
		t.Errorf("limit %d after decommissioning, want 3", s.Limit())
	}
}

func TestSupervisorPriority(t *testing.T) {
	g := newGated()
	s := runSupervisor(t, Config{Concurrency: 1}, g.do)
	first := s.Submit(Task{Container: 100, Target: "t:1"})
	wait.For(t, 10*time.Second, "the first running", func() bool { _, r := s.Len(); return r == 1 })
	var jobs []*Job
	for _, p := range []struct {
		id  uint64
		pri int
	}{{1, 1}, {2, 5}, {3, 3}, {4, 5}, {5, 0}, {6, -2}} {
		jobs = append(jobs, s.Submit(Task{Container: p.id, Target: "t:1", Priority: p.pri}))
	}
	s.Submit(Task{Container: 5, Target: "t:1", Priority: 10}) // raises 5 above all
	close(g.gate)
	for _, j := range append(jobs, first) {
		if _, err := j.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	_, order := g.stats()
	if want := []uint64{100, 5, 2, 4, 3, 1, 6}; fmt.Sprint(order) != fmt.Sprint(want) {
		t.Errorf("ran in order %v, want %v", order, want)
	}
}

// TestSupervisorJobs: Jobs lists the running job first, then the queue in
// the order it will run, a raised priority included.
func TestSupervisorJobs(t *testing.T) {
	g := newGated()
	s := runSupervisor(t, Config{Concurrency: 1}, g.do)
	first := s.Submit(Task{Container: 100, Target: "t:1"})
	wait.For(t, 10*time.Second, "the first running", func() bool { _, r := s.Len(); return r == 1 })
	for _, p := range []struct {
		id  uint64
		pri int
	}{{1, 1}, {2, 5}, {3, 3}, {4, 5}} {
		s.Submit(Task{Container: p.id, Target: "t:1", Priority: p.pri})
	}
	s.Submit(Task{Container: 1, Target: "t:1", Priority: 10})
	var got []string
	for _, j := range s.Jobs() {
		st := "queued"
		if j.Running {
			st = "running"
			if j.Started.IsZero() {
				t.Errorf("job %d runs with no start time", j.Container)
			}
		} else if !j.Started.IsZero() {
			t.Errorf("queued job %d has a start time", j.Container)
		}
		got = append(got, fmt.Sprintf("%d:%s:%d", j.Container, st, j.Priority))
	}
	if want := "[100:running:0 1:queued:10 2:queued:5 4:queued:5 3:queued:3]"; fmt.Sprint(got) != want {
		t.Errorf("Jobs %v, want %s", got, want)
	}
	close(g.gate)
	if _, err := first.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "every job done", func() bool { return len(s.Jobs()) == 0 })
}

func TestSupervisorDeadline(t *testing.T) {
	g := newGated()
	s := runSupervisor(t, Config{Concurrency: 1}, g.do)
	ctx := context.Background()
	running := s.Submit(Task{Container: 1, Target: "t:1", Deadline: time.Now().Add(100 * time.Millisecond)})
	wait.For(t, 10*time.Second, "the first running", func() bool { _, r := s.Len(); return r == 1 })
	queued := s.Submit(Task{Container: 2, Target: "t:1", Deadline: time.Now().Add(30 * time.Millisecond)})
	start := time.Now()
	_, err := queued.Wait(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "while queued") {
		t.Errorf("queued past its deadline: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("the queued job failed after %v", d)
	}
	if _, err := running.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("running past its deadline: %v", err)
	}
	_, order := g.stats()
	if fmt.Sprint(order) != "[1]" {
		t.Errorf("ran %v: the expired job ran", order)
	}
	body := scrape(t, s)
	for _, want := range []string{"replicad_replication_timeout_total 2", "replicad_replication_failure_total 0", `replicad_replication_duration_seconds_count{result="timeout"} 1`} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

func TestSupervisorStop(t *testing.T) {
	g := newGated()
	s, err := NewSupervisor(Config{Concurrency: 1}, g.do)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		s.Run(ctx)
		close(done)
	}()
	running := s.Submit(Task{Container: 1, Target: "t:1"})
	queued := s.Submit(Task{Container: 2, Target: "t:1"})
	wait.For(t, 10*time.Second, "the first running", func() bool { _, r := s.Len(); return r == 1 })
	cancel()
	<-done
	if _, err := queued.Wait(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("queued at stop: %v, want ErrClosed", err)
	}
	if _, err := running.Wait(context.Background()); !errors.Is(err, context.Canceled) {
		t.Errorf("running at stop: %v, want context.Canceled", err)
	}
	if _, err := s.Submit(Task{Container: 3, Target: "t:1"}).Wait(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("submitted after stop: %v, want ErrClosed", err)
	}
	if err := s.Run(context.Background()); err == nil {
		t.Error("a second Run ran")
	}
}

func TestMetrics(t *testing.T) {
	ctx := context.Background()
	src := startNode(t, newFakeStore(), Config{NodeID: "node-a", Rack: "r1"})
	dst := startNode(t, newFakeStore(), Config{NodeID: "node-b"})
	data := src.store.add(t, 11, 1<<20+1)
	if _, err := src.c.Replicate(ctx, Task{Container: 11, Target: dst.addr}); err != nil {
		t.Fatal(err)
	}
	if _, err := src.c.Replicate(ctx, Task{Container: 12, Target: dst.addr}); err == nil {
		t.Fatal("replicated a missing container")
	}
	body := scrape(t, src.srv.Supervisor())
	labels := `{node="node-a",rack="r1"}`
	for _, want := range []string{
		"replicad_replication_success_total" + labels + " 1",
		"replicad_replication_failure_total" + labels + " 1",
		"replicad_replication_timeout_total" + labels + " 0",
		"replicad_replication_queued" + labels + " 0",
		"replicad_replication_in_flight" + labels + " 0",
		"replicad_replication_concurrency_limit" + labels + " 10",
		`replicad_replication_bytes_total{direction="sent",node="node-a",rack="r1"} ` + promFloat(len(data)),
		`replicad_replication_duration_seconds_count{node="node-a",rack="r1",result="success"} 1`,
		`replicad_replication_duration_seconds_count{node="node-a",rack="r1",result="timeout"} 0`,
		"process_resident_memory_bytes",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if got := src.srv.Supervisor().Labels(); !maps.Equal(got, prometheus.Labels{"node": "node-a", "rack": "r1"}) {
		t.Errorf("Labels() = %v, want node and rack", got)
	}
	if got := dst.srv.Supervisor().Labels(); !maps.Equal(got, prometheus.Labels{"node": "node-b"}) {
		t.Errorf("Labels() without a rack = %v, want node alone", got)
	}
	rec := httptest.NewRecorder()
	dst.srv.Metrics().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if want := `replicad_replication_bytes_total{direction="received",node="node-b"} ` + promFloat(len(data)); !strings.Contains(rec.Body.String(), want) {
		t.Errorf("the target's metrics lack %q", want)
	}
}

// promFloat formats n as the exposition format does.
func promFloat(n int) string { return strconv.FormatFloat(float64(n), 'g', -1, 64) }

// scrape returns what s's metrics handler serves.
func scrape(t *testing.T, s *Supervisor) string {
	t.Helper()
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
