package peer

import (
	"cmp"
	"container/heap"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cmfs-project/cmfs/container"
)

// Mode is how a container travels to its target.
type Mode int

const (
	// Push: the source streams the tarball to the target.
	Push Mode = iota
	// Pull: the target downloads it from the source.
	Pull
	// NodeDefault leaves the choice to the node that replicates: Push,
	// or Pull when it runs with Config.Pull. The node decides when the
	// request arrives (Replicate); a task it runs is Push or Pull.
	NodeDefault
)

func (m Mode) String() string {
	switch m {
	case Pull:
		return "pull"
	case NodeDefault:
		return "node default"
	}
	return "push"
}

// ParseMode returns the mode named s: "push" (or "") or "pull".
func ParseMode(s string) (Mode, error) {
	switch s {
	case "", "push":
		return Push, nil
	case "pull":
		return Pull, nil
	}
	return Push, fmt.Errorf("mode %q: want push or pull: %w", s, ErrInvalid)
}

// Task is one replication: a container of this node to a target node.
type Task struct {
	Container uint64
	// Target is the target node's address.
	Target      string
	Mode        Mode
	Compression container.Compression
	// Priority orders the queue: higher first, then first come.
	Priority int
	// Deadline is when the task fails if it has not succeeded, queued or
	// running. Zero: the Supervisor's TaskTimeout after Submit.
	Deadline time.Time
	// WaitScan makes the target answer after its scan (CLOSED or
	// UNHEALTHY) instead of once the container is in place (RECOVERING).
	WaitScan bool
}

// Result is what a task did.
type Result struct {
	// Descriptor is the container as the target imported it.
	Descriptor container.Descriptor
	// Bytes is the tarball's length on the wire.
	Bytes int64
	// Attempts counts the transfers started.
	Attempts int
	// Duration is the time the task ran, retries included, queueing not.
	Duration time.Duration
	// Mode is how the container travelled: Push or Pull.
	Mode Mode
}

// ReplicateFunc runs one task; ctx ends at the task's deadline.
type ReplicateFunc func(ctx context.Context, t Task) (Result, error)

// Supervisor runs a node's replication tasks: a priority queue
// deduplicated by (container, target), at most Limit tasks at once, each
// bounded by its deadline (a task still queued at its deadline fails
// without running). Run drives it. It exposes its metrics (Handler):
//
//	replicad_replication_queued, _in_flight, _concurrency_limit   gauges
//	replicad_replication_success_total, _failure_total, _timeout_total
//	replicad_replication_bytes_total{direction="sent"|"received"}
//	replicad_replication_duration_seconds{result=...}   histogram
//
// labelled with the node (and rack) when Config names them, next to the
// Go runtime's and the process's (RSS among them).
type Supervisor struct {
	do      ReplicateFunc
	timeout time.Duration
	base    int
	m       *metrics
	log     *slog.Logger

	mu       sync.Mutex
	queue    jobHeap
	jobs     map[taskKey]*Job // queued or running
	running  int
	decom    bool
	seq      uint64
	stopped  bool
	wake     chan struct{}
	runStart bool
}

type taskKey struct {
	container uint64
	target    string
}

// Job is a submitted task; every Submit of the same (container, target)
// while it is queued or running gets the same Job.
type Job struct {
	s     *Supervisor
	task  Task // guarded by s.mu (Priority rises with a duplicate Submit)
	seq   uint64
	index int // in the queue; -1 once out of it
	timer *time.Timer
	// started is when Run started it (guarded by s.mu); zero while queued.
	started time.Time
	done    chan struct{}
	res     Result
	err     error
}

// Task returns the job's task.
func (j *Job) Task() Task {
	j.s.mu.Lock()
	defer j.s.mu.Unlock()
	return j.task
}

// Done is closed when the job has ended.
func (j *Job) Done() <-chan struct{} { return j.done }

// Wait returns the job's result once it has ended, or ctx's error first.
// The job goes on when ctx ends: others may be waiting for it.
func (j *Job) Wait(ctx context.Context) (Result, error) {
	select {
	case <-j.done:
		return j.res, j.err
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
}

// NewSupervisor returns a supervisor that runs tasks with do, with cfg's
// Concurrency, TaskTimeout, NodeID, Rack and Logger.
//
// Errors: ErrInvalid (wrapped) for a negative setting.
func NewSupervisor(cfg Config, do ReplicateFunc) (*Supervisor, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Supervisor{
		do:      do,
		timeout: cfg.TaskTimeout,
		base:    cfg.Concurrency,
		m:       newMetrics(cfg.NodeID, cfg.Rack),
		log:     cfg.Logger,
		jobs:    make(map[taskKey]*Job),
		wake:    make(chan struct{}, 1),
	}
	s.m.limit.Set(float64(s.base))
	return s, nil
}

// Submit queues t, or returns the job already queued or running for the
// same container and target (whose priority it raises to t's if that is
// higher; its mode, compression and deadline stay). Jobs start once Run
// runs; after Run has returned, a job fails at once with ErrClosed.
func (s *Supervisor) Submit(t Task) *Job {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		j := &Job{s: s, task: t, index: -1, done: make(chan struct{})}
		j.finish(Result{}, fmt.Errorf("replicate container %d to %s: %w", t.Container, t.Target, ErrClosed))
		return j
	}
	key := taskKey{t.Container, t.Target}
	if j, ok := s.jobs[key]; ok {
		if j.index >= 0 && t.Priority > j.task.Priority {
			j.task.Priority = t.Priority
			heap.Fix(&s.queue, j.index)
		}
		return j
	}
	if t.Deadline.IsZero() {
		t.Deadline = time.Now().Add(s.timeout)
	}
	s.seq++
	j := &Job{s: s, task: t, seq: s.seq, done: make(chan struct{})}
	s.jobs[key] = j
	heap.Push(&s.queue, j)
	j.timer = time.AfterFunc(time.Until(t.Deadline), func() { s.expire(j) })
	s.m.queued.Set(float64(len(s.queue)))
	s.signal()
	return j
}

// SetDecommissioning doubles the concurrency limit while on is true: a
// node leaving the cluster hands its containers over faster.
func (s *Supervisor) SetDecommissioning(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.decom = on
	s.m.limit.Set(float64(s.limitLocked()))
	s.signal()
}

// Limit returns how many tasks may run at once now.
func (s *Supervisor) Limit() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.limitLocked()
}

func (s *Supervisor) limitLocked() int {
	if s.decom {
		return 2 * s.base
	}
	return s.base
}

// Len returns how many jobs are queued and how many are running.
func (s *Supervisor) Len() (queued, running int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue), s.running
}

// JobStatus is a queued or running job as Jobs shows it.
type JobStatus struct {
	Task
	// Running: started and not yet ended; otherwise queued.
	Running bool
	// Started is when it started running; zero while queued.
	Started time.Time
}

// Jobs returns the jobs queued or running now: the running first, by
// when they started, then the queue in the order it runs them (highest
// priority first, then first come). Each is a copy: what it says may be
// out of date as soon as it returns.
func (s *Supervisor) Jobs() []JobStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	jobs := make([]*Job, 0, len(s.jobs))
	for _, j := range s.jobs {
		jobs = append(jobs, j)
	}
	slices.SortFunc(jobs, func(a, b *Job) int {
		ra, rb := a.index < 0, b.index < 0
		switch {
		case ra != rb:
			if ra {
				return -1
			}
			return 1
		case ra:
			return cmp.Or(a.started.Compare(b.started), cmp.Compare(a.seq, b.seq))
		}
		return cmp.Or(cmp.Compare(b.task.Priority, a.task.Priority), cmp.Compare(a.seq, b.seq))
	})
	out := make([]JobStatus, len(jobs))
	for i, j := range jobs {
		out[i] = JobStatus{Task: j.task, Running: j.index < 0, Started: j.started}
	}
	return out
}

// Handler serves the metrics in the Prometheus exposition format: mount
// it on /metrics.
func (s *Supervisor) Handler() http.Handler {
	return promhttp.HandlerFor(s.m.reg, promhttp.HandlerOpts{})
}

// Register adds c to the metrics Handler serves (a node's other
// metrics, such as the source's replication slots).
func (s *Supervisor) Register(c prometheus.Collector) error { return s.m.reg.Register(c) }

// Labels returns the constant labels of the supervisor's metrics: node
// and rack, each when set. A node's other metrics carry them too.
func (s *Supervisor) Labels() prometheus.Labels { return maps.Clone(s.m.labels) }

// Run starts queued jobs, highest priority first, as the limit allows,
// until ctx ends; then it fails the queued jobs with ErrClosed, cancels
// the running ones, waits for them and returns nil. It runs once.
func (s *Supervisor) Run(ctx context.Context) error {
	s.mu.Lock()
	if s.runStart {
		s.mu.Unlock()
		return errors.New("peer: Supervisor.Run called twice")
	}
	s.runStart = true
	s.mu.Unlock()
	var wg sync.WaitGroup
	for {
		s.mu.Lock()
		for s.running < s.limitLocked() && len(s.queue) > 0 {
			j := heap.Pop(&s.queue).(*Job)
			j.timer.Stop()
			j.started = time.Now()
			s.running++
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.run(ctx, j)
			}()
		}
		s.m.queued.Set(float64(len(s.queue)))
		s.m.inFlight.Set(float64(s.running))
		s.mu.Unlock()
		select {
		case <-s.wake:
		case <-ctx.Done():
			s.mu.Lock()
			s.stopped = true
			for _, j := range s.queue {
				j.timer.Stop()
				j.index = -1
				delete(s.jobs, taskKey{j.task.Container, j.task.Target})
				j.finish(Result{}, fmt.Errorf("replicate container %d to %s: %w", j.task.Container, j.task.Target, ErrClosed))
			}
			s.queue = nil
			s.m.queued.Set(0)
			s.mu.Unlock()
			wg.Wait()
			return nil
		}
	}
}

// run runs one job and ends it.
func (s *Supervisor) run(ctx context.Context, j *Job) {
	t := j.Task()
	tctx, cancel := context.WithDeadline(ctx, t.Deadline)
	start := time.Now()
	res, err := s.do(tctx, t)
	cancel()
	res.Duration = time.Since(start)
	result := "success"
	switch {
	case err == nil:
		s.m.success.Inc()
	case ctx.Err() == nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(tctx.Err(), context.DeadlineExceeded)):
		if !errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
		}
		result = "timeout"
		s.m.timeout.Inc()
	default:
		result = "failure"
		s.m.failure.Inc()
	}
	s.m.duration.WithLabelValues(result).Observe(res.Duration.Seconds())
	// The job's waiter gets the error; the log only tells the operator
	// at debug what ran.
	s.log.Debug("replication", slog.Uint64("container", t.Container), slog.String("target", t.Target),
		slog.String("mode", res.Mode.String()), slog.String("result", result), slog.Int("attempts", res.Attempts),
		slog.Int64("bytes", res.Bytes), slog.Duration("took", res.Duration), slog.Any("err", err))
	s.mu.Lock()
	defer s.mu.Unlock()
	s.running--
	s.m.inFlight.Set(float64(s.running))
	delete(s.jobs, taskKey{t.Container, t.Target})
	j.finish(res, err)
	s.signal()
}

// expire fails a job whose deadline came while it was queued.
func (s *Supervisor) expire(j *Job) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if j.index < 0 {
		return // started, or the supervisor stopped
	}
	heap.Remove(&s.queue, j.index)
	delete(s.jobs, taskKey{j.task.Container, j.task.Target})
	s.m.queued.Set(float64(len(s.queue)))
	s.m.timeout.Inc()
	j.finish(Result{}, fmt.Errorf("replicate container %d to %s: deadline passed while queued: %w", j.task.Container, j.task.Target, context.DeadlineExceeded))
}

func (s *Supervisor) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (j *Job) finish(res Result, err error) {
	j.res, j.err = res, err
	close(j.done)
}

// jobHeap orders jobs by priority, highest first, then by submission.
type jobHeap []*Job

func (h jobHeap) Len() int { return len(h) }
func (h jobHeap) Less(a, b int) bool {
	if h[a].task.Priority != h[b].task.Priority {
		return h[a].task.Priority > h[b].task.Priority
	}
	return h[a].seq < h[b].seq
}
func (h jobHeap) Swap(a, b int) {
	h[a], h[b] = h[b], h[a]
	h[a].index, h[b].index = a, b
}
func (h *jobHeap) Push(x any) {
	j := x.(*Job)
	j.index = len(*h)
	*h = append(*h, j)
}
func (h *jobHeap) Pop() any {
	old := *h
	j := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	j.index = -1
	return j
}

// metrics are a Supervisor's Prometheus series.
type metrics struct {
	reg                       *prometheus.Registry
	labels                    prometheus.Labels // node, rack
	queued, inFlight, limit   prometheus.Gauge
	success, failure, timeout prometheus.Counter
	sent, received            prometheus.Counter
	duration                  *prometheus.HistogramVec
}

func newMetrics(node, rack string) *metrics {
	labels := prometheus.Labels{}
	if node != "" {
		labels["node"] = node
	}
	if rack != "" {
		labels["rack"] = rack
	}
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "replicad", Subsystem: "replication", Name: name, Help: help, ConstLabels: labels})
	}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "replicad", Subsystem: "replication", Name: name, Help: help, ConstLabels: labels})
	}
	bytes := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "replicad", Subsystem: "replication", Name: "bytes_total",
		Help:        "Container tarball bytes sent to and received from peers.",
		ConstLabels: labels,
	}, []string{"direction"})
	m := &metrics{
		reg:      prometheus.NewRegistry(),
		labels:   labels,
		queued:   gauge("queued", "Replication tasks waiting to run."),
		inFlight: gauge("in_flight", "Replication tasks running."),
		limit:    gauge("concurrency_limit", "How many replication tasks may run at once (doubled while decommissioning)."),
		success:  counter("success_total", "Replication tasks that ended with the target holding the container."),
		failure:  counter("failure_total", "Replication tasks that failed, timeouts aside."),
		timeout:  counter("timeout_total", "Replication tasks whose deadline passed, queued or running."),
		sent:     bytes.WithLabelValues("sent"),
		received: bytes.WithLabelValues("received"),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "replicad", Subsystem: "replication", Name: "duration_seconds",
			Help:        "How long replication tasks ran, retries included, by result.",
			ConstLabels: labels,
			Buckets:     prometheus.ExponentialBuckets(0.05, 2, 17), // 50ms to about 55m
		}, []string{"result"}),
	}
	// Every result has its series from the start, as the bytes'
	// directions do.
	for _, r := range []string{"success", "failure", "timeout"} {
		m.duration.WithLabelValues(r)
	}
	m.reg.MustRegister(m.queued, m.inFlight, m.limit, m.success, m.failure, m.timeout, bytes, m.duration,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}
