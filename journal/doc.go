// Package journal is cmfs's event log: the durable, ordered, checksummed
// record of every change made through a mount, from which replicas are
// built.
//
// # Contract
//
// Events get dense, strictly increasing ids starting at 1. Append returns
// only after its events are durable (the commit is fsynced, unless
// Options.NoSync), so an operation that journals before it acknowledges
// its caller never acknowledges a change the log could lose. Appends from
// many goroutines are group-committed: one writer goroutine takes every
// pending request (up to Options.MaxBatch events), writes them in one
// bbolt transaction and acknowledges all of them after that single commit,
// so concurrent callers share fsyncs. While more Append calls are under
// way than the batch holds (callers just acknowledged, about to queue
// again), the writer lingers up to 200µs for them, so that a steady crowd
// of writers shares one commit instead of splitting into halves that
// alternate. A failed commit assigns no ids; a commit whose outcome bbolt
// leaves unknown fails every later Append (reopen to recover). Times that
// Append assigns are UTC, one per commit.
//
// Append rejects events that Verify would reject (empty type or path, a
// malformed checksum, a negative size) and names that are not valid UTF-8,
// which the JSON encoding could not store losslessly; it fails with
// ErrInvalid rather than journal something a replica would get wrong.
//
// # A full file system
//
// A commit must never be the first to learn that the file system is full:
// the change it records has already happened. A writable Log keeps a
// reserve (Options.Reserve, DefaultReserve 4 MiB) allocated beyond bbolt's
// high-water mark with fallocate(FALLOC_FL_KEEP_SIZE): bbolt grows its file
// by truncate and allocates pages only when a commit writes them, so the
// pages a commit adds are already there, and the file's size and content
// are what bbolt wrote. After a commit that moved the high-water mark the
// reserve is refilled (one fallocate per quarter reserve of growth). When
// a refill fails the reserve is short, and Admit fails with ErrNoSpace
// (wrapping ENOSPC) until a refill succeeds: callers refuse new changes
// before making them, while the changes already admitted commit into what
// is left. A batch that would still not fit fails before bbolt writes
// anything (ErrNoSpace, no ids assigned), never half way. Cost: an atomic
// load per Admit, a read transaction per commit. On a file system without
// fallocate there is no reserve and Admit always admits. On ext4 writing
// into preallocated (unwritten) extents may need a metadata block, which
// ext4's own reserved clusters cover.
//
// # One writer
//
// A writer holds an exclusive lock on the file (flock, through bbolt) for
// as long as it is open: a live mount. Open fails with ErrLocked when the
// lock is not free within Options.LockTimeout. A read-only Log takes a
// shared lock only for the duration of each call (Open, Last, Range, Get,
// Verify, each poll of Wait) and releases it in between, so that a reader
// left running never keeps a mount from starting, and every call sees the
// commits made before it. While a writer holds the file, read-only calls
// fail with ErrLocked (Last returns the last id it saw): readers that
// follow a live mount go through its control socket instead.
//
// # On-disk encoding
//
// The file is a bbolt database. Bucket "events" maps the event id, 8 bytes
// big-endian, to a record: the xxh64 of the payload, 8 bytes big-endian,
// followed by the payload, the event as JSON (the same object
// `cmfs events --json` prints). Bucket "meta" holds "version" = "1".
// Verify checks every record against all of this.
package journal
