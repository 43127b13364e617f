// Package ingest feeds a node's containers from a cmfs journal: the files
// that journal events add (their new content) and the originals they
// preserve (cmroot entries) become blocks of the open container, so that
// containers, replicated to peers, carry the warehouse's data
// (`replicad serve --ingest`).
//
// A Feed works the way Litestream replicates: Step synchronously reads
// the events after the last one ingested, puts their files into the store
// and records how far it got; Run is a thin loop around it (woken by the
// journal's Wait when it has one — the mount's follow stream, or the
// journal file's poll when unmounted, see source.Server.Journal — else a
// poll interval; backoff after a failure; cancel). Tests call Step.
//
// Contract:
//
//   - New content is read from the warehouse path while it still holds
//     the checksum the event names, else from cmroot (repl.LocalFetcher,
//     which also follows later renames); a preserved original from
//     cmroot. What is put is checked against the event's size and xxh64.
//   - A content is stored once per node: a block the store already serves
//     (in any container) is not put again.
//   - Content that is nowhere any more (a path cmfs does not protect, an
//     entry gc removed, a corrupt cmroot entry) is skipped and logged
//     (Config.Logger); any other failure ends the Step before the event,
//     which the next Step tries again.
//   - The store closes the open container at its size limit; a Feed closes
//     it after Config.Idle without a Put.
//   - The cursor file (Config.Cursor, JSON, written durably after each
//     Step that moved it) holds the last event ingested and the last one
//     whose blocks are all in closed containers. A new Feed resumes after
//     the second: Put makes a block durable only when its container
//     closes, so the events that fed an open container are read again
//     after a restart, and since the blocks that survived are found held,
//     that replay costs an index lookup per file, not a copy.
//     ReadProgress reads it without a Feed (the status page).
package ingest
