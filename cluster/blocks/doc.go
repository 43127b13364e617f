// Package blocks reads content from a replicad cluster by block id (its
// xxh64 and size): a repl.Fetcher for a load whose source host is down or
// gone, as long as the cluster's nodes hold the blocks that the source's
// `replicad serve --ingest` wrote (`replicad load --cluster COORD`).
//
// The coordinator knows nodes and the containers on them, not the blocks
// inside: a Fetcher asks it for the nodes (Nodes, again once Refresh has
// passed, or when a node list is needed and none is known) and then the
// nodes in turn for the block (Container.Get) — the node that served
// last first, then the HEALTHY ones, then the STALE; DEAD nodes and those
// without an address are not asked — until one has it. A node that does
// not start sending within AskTimeout is left for the next.
//
// Contract:
//
//   - The reader delivers the block's bytes and fails at the end, with an
//     error wrapping repl.ErrChecksum, if they are not the block asked
//     for (peer's Get checks them); that node is not asked for that block
//     again, so the loader's retry goes to another one.
//   - Fetch fails with repl.ErrNoCopy (wrapped, naming the block and the
//     nodes asked) only when every node asked answered that it has no
//     such block; a node that could not be reached makes it another
//     error, since that node may hold it.
//   - A block is found by content alone: f.Path is used in messages only,
//     and f.CM is ignored (a preserved original and new content with the
//     same xxh64 and size are the same block).
//
// A Fetcher keeps one connection per node it asked; Close closes them.
// It is safe for concurrent use.
package blocks
