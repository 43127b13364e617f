package main

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// lagBuckets are the upper bounds (seconds) of the follow lag histogram.
var lagBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// metrics is what follow exposes, in the Prometheus text exposition
// format (version 0.0.4). A handful of series does not need a client
// library: this keeps the module's dependencies to what it already has.
type metrics struct {
	mu sync.Mutex
	v  metricValues
}

// metricValues are the metrics' values at one moment.
type metricValues struct {
	applied    uint64 // events applied
	files      uint64
	bytes      int64
	errors     uint64 // rounds that failed and were retried
	targetLast uint64
	sourceLast uint64
	lastLag    float64
	lagCounts  []uint64 // per bucket, not cumulative
	lagCount   uint64
	lagSum     float64
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

// ServeHTTP writes the metrics in the Prometheus text format.
func (m *metrics) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	m.write(w)
}

func (m *metrics) write(w io.Writer) {
	s := m.snapshot()
	metric := func(name, typ, help string, v float64) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n%s %s\n", name, help, name, typ, name, num(v))
	}
	metric("replicad_follow_events_applied_total", "counter", "Events applied to the target.", float64(s.applied))
	metric("replicad_follow_files_total", "counter", "Files fetched and placed at the target.", float64(s.files))
	metric("replicad_follow_bytes_total", "counter", "Bytes of content placed at the target.", float64(s.bytes))
	metric("replicad_follow_errors_total", "counter", "Rounds that failed and were retried.", float64(s.errors))
	metric("replicad_follow_target_last_id", "gauge", "Last event id applied at the target.", float64(s.targetLast))
	metric("replicad_follow_source_last_id", "gauge", "Newest event id at the source, when last asked.", float64(s.sourceLast))
	metric("replicad_follow_lag_last_seconds", "gauge", "Lag of the last event applied: from its time at the source to applied at the target.", s.lastLag)
	const h = "replicad_follow_lag_seconds"
	fmt.Fprintf(w, "# HELP %s Lag from an event's time at the source to its being applied at the target.\n# TYPE %s histogram\n", h, h)
	var cum uint64
	for i, le := range lagBuckets {
		cum += s.lagCounts[i]
		fmt.Fprintf(w, "%s_bucket{le=%q} %d\n", h, num(le), cum)
	}
	fmt.Fprintf(w, "%s_bucket{le=\"+Inf\"} %d\n%s_sum %s\n%s_count %d\n", h, s.lagCount, h, num(s.lagSum), h, s.lagCount)
}

func num(v float64) string {
	if math.IsInf(v, 1) {
		return "+Inf"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}
