// Package cluster is the replication manager's core, after Apache Ozone's
// SCM ReplicationManager: a pure function from what the coordinator knows
// of the cluster (State: nodes, containers, the replicas nodes report,
// the commands in flight) to what it should do (Decision: commands and
// node transitions). No clock, no I/O, no goroutine: Config.Now is the
// time, and the same State and Config always give the same Decision, its
// commands sorted (Priority, highest first, then container, kind, node).
// Membership, heartbeats, the coordinator's loop and its store are built
// on top by others.
//
// # Counting
//
// A replica is good when its state is CLOSED and its checksum is the
// container's recorded one (Container.Checksum) or, with none recorded,
// the one most CLOSED replicas agree on (a tie: Unrecoverable, left for
// an operator). Where its node stands decides what a good replica is:
//
//   - HEALTHY IN_SERVICE: a copy. It counts toward the replication N, is a
//     source, and may be deleted when there are too many.
//   - DECOMMISSIONING (healthy): a source, not a copy; the container needs
//     N copies elsewhere.
//   - ENTERING_MAINTENANCE, IN_MAINTENANCE, whatever the node's health: a
//     copy that will come back. While a container has copies in
//     maintenance it needs max(N-copies in maintenance,
//     min(N, 1+MaintenanceRemainingRedundancy)) copies in service. Healthy
//     ENTERING_MAINTENANCE nodes are sources; IN_MAINTENANCE ones may go
//     offline at any time and are not.
//   - STALE: unknown. It counts toward N (no new copy because a node is
//     late), but is neither source nor target, and while a container has a
//     stale copy none of its extras is deleted.
//   - DEAD: lost. DECOMMISSIONED (healthy): a source of last resort only.
//
// A replica CLOSING or RECOVERING on a node in service, and a pending
// Replicate to a node in service, count as copies coming: toward N, not
// as sources, never deleted. A pending Delete takes its replica out of
// every count. A pending command past its Deadline is taken as failed and
// listed in Decision.Expired. UNHEALTHY replicas and CLOSED ones with the
// wrong checksum are bad: never sources, not copies, deleted once the
// container has all the copies in service it needs.
//
// # Classes
//
// Classify (and Decide, for every container) puts a container in one
// class, checked in this order:
//
//   - UNMANAGED: EC, or not CLOSED in the coordinator's record. Left
//     alone and listed; a node holding one of its replicas is not declared
//     DECOMMISSIONED or IN_MAINTENANCE.
//   - UNRECOVERABLE: no good copy anywhere, none coming; listed, never
//     "repaired" (bad replicas are kept).
//   - UNDER_REPLICATED: copies in service + stale + coming < needed.
//   - MIS_REPLICATED: enough copies, spanning fewer racks than
//     min(N, racks they could use: theirs and those with a healthy
//     in-service node).
//   - OVER_REPLICATED: more than N copies in service and none stale, or
//     bad replicas with enough copies in service.
//   - HEALTHY (Replicated) otherwise.
//
// Redundancy is how many good copies online could be lost with one left;
// Decide works on the fewest first, and a command's Priority is how many
// copies the container is short of N (peer.Task.Priority: higher first).
//
// # Commands
//
// Replicate{Container, Sources, Target, Mode, Priority, Deadline} copies a
// container to Target: in push mode (Config.Push) Sources[0] sends it, in
// pull mode Target fetches it from Sources in order. Targets are healthy
// in-service nodes that hold no replica of the container and have room
// for the import (twice the container, as peer reserves): on a rack the
// copies do not use first, then the most free space, the least load, the
// lowest id. An under-replicated container with a copy to spare waits for
// a node on an unused rack if one could take it later, rather than copy
// twice; its last copy goes anywhere now. A mis-replicated one gets copies
// only on racks not used; the old rack's extra goes in a later cycle, as
// over-replication, once the copy exists. Sources are chosen by most
// spare capacity, in-service nodes first on ties. A node takes at most
// Config.NodeLimit replicates as source or target (twice that as a
// decommissioning source), counting what it reports (Node.InFlight) or
// the pending commands on it, whichever is more.
//
// Delete{Container, Target} removes a replica: bad ones first, then copies
// beyond N from the rack holding the most, the fullest node first; never
// the last copy of a rack when that would leave fewer racks than the
// container should span, never a copy while one is stale. Deletes are
// not limited.
//
// # Transitions
//
//   - DECOMMISSIONING → DECOMMISSIONED: the node is healthy and every
//     container with a good copy on it has the copies in service it needs
//     without it.
//   - ENTERING_MAINTENANCE → IN_MAINTENANCE: every container with a good
//     copy on the node has the copies in service the maintenance rule
//     asks for.
//   - ENTERING_MAINTENANCE or IN_MAINTENANCE → IN_SERVICE: Now has reached
//     Node.MaintenanceEnd; extras are deleted in the cycles after.
//
// # Scale
//
// Nodes are small integers inside a cycle; a replica is 40 bytes and a
// container 40. Decide is fastest with Containers and Replicas sorted by
// container id (it sorts a copy otherwise). Package sim applies decisions
// to a State and generates large ones; bench/cmd/rmbench times a cycle at
// millions of containers.
package cluster
