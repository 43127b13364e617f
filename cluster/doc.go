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
//   - UNMANAGED: not CLOSED in the coordinator's record (or no usable
//     replication config). Left alone and listed; a node holding one of
//     its replicas is not declared DECOMMISSIONED or IN_MAINTENANCE.
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
// # EC containers
//
// An ec:rs-D-P container is counted index by index, with the same rules
// of goodness (CLOSED, the container's checksum: every index and the
// whole copy carry the whole container's) and of where nodes stand. A
// replica with Index 0 is the whole copy, written before encoding; 1…D
// are data indexes, D+1…D+P parity. A good copy of index i is, by its
// node: in service (a copy, a source, deletable), stale (counts, neither
// source nor deletable, and keeps i's extras), decommissioning or
// decommissioned (a source, not a copy in service), in maintenance (a
// copy that comes back; healthy ENTERING_MAINTENANCE ones are sources);
// coming: a CLOSING or RECOVERING replica of i on a node in service, or
// a pending Replicate, Encode or Reconstruct whose Gains put i there.
// Online is any of those but coming. A good replica, a good index and
// indexes are "distinct" by index: two copies of one index are one.
//
// Classes, in this order after UNMANAGED:
//
//   - UNRECOVERABLE: replica checksums in dispute; or no whole copy
//     online, fewer than D distinct indexes online and none coming — the
//     reason says "k of D+P indexes left". Never acted on.
//   - UNDER_REPLICATED: an index is missing (no good copy online, none
//     coming; this includes a whole copy not encoded yet); or an index has
//     good copies only on decommissioning nodes and none in service, stale
//     or coming; or, while good copies are in maintenance, fewer than
//     min(D+P, D+MaintenanceRemainingRedundancy) distinct indexes are in
//     service, stale or coming.
//   - MIS_REPLICATED: a rack holds more than the cap: ⌈(D+P) / min(D+P,
//     usable racks)⌉ indexes, raised as far as needed when some racks
//     have too few healthy in-service nodes for every index to have a
//     node of its own within it (a small rack's node down must not ask
//     for a placement no one could make); counting one copy per index: its only copy in
//     service or coming, or of several the one on the rack holding the
//     fewest so far (in service before coming, then the node with the
//     most free space).
//   - OVER_REPLICATED: an index has a copy in service besides the one
//     counted for the racks and none stale; a bad replica (UNHEALTHY, the
//     wrong checksum) of an index with a good copy in service; a replica
//     whose index is beyond D+P; or every index 1…D+P has a good copy in
//     service and a whole copy is left.
//   - HEALTHY otherwise.
//
// Redundancy is how many indexes online beyond D could be lost (with a
// whole copy online, at least 0); a command's Priority is P less that,
// the redundancy lost. Unrecoverable and unmanaged containers have none.
//
// Commands, one class's per cycle, like Ratis ones:
//
//   - Encode{Sources: [the whole copy's node], Indexes: the missing ones,
//     Targets: a node each} while a whole copy is on a healthy node that
//     can be a source (in service, then decommissioning, then entering
//     maintenance): one command, and only once every missing index has a
//     target. Targets are healthy in-service nodes holding nothing of the
//     container, under their limit, with room for twice the largest index
//     (⌈stripes⌉ cells, about Bytes/D); on the rack holding the fewest
//     indexes first (counting those there and those chosen in this
//     cycle), then the most free space, the least load, the lowest id.
//   - Reconstruct, when indexes are missing and no whole copy can encode:
//     Sources are one node for every other index with a good copy on a
//     healthy node under its limit (in service first, then
//     decommissioning, then entering maintenance), SourceIndexes what
//     each holds, D at least or nothing is sent; listed in service
//     first, by index. Push mode: one command for the missing indexes a
//     target is found for, run by Sources[0]; pull mode: one command per
//     index, run by its target. Every source is charged to its limit, for
//     every command.
//   - Replicate{Index: i, Sources, Target}: i held only by decommissioning
//     (or decommissioned) nodes, one to one; then, while good copies are
//     in maintenance and the rule above is short, the fewest indexes held
//     only in maintenance, lowest first, from healthy ENTERING_MAINTENANCE
//     holders (an IN_MAINTENANCE node may be gone any time: not a source).
//     Mis-replication moves the indexes counted on a rack over the cap,
//     lowest first, to the rack holding the fewest that stays under it;
//     the old copy becomes an extra, deleted later.
//   - Delete{Index: i, Target}: replicas beyond D+P; bad replicas of
//     indexes with a good copy in service; the copies in service of an
//     index besides the one counted for the racks (so the one on the
//     rack holding the most, or the fuller node, goes; never the last)
//     while none is stale; the whole copy (Index 0, good or bad, on a
//     node in service or decommissioning) once every index has a good
//     copy in service. A source of a pending command is not deleted.
//
// A decommissioning node stays DECOMMISSIONING while an index it holds
// has no good copy in service elsewhere (its whole copy: until every
// index has one); an ENTERING_MAINTENANCE node stays while the
// maintenance rule is short of indexes in service and its index has no
// copy in service elsewhere.
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
// container 40. EC containers are counted in per-index lists reused from
// container to container, so Ratis ones pay nothing for them. Decide is fastest with Containers and Replicas sorted by
// container id (it sorts a copy otherwise). Package sim applies decisions
// to a State and generates large ones; bench/cmd/rmbench times a cycle at
// millions of containers.
package cluster
