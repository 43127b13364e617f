// Package journal is cmfs's event log: the durable, ordered, checksummed
// record of every change made through a mount, from which replicas are
// built.
//
// # Contract
//
// Events get dense, strictly increasing ids starting at 1. Append returns
// only after its events are durable (unless Options.NoSync, or under
// SyncInterval, below), so an operation that journals before it
// acknowledges its caller never acknowledges a change the log could lose.
// Readers (Last, Range, Get, Wait) see an event only once it is durable.
//
// # The commit path
//
// Appends from many goroutines are group-committed without a writer
// goroutine: the first caller to find no commit under way leads, takes
// every queued request (up to Options.MaxBatch events), writes them as
// one group to the write-ahead file (WAL, wal.go) and makes them durable
// with one data-only fdatasync of it; each request's flush (AppendFlush:
// what its events name, from the caller) runs at the same time, in the
// same group, so one wait covers the event and its content. It then
// answers the group and hands the lead to the first request queued
// meanwhile. A lone caller commits in its own goroutine. While more
// Append calls are under way than the group holds (callers just
// acknowledged, about to queue again), the leader lingers up to 200µs for
// them, so that a steady crowd shares one flush instead of splitting into
// halves that alternate (SyncAlways only: under SyncInterval a commit
// flushes nothing, and there is nothing to share). If a request's flush fails, the group is taken
// back (its record zeroed and synced) and written again without it: that
// request fails with no ids assigned, the others commit.
//
// bbolt is written behind the WAL by the applier goroutine, many groups
// per transaction (apply.go; under SyncAlways it lets groups gather for
// applyGather first); until then readers find the events in
// memory. The WAL's two preallocated segments are used in turn, a segment
// again only once bbolt holds everything in it. A writable Open replays
// into bbolt what the WAL holds beyond bbolt's newest event and empties
// the WAL; a torn or damaged last record is cut back, damage followed by
// good records of later events is refused (ErrCorrupt). Events whose
// group's flush was never confirmed — after a power loss their named
// content may not have reached the disk — go to Options.CheckTail first,
// which may drop a suffix of them (no reader ever saw them). A commit
// whose outcome is unknown (the WAL's sync failed) fails every later
// Append (reopen to recover). Times that Append assigns are UTC, one per
// group.
//
// # Durability modes
//
// Options.Sync chooses, as databases let one choose how a commit waits:
//
//   - SyncAlways (the default): Append returns once the WAL's fdatasync
//     and the request's flush have returned.
//   - SyncInterval: Append returns once its group is written to the WAL
//     (a kill -9 loses nothing: the page cache keeps it); a background
//     flush syncs the WAL and runs the flushes (or Options.FlushAll, one
//     syncfs per interval) within Options.Interval of the first write, and
//     only then are the events shown to readers. A power loss may take
//     back the events of the last interval, never older ones. A failed
//     background flush fails every later Append: an acknowledged change
//     may not be durable, and the caller must hear of it.
//
// SyncStats reports the mode, groups, flushes and the flush latency;
// FlushLatency the whole histogram of the flushes, for metrics.
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
// The WAL's layout is in wal.go; it lives beside the database, at its path
// with "-wal" appended. The database is a bbolt file. Bucket "events" maps the event id, 8 bytes
// big-endian, to a record: the xxh64 of the payload, 8 bytes big-endian,
// followed by the payload, the event as JSON (the same object
// `cmfs events --json` prints). Bucket "meta" holds "version" = "2"
// (version 1 spelled the checksum of a file longer than
// checksum.BlockSize as the xxh64 of its whole content, version 2 as the
// block checksum package checksum defines; a journal of version 1 is
// refused).
// Verify checks every record against all of this.
package journal
