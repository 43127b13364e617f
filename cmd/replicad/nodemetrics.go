package main

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cmfs-project/cmfs/cluster"
	"github.com/cmfs-project/cmfs/cluster/coord"
	"github.com/cmfs-project/cmfs/container"
)

// A node's metrics beside its replication supervisor's, with the same
// constant labels (node, rack: peer.Supervisor.Labels): its volumes, and
// on a coordinator what the coordinator knows of the cluster. Both are
// read at each scrape from what the store and the coordinator hold in
// memory; nothing is counted twice.

// label is how a state's name reads as a label value: "UNDER_REPLICATED"
// as under_replicated.
func label(name string) string { return strings.ToLower(name) }

// volumeCollector exposes a node's container store: its containers by
// state, and each volume's space (one statfs per volume and scrape).
type volumeCollector struct {
	store                                      *container.Store
	containers, used, reserved, capacity, free *prometheus.Desc
}

func newVolumeCollector(store *container.Store, labels prometheus.Labels) *volumeCollector {
	desc := func(name, help string, variable ...string) *prometheus.Desc {
		return prometheus.NewDesc("replicad_volume_"+name, help, variable, labels)
	}
	return &volumeCollector{
		store:      store,
		containers: desc("containers", "Containers on the node's volumes, by state.", "state"),
		used:       desc("used_bytes", "Bytes the containers on the volume take.", "volume"),
		reserved:   desc("reserved_bytes", "Bytes the container imports in flight set aside on the volume.", "volume"),
		capacity:   desc("capacity_bytes", "Size of the volume's filesystem (statfs).", "volume"),
		free:       desc("free_bytes", "Bytes of the volume's filesystem a writer may still use (statfs).", "volume"),
	}
}

// Describe implements prometheus.Collector.
func (c *volumeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.containers, c.used, c.reserved, c.capacity, c.free} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *volumeCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), labels...)
	}
	byState := make(map[container.State]int64, len(container.States))
	for _, d := range c.store.List() {
		byState[d.State]++
	}
	for _, st := range container.States {
		gauge(c.containers, byState[st], label(string(st)))
	}
	for _, v := range c.store.Volumes() {
		gauge(c.used, v.Used, v.Path)
		gauge(c.reserved, v.Reserved, v.Path)
		gauge(c.capacity, v.Capacity, v.Path)
		gauge(c.free, v.Free, v.Path)
	}
}

// clusterCollector exposes what the coordinator this node runs knows of
// the cluster, while it leads; a coordinator standing by (etcd) reports
// replicad_cluster_leader 0 and nothing else.
type clusterCollector struct {
	svc                                           *coord.Service
	leader, nodes, containers, waiting, pending   *prometheus.Desc
	issued, dropped, lastCycle, lastCycleDuration *prometheus.Desc
}

func newClusterCollector(svc *coord.Service, labels prometheus.Labels) *clusterCollector {
	desc := func(name, help string, variable ...string) *prometheus.Desc {
		return prometheus.NewDesc("replicad_cluster_"+name, help, variable, labels)
	}
	return &clusterCollector{
		svc:               svc,
		leader:            desc("leader", "1 while this coordinator leads, 0 while it stands by."),
		nodes:             desc("nodes", "Nodes the coordinator knows, by health and operational state.", "health", "op_state"),
		containers:        desc("containers", "Containers by the replication manager's class, as of its last cycle.", "class"),
		waiting:           desc("containers_waiting", "Containers that needed work and got no command in the last cycle."),
		pending:           desc("pending_commands", "Commands sent or to send that no node has reported done."),
		issued:            desc("commands_total", "Commands the replication manager issued, by type.", "type"),
		dropped:           desc("commands_dropped_total", "Commands dropped unfinished, by type and reason.", "type", "reason"),
		lastCycle:         desc("last_cycle_timestamp_seconds", "When the last replication manager cycle started (Unix time; 0: none yet)."),
		lastCycleDuration: desc("last_cycle_duration_seconds", "How long the last replication manager cycle took."),
	}
}

// Describe implements prometheus.Collector.
func (c *clusterCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.leader, c.nodes, c.containers, c.waiting, c.pending, c.issued, c.dropped, c.lastCycle, c.lastCycleDuration} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *clusterCollector) Collect(ch chan<- prometheus.Metric) {
	metric := func(d *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, t, v, labels...)
	}
	co := c.svc.Coordinator()
	if co == nil {
		metric(c.leader, prometheus.GaugeValue, 0)
		return
	}
	metric(c.leader, prometheus.GaugeValue, 1)
	st := co.Status()
	for h := cluster.Healthy; h <= cluster.Dead; h++ {
		for o := cluster.InService; o <= cluster.InMaintenance; o++ {
			n := st.NodeStates[coord.NodeState{Health: h, OpState: o}]
			metric(c.nodes, prometheus.GaugeValue, float64(n), label(h.String()), label(o.String()))
		}
	}
	for cl := cluster.Replicated; cl <= cluster.Unmanaged; cl++ {
		metric(c.containers, prometheus.GaugeValue, float64(st.Decision.Count(cl)), label(cl.String()))
	}
	metric(c.waiting, prometheus.GaugeValue, float64(st.Decision.Waiting))
	metric(c.pending, prometheus.GaugeValue, float64(st.Pending))
	for k := cluster.Replicate; k <= cluster.Reconstruct; k++ {
		metric(c.issued, prometheus.CounterValue, float64(st.Issued[k]), k.String())
		for _, why := range coord.Whys {
			metric(c.dropped, prometheus.CounterValue, float64(st.Dropped[coord.Drop{Kind: k, Why: why}]), k.String(), why.String())
		}
	}
	last := 0.0
	if !st.LastCycle.IsZero() {
		last = float64(st.LastCycle.UnixNano()) / 1e9
	}
	metric(c.lastCycle, prometheus.GaugeValue, last)
	metric(c.lastCycleDuration, prometheus.GaugeValue, st.LastCycleDuration.Seconds())
}
