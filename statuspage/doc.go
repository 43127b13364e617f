// Package statuspage is the live status page of `replicad serve --http`:
// a small page (plain HTML, CSS and a little JavaScript, embedded in the
// binary) and the JSON it polls, /status.json, which is useful on its own
// (docs/metrics.md lists its fields).
//
// A Page is built from the parts a node has; a part the Config leaves nil
// is left out of the snapshot, and the page hides its section:
//
//   - the warehouse (serve --state): the journal's newest events, the
//     replication slots (each destination's position and lag in events,
//     what it pins), and serve --ingest's progress;
//   - the node (serve --volume): its volumes, its containers by state, and
//     its replication queue (peer.Supervisor.Jobs);
//   - the cluster (--coordinator or --join): the coordinator's nodes and
//     containers, classified as the replication manager does (HEALTHY,
//     UNDER_REPLICATED, MIS_REPLICATED, OVER_REPLICATED, UNRECOVERABLE,
//     UNMANAGED), and its last cycle.
//
// Contract:
//
//   - Read-only: nothing a request does changes the node's state.
//   - A part that fails to answer (the journal locked, the coordinator
//     away or standing by) is reported in that part's "error" field; the
//     other parts are still shown.
//   - Snapshots are built at most once a second (MinInterval) whatever the
//     number of viewers, and what a slot pins, which scans the events after
//     the oldest slot, at most every SlotsInterval; lists are capped
//     (MaxEvents, MaxList) and say how many they left out.
//   - The page never interprets what the node reports as markup: every
//     name and path is set as text.
//
// The page is not authenticated, like /metrics beside it: it shows the
// paths of the warehouse's newest events, so bind --http to an address
// only those who may see them can reach.
package statuspage
