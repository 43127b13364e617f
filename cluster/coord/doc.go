// Package coord runs a replicad cluster around cluster.Decide: the
// Coordinator service (api/cluster.proto) that `replicad serve
// --coordinator` registers on the node's gRPC server, and the Agent every
// node runs to heartbeat to it.
//
// # Coordinator
//
// The coordinator keeps the cluster in memory and writes every change
// through to a store.Store before it answers, so a coordinator killed
// and started again resumes from the store: nodes, their operational
// states, the replicas last reported, and the commands pending (handed
// out again once; those past their deadline retried by the next cycle).
//
// Health is the coordinator's own reading of heartbeats: a node is
// HEALTHY while one arrived within StaleAfter, STALE until DeadAfter,
// DEAD after. A node the store knows starts HEALTHY after a restart: its
// heartbeats had no chance to arrive.
//
// Every RMInterval a cycle (Cycle, which tests call directly) takes the
// commands whose effect a node has reported as done (the replica appears
// on the target; the deleted one is gone) and drops those of a DEAD
// node, builds a cluster.State,
// calls cluster.Decide, applies its transitions, drops the expired and
// failed commands (Decide issues them again if still needed) and records
// the new ones as pending, for their node's next heartbeat. A replicate
// goes to its first source (in pull mode too: the source asks the
// target to download it, peer's pull); a delete to the node holding the
// replica. Status counts, for metrics, the commands issued by kind and
// those dropped unfinished by why (Failed, Expired, NodeDead), from the
// coordinator's start: a new leader counts from 0.
//
// # Agent
//
// A node's Agent heartbeats every Interval: its address, rack, volumes,
// the replications it runs, and its containers — all of them at start,
// every FullEvery beats and when the coordinator asks, otherwise only
// what changed since the last report the coordinator accepted — and the
// results of the commands it finished. It submits a replicate to the
// node's Supervisor (deduplicated there by container and target) and
// runs a delete on its container store. A coordinator that does not
// answer is left for the next address in the list.
package coord
