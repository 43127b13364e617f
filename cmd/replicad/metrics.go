package main

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc/codes"

	"github.com/cmfs-project/cmfs/slot"
	"github.com/cmfs-project/cmfs/source"
)

// lagBuckets are the upper bounds (seconds) of the follow lag histogram.
var lagBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// metrics is what follow exposes to Prometheus: its values live here,
// under one lock, so that the progress line and a scrape read the same
// snapshot; Collect hands them to the client library.
type metrics struct {
	mu sync.Mutex
	v  metricValues
}

// metricValues are the metrics' values at one moment.
type metricValues struct {
	applied     uint64 // events applied
	files       uint64
	bytes       int64
	errors      uint64    // rounds that failed and were retried
	failing     uint64    // rounds failed in a row, 0 after a success
	lastSuccess time.Time // the end of the last round that succeeded
	targetLast  uint64
	sourceLast  uint64
	lastLag     float64
	lagCounts   []uint64 // per bucket, not cumulative
	lagCount    uint64
	lagSum      float64
}

func newMetrics() *metrics {
	return &metrics{v: metricValues{lagCounts: make([]uint64, len(lagBuckets)+1)}}
}

// observeLag records the time from an event at the source to its being
// applied at the target.
func (m *metrics) observeLag(d time.Duration) {
	s := max(d.Seconds(), 0)
	m.mu.Lock()
	defer m.mu.Unlock()
	i := 0
	for i < len(lagBuckets) && s > lagBuckets[i] {
		i++
	}
	v := &m.v
	v.lagCounts[i]++
	v.lagCount++
	v.lagSum += s
	v.lastLag = s
	v.applied++
}

func (m *metrics) update(fn func(v *metricValues)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	fn(&m.v)
}

func (m *metrics) snapshot() metricValues {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.v
	c.lagCounts = append([]uint64(nil), m.v.lagCounts...)
	return c
}

// handler serves the metrics at /metrics, through the Prometheus client
// library (with the Go runtime's and the process's own).
func (m *metrics) handler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(m, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
}

var (
	descApplied    = prometheus.NewDesc("replicad_follow_events_applied_total", "Events applied to the target.", nil, nil)
	descFiles      = prometheus.NewDesc("replicad_follow_files_total", "Files fetched and placed at the target.", nil, nil)
	descBytes      = prometheus.NewDesc("replicad_follow_bytes_total", "Bytes of content placed at the target.", nil, nil)
	descErrors     = prometheus.NewDesc("replicad_follow_errors_total", "Rounds that failed and were retried.", nil, nil)
	descFailing    = prometheus.NewDesc("replicad_follow_consecutive_failures", "Rounds failed in a row (0: the last round succeeded); each is retried with backoff.", nil, nil)
	descSuccess    = prometheus.NewDesc("replicad_follow_last_success_timestamp_seconds", "When the last round that succeeded ended (Unix time; 0: none yet).", nil, nil)
	descTargetLast = prometheus.NewDesc("replicad_follow_target_last_id", "Last event id applied at the target.", nil, nil)
	descSourceLast = prometheus.NewDesc("replicad_follow_source_last_id", "Newest event id at the source, when last asked.", nil, nil)
	descLastLag    = prometheus.NewDesc("replicad_follow_lag_last_seconds", "Lag of the last event applied: from its time at the source to applied at the target.", nil, nil)
	descLag        = prometheus.NewDesc("replicad_follow_lag_seconds", "Lag from an event's time at the source to its being applied at the target.", nil, nil)
)

// Describe implements prometheus.Collector.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descApplied, descFiles, descBytes, descErrors, descFailing, descSuccess, descTargetLast, descSourceLast, descLastLag, descLag} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: one consistent snapshot.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	s := m.snapshot()
	counter := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v)
	}
	gauge := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	counter(descApplied, float64(s.applied))
	counter(descFiles, float64(s.files))
	counter(descBytes, float64(s.bytes))
	counter(descErrors, float64(s.errors))
	gauge(descFailing, float64(s.failing))
	success := 0.0
	if !s.lastSuccess.IsZero() {
		success = float64(s.lastSuccess.UnixNano()) / 1e9
	}
	gauge(descSuccess, success)
	gauge(descTargetLast, float64(s.targetLast))
	gauge(descSourceLast, float64(s.sourceLast))
	gauge(descLastLag, s.lastLag)
	buckets := make(map[float64]uint64, len(lagBuckets))
	var cum uint64
	for i, le := range lagBuckets {
		cum += s.lagCounts[i]
		buckets[le] = cum
	}
	ch <- prometheus.MustNewConstHistogram(descLag, s.lagCount, s.lagSum, buckets)
}

// slotCollector exposes a source's replication slots: each one's
// position, lag (events behind) and what it pins. Reading what a slot
// pins scans the events after it, so a scrape reuses a reading younger
// than slotMetricsTTL.
type slotCollector struct {
	src *source.Server

	mu      sync.Mutex
	at      time.Time
	pins    []slot.Pin
	horizon uint64
}

const slotMetricsTTL = 10 * time.Second

var (
	descSlotPosition = prometheus.NewDesc("replicad_slot_position", "Last event the slot's destination applied.", []string{"slot"}, nil)
	descSlotLag      = prometheus.NewDesc("replicad_slot_lag_events", "Events the source has past the slot's position.", []string{"slot"}, nil)
	descSlotEntries  = prometheus.NewDesc("replicad_slot_pinned_entries", "cmroot entries the events after the slot's position name (kept by gc up to --retain-max).", []string{"slot"}, nil)
	descSlotBytes    = prometheus.NewDesc("replicad_slot_pinned_bytes", "Bytes of the cmroot entries the slot pins.", []string{"slot"}, nil)
	descSlotLost     = prometheus.NewDesc("replicad_slot_lost", "1 when the slot fell behind what gc kept (its destination must be bootstrapped again).", []string{"slot"}, nil)
	descSlotHorizon  = prometheus.NewDesc("replicad_slot_gc_horizon", "Newest event naming a cmroot entry gc removed.", nil, nil)
)

// Describe implements prometheus.Collector.
func (c *slotCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSlotPosition, descSlotLag, descSlotEntries, descSlotBytes, descSlotLost, descSlotHorizon} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *slotCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.at) >= slotMetricsTTL {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		pins, st, _, err := c.src.Pins(ctx)
		cancel()
		if err != nil {
			ch <- prometheus.NewInvalidMetric(descSlotHorizon, err)
			return
		}
		c.pins, c.horizon, c.at = pins, st.Horizon, time.Now()
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	gauge(descSlotHorizon, float64(c.horizon))
	for _, p := range c.pins {
		lost := 0.0
		if p.Lost {
			lost = 1
		}
		gauge(descSlotPosition, float64(p.Position), p.Name)
		gauge(descSlotLag, float64(p.Lag), p.Name)
		gauge(descSlotEntries, float64(p.Entries), p.Name)
		gauge(descSlotBytes, float64(p.Bytes), p.Name)
		gauge(descSlotLost, lost, p.Name)
	}
}

// sourceCollectors are the metrics of a source: its slots and what it
// served. A source alone (sourceMetrics) and a node that serves a
// warehouse register the same ones.
func sourceCollectors(src *source.Server) []prometheus.Collector {
	return []prometheus.Collector{&slotCollector{src: src}, sourceCollector{stats: src.Stats}}
}

// sourceCollector exposes what a source served, read from the server's
// own counters (source.Server.Stats) at each scrape.
type sourceCollector struct{ stats func() source.ServerStats }

var (
	descSourceRequests = prometheus.NewDesc("replicad_source_requests_total", "Calls of the source service that passed authentication, by method and result (ok, or the gRPC code).", []string{"method", "result"}, nil)
	descSourceEvents   = prometheus.NewDesc("replicad_source_events_sent_total", "Journal events sent to destinations (Events streams).", nil, nil)
	descSourceFiles    = prometheus.NewDesc("replicad_source_files_sent_total", "Files sent whole to destinations (ReadFile).", nil, nil)
	descSourceBytes    = prometheus.NewDesc("replicad_source_bytes_sent_total", "File bytes sent to destinations (ReadFile), those of files cut short included.", nil, nil)
)

// Describe implements prometheus.Collector.
func (c sourceCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSourceRequests, descSourceEvents, descSourceFiles, descSourceBytes} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c sourceCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.stats()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	for _, r := range st.Requests {
		result := "ok"
		if r.Code != codes.OK {
			result = r.Code.String()
		}
		counter(descSourceRequests, r.N, r.Method, result)
	}
	counter(descSourceEvents, st.Events)
	counter(descSourceFiles, st.Files)
	counter(descSourceBytes, st.Bytes)
}
