// Package store keeps what a coordinator knows of its cluster, durably:
// the nodes (with the operational state the operator set and the
// maintenance end), the containers and the replicas as nodes last
// reported them, and the commands sent and not yet done. A coordinator
// killed and started again loads it (Load) and resumes: its pending
// commands are handed out again, and those past their deadline retried.
//
// Store is the interface the coordinator uses; Bolt keeps it in one bbolt
// file (`serve --cluster-store`, default VOLUME1/cluster.db). Each call is
// one transaction, durable when it returns. Health is not stored: it is
// the coordinator's own reading of heartbeats, and starts HEALTHY for
// every node after a restart.
package store
