package main

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cmfs-project/cmfs/cmroot"
	"github.com/cmfs-project/cmfs/fusefs"
	"github.com/cmfs-project/cmfs/internal/metricsrv"
	"github.com/cmfs-project/cmfs/journal"
	"github.com/cmfs-project/cmfs/protect"
)

// checkMetricsAddr checks mount --metrics's address before anything is
// opened: HOST:PORT, the host possibly empty (every address), the port a
// number (0: any free one).
func checkMetricsAddr(addr string) error {
	if addr == "" {
		return nil
	}
	_, port, err := net.SplitHostPort(addr)
	if err == nil {
		if _, perr := strconv.ParseUint(port, 10, 16); perr != nil {
			err = fmt.Errorf("port %q is not a number from 0 to 65535", port)
		}
	}
	if err != nil {
		return fmt.Errorf("--metrics %q: want HOST:PORT, such as 127.0.0.1:9890 (%v)", addr, err)
	}
	return nil
}

// metricsServer is mount --metrics: a listener opened before the mount,
// so that an address in use fails it before anything is opened, and
// served once the mount is up. A nil *metricsServer is no metrics at all.
type metricsServer struct {
	lis   net.Listener
	stats *fusefs.Stats
	wg    sync.WaitGroup
	stop  context.CancelFunc
	once  sync.Once
}

// listenMetrics listens on addr; "" is no metrics (nil, nil).
func listenMetrics(addr string) (*metricsServer, error) {
	if addr == "" {
		return nil, nil
	}
	lis, err := metricsrv.Listen(addr)
	if err != nil {
		return nil, err
	}
	return &metricsServer{lis: lis, stats: fusefs.NewStats(), stop: func() {}}, nil
}

// opStats is where the mount counts its operations (Config.Stats): nil
// without metrics, and the mount keeps its own.
func (m *metricsServer) opStats() *fusefs.Stats {
	if m == nil {
		return nil
	}
	return m.stats
}

// serve serves /metrics of the mount until close, and returns the
// address served. The journal and the store must stay open until close
// has returned.
func (m *metricsServer) serve(j *journal.Log, store *cmroot.Store, rec protect.Recovery) string {
	if m == nil {
		return ""
	}
	ctx, stop := context.WithCancel(context.Background())
	m.stop = stop
	reg := prometheus.NewRegistry()
	reg.MustRegister(newMountCollector(j, store, m.stats, rec),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return metricsrv.Serve(ctx, &m.wg, m.lis, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
}

// close stops serving, or closes the listener never served; again, it
// does nothing.
func (m *metricsServer) close() {
	if m == nil {
		return
	}
	m.once.Do(func() {
		m.stop()
		m.wg.Wait()
		m.lis.Close()
	})
}

// flushBoundMax is the largest bound of the journal's flush histogram
// that /metrics shows: its bounds double from 1 µs, and a flush longer
// than 2^24 µs (16.8 s) counts only in +Inf.
const flushBoundMax = (1 << 24) * time.Microsecond

// constHistogram turns a journal histogram into what a Prometheus
// histogram holds: the count, the sum in seconds, and the cumulative
// count at each bound up to maxBound (in seconds); what lies above is in
// the count alone (+Inf).
func constHistogram(h journal.Histogram, maxBound time.Duration) (count uint64, sum float64, buckets map[float64]uint64) {
	buckets = make(map[float64]uint64, len(h.Bounds))
	for i, c := range h.Counts {
		count += c
		if i < len(h.Bounds) && h.Bounds[i] <= maxBound {
			buckets[h.Bounds[i].Seconds()] = count
		}
	}
	return count, h.Sum.Seconds(), buckets
}

// recoveryFindings are the finding label's values of
// cmfs_recovery_findings, each a protect.Recovery count.
var recoveryFindings = []struct {
	name string
	of   func(protect.Recovery) int
}{
	{"journaled", func(r protect.Recovery) int { return r.Journaled }},
	{"damaged", func(r protect.Recovery) int { return r.Damaged }},
	{"tail_dropped", func(r protect.Recovery) int { return r.TailDropped }},
	{"changed", func(r protect.Recovery) int { return r.Changed }},
	{"added", func(r protect.Recovery) int { return r.Added }},
	{"removed", func(r protect.Recovery) int { return r.Removed }},
	{"lost", func(r protect.Recovery) int { return r.Lost }},
	{"walked", func(r protect.Recovery) int { return r.Walked }},
	{"hashed", func(r protect.Recovery) int { return r.Hashed }},
}

var (
	descOps            = prometheus.NewDesc("cmfs_operations_total", "Operations through the mount, by operation and result (ok, or the errno's name).", []string{"op", "result"}, nil)
	descPreservedFiles = prometheus.NewDesc("cmfs_preserved_files_total", "Originals preserved in cmroot, by how: move, link, copy, reflink, dedup.", []string{"method"}, nil)
	descPreservedBytes = prometheus.NewDesc("cmfs_preserved_bytes_total", "Bytes of the originals preserved in cmroot, by how.", []string{"method"}, nil)
	descFlush          = prometheus.NewDesc("cmfs_journal_flush_seconds", "How long each journal flush took: the WAL's sync together with the flushes of what its events name.", nil, nil)
	descGroups         = prometheus.NewDesc("cmfs_journal_groups_total", "Group commits written to the journal's write-ahead file.", nil, nil)
	descFlushes        = prometheus.NewDesc("cmfs_journal_flushes_total", "Journal flushes (each the WAL's sync with those of what its events name).", nil, nil)
	descWALSyncs       = prometheus.NewDesc("cmfs_journal_wal_syncs_total", "fdatasyncs of the journal's write-ahead file.", nil, nil)
	descPathSyncs      = prometheus.NewDesc("cmfs_journal_path_syncs_total", "fsyncs of the files and directories events name.", nil, nil)
	descApplies        = prometheus.NewDesc("cmfs_journal_applies_total", "bbolt transactions written behind the write-ahead file.", nil, nil)
	descEvents         = prometheus.NewDesc("cmfs_journal_events_total", "Events made durable since the mount opened the journal, recovery's included.", nil, nil)
	descLastEvent      = prometheus.NewDesc("cmfs_journal_last_event_id", "The journal's newest durable event.", nil, nil)
	descRecovery       = prometheus.NewDesc("cmfs_recovery_findings", "What recovery found as the mount started, by finding.", []string{"finding"}, nil)
	descReconciled     = prometheus.NewDesc("cmfs_recovery_reconciled", "1 when the mount compared the whole tree with the journal as it started (an unclean stop and a reboot).", nil, nil)
	descChecksummed    = prometheus.NewDesc("cmfs_checksum_bytes_total", "Bytes of file content checksummed, by how: read (hashed from the file), kept (a block's sum kept from an earlier checksum, on a filesystem with reflinks).", []string{"how"}, nil)
	descSync           = prometheus.NewDesc("cmfs_sync_info", "The mount's durability mode (--sync): always, or interval:DUR.", []string{"sync"}, nil)
)

// mountCollector exposes what the mount counts, read from where it is
// counted at each scrape: nothing is recorded twice.
type mountCollector struct {
	j     *journal.Log
	store *cmroot.Store
	stats *fusefs.Stats
	rec   protect.Recovery
	// gauges are the values read through a function (cmroot's entries
	// and bytes, the in-flight intents).
	gauges []prometheus.Collector
}

func newMountCollector(j *journal.Log, store *cmroot.Store, stats *fusefs.Stats, rec protect.Recovery) *mountCollector {
	return &mountCollector{j: j, store: store, stats: stats, rec: rec, gauges: []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "cmfs_cmroot_entries", Help: "Entries cmroot holds."},
			func() float64 { n, _ := store.Stats(); return float64(n) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "cmfs_cmroot_bytes", Help: "Bytes of the entries cmroot holds."},
			func() float64 { _, b := store.Stats(); return float64(b) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "cmfs_inflight_intents", Help: "Intents in the in-flight table: changes under way, write handles open, changes kept for a later event."},
			func() float64 { return float64(stats.InFlight()) }),
	}}
}

// Describe implements prometheus.Collector.
func (c *mountCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descOps, descPreservedFiles, descPreservedBytes, descFlush, descGroups, descFlushes,
		descWALSyncs, descPathSyncs, descApplies, descEvents, descLastEvent, descRecovery, descReconciled, descChecksummed, descSync} {
		ch <- d
	}
	for _, g := range c.gauges {
		g.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (c *mountCollector) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, o := range c.stats.Ops() {
		counter(descOps, o.N, o.Op, o.Result)
	}
	for _, m := range c.store.PreserveStats() {
		counter(descPreservedFiles, m.Files, m.Method.String())
		counter(descPreservedBytes, m.Bytes, m.Method.String())
	}
	st := c.j.SyncStats()
	count, sum, buckets := constHistogram(c.j.FlushLatency(), flushBoundMax)
	ch <- prometheus.MustNewConstHistogram(descFlush, count, sum, buckets)
	counter(descGroups, st.Groups)
	counter(descFlushes, st.Flushes)
	counter(descWALSyncs, st.WALSyncs)
	counter(descPathSyncs, protect.Syncs())
	counter(descApplies, st.Applies)
	counter(descEvents, c.j.Stats().Events)
	gauge(descLastEvent, float64(c.j.Last()))
	for _, f := range recoveryFindings {
		gauge(descRecovery, float64(f.of(c.rec)), f.name)
	}
	reconciled := 0.0
	if c.rec.Reconciled {
		reconciled = 1
	}
	gauge(descReconciled, reconciled)
	read, kept := c.stats.Checksummed()
	counter(descChecksummed, uint64(read), "read")
	counter(descChecksummed, uint64(kept), "kept")
	gauge(descSync, 1, st.Mode)
	for _, g := range c.gauges {
		g.Collect(ch)
	}
}
