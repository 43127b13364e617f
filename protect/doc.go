// Package protect is cmfs's protection core: given an operation on paths
// relative to a backing directory, it decides what must be kept, keeps it
// in cmroot, makes the change, flushes what the change's event names,
// journals the event and, where a step fails, undoes what the earlier
// steps did. Every call it makes on the tree is relative to the backing
// directory's descriptor (internal/at, Core.Tree): no backing path is
// ever longer than the caller's. It knows nothing of FUSE: package fusefs adapts go-fuse's calls
// to it, and tests call it directly, crashing it between any two steps
// (failpoints.go) to check that recovery keeps the guarantees:
//
//   - I1 no acknowledged event is lost;
//   - I2 no preserved original is lost: its bytes and its cmroot entry are
//     durable before the event naming it commits (flush.go);
//   - I3 the journal's latest event naming a path describes what the tree
//     holds there, after any crash and recovery;
//   - I4 an operation that reports an error changed nothing unjournaled.
//
// Every change records its intent in the in-flight table before it
// starts and clears it once its event is durable (inflight.go); Open
// journals, from the tree as it is, the changes a process that died left
// without their events. InFlight says how many intents the table holds
// (the mount's metrics export it).
//
// A power loss takes back more than a dead process does. The journal's
// write-ahead file may hold events whose group flush never finished, and
// what they name may not have reached the disk: TailCheck, which the
// journal calls as it opens after a reboot, keeps the longest prefix of
// whole groups the disk bears out — cmroot entries hashed, last words
// found in the tree or in cmroot — and drops the rest (tail.go). And since the in-flight table
// is not fsynced, a change can be durable with neither event nor intent:
// after a mount that did not stop cleanly and a reboot (the mount record,
// statedir.Record.LostWrites), or a tail check that dropped events, Open
// walks the tree against the journal's last words and journals what
// differs (reconcile.go), hashing only files at another size or with a
// ctime near the newest surviving event. Recovery says what both found.
//
// The protection table:
//
//   - unlink moves the file into cmroot (rename, O(1)); a file that is still
//     open for writing, or has other hard links, is copied instead: a
//     cmroot entry is never an inode the tree can still change.
//   - rename over an existing file hard-links the old target into cmroot
//     (copies it, as above, when it could still change), then renames: the
//     replacement stays atomic. A rename out of the protected tree into
//     scratch space copies every file it takes along.
//   - open with O_TRUNC of a non-empty file hard-links the original into
//     cmroot and swaps a new empty inode into place (O(1)); when the node
//     has other open handles or other hard links, the original is copied
//     and truncated in place instead, so every link and descriptor sees
//     native semantics.
//   - truncate(2)/ftruncate(2) and opening a non-empty file for writing
//     without O_TRUNC copy the original before any write can land: at open,
//     because with FUSE passthrough writes never reach this process.
//   - flush (close) after writes checksums the new content and journals it
//     before close() returns, unless it is what the file's last event
//     said; a handle released unchanged drops the copy taken at open
//     (cmroot.DropUnused: unless a later preservation shares it). Where
//     that copy is a clone (XFS, btrfs) and the original's block sums are
//     cached, only the blocks no longer sharing the clone's extents are
//     read (rehash.go).
//   - fsync of a write handle journals nothing: the close journals the
//     content. It makes the content durable (the backing file's fsync)
//     and, the first time for the handle, the handle's intent in the
//     in-flight table, so that after a power loss that kept the content
//     the next mount's recovery journals it (I3). One extra flush per
//     handle, none per fsync. The content is checksummed while the fsync
//     runs only for as long as the fsync lasts, so that write, fsync,
//     close finds the checksum made; a handle whose checksum at fsync was
//     cut short by its fsync's end, or outdated by writes before the next
//     fsync, stops checksumming at fsync and checksums at its close only:
//     random writes with an fsync every few cost no read of the file.
//   - rmdir of a database, table or partition is one structural event;
//     rm -r yields one DELETE per file first.
//
// A change to the content of a file with several hard links (write,
// truncate, O_TRUNC) is journaled under every name the file has in the
// protected tree, one event per table partition the names lie in, all in
// one commit. go-fuse knows one path per node, and only names looked up
// during this mount, so the names come from a link index (links.go):
// inode → tree names of every multiply-linked file, built by one walk of
// the backing tree (state directory and scratch space left out) the first
// time such a file changes, kept current by link, unlink and rename
// through the mount, checked at each use (every name must still hold the
// inode, and the names must number the file's tree links) and walked again
// when stale. A file with one link never reaches it: the cost is one
// comparison of st_nlink. Links in scratch space or outside the backing
// directory are not names; the walk that finds fewer names than links
// remembers so, and walks again only when the link count changes.
//
// A checksum, like cmroot's copy of an original, leaves the file's page
// cache as it found it (package pagecache): reading a whole file must not
// leave it cached, in readahead's large folios, for the small writes
// that follow an in-place open to land in.
//
// Every event is durable before the operation returns. If an original
// cannot be preserved the operation fails with that error and the original
// stays where it was (fail closed).
//
// Fail closed, all the way (I4): an operation that reports an error has
// changed nothing that is not journaled. Every protected change is first
// admitted (intend): the journal's reserve must hold (journal.Admit;
// a full file system refuses the change with ENOSPC before anything
// changes) and its intent must fit in the in-flight table, whose slots'
// heads are preallocated. Should the event still fail to commit, or the
// checksum of the result not be had, the change is undone exactly: a
// rename goes back, and what it replaced comes back from a second link
// taken before (the hold in STATE/tmp); an O_TRUNC swap renames the new
// inode over the original, which cmroot's link keeps reachable, and links
// it back (when cmroot's entry of that content is another inode, the swap
// is a RENAME_EXCHANGE that keeps the original under a temporary name
// until the event commits, and exchanges it back); a truncation in place
// is refilled from its cmroot entry; a removed directory is recreated.
// What cannot be undone — the content a write handle wrote, found at
// close — keeps its intent in the in-flight table (keep): close fails,
// and the next event the mount journals, or else the next mount's
// recovery, journals the content as the tree holds it (I3).
//
// Paths matching the exclude globs (engine scratch space) are passed
// through unprotected; a rename out of them into a table journals the
// arriving files as INSERTs. The state directory is invisible through the
// mount.
//
// Known limits: content journaled at an intermediate close of a handle
// that is written again afterwards (through a dup'd descriptor) is not
// preserved, only the content at open and the content at the last close;
// mode, owner, times and xattrs are not journaled; symlinks and special
// files are journaled but not preserved. The in-flight table is flushed at
// a write handle's first fsync only: content a handle still open wrote
// without fsync, and that the kernel's writeback took to the disk anyway,
// may come back after a power loss without the handle's intent, and the
// journal then describes the file as the handle found it.
package protect
