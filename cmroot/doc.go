// Package cmroot is cmfs's preservation store: the place where a file that
// would be deleted or overwritten through a protected mount is kept instead
// of being destroyed, as Hive's change management does with its CM root.
//
// Contract:
//
//   - Content-addressed. An entry is named "<checksum>-<size>" (Name): the
//     content's checksum as package checksum defines and spells it (16
//     lowercase hex digits; `xxhsum -H64` prints it for content up to
//     256 KiB) and the size in decimal. The same content preserved twice is stored once; the second
//     preservation only refreshes the entry's retention.
//   - O(1) on the same filesystem. Preserve renames (move) or hard-links
//     (keep) the original into the store, so the entry is the original
//     inode. On another filesystem it copies, fsyncs and verifies the copy
//     against the caller's checksum before anything is removed.
//   - Copies clone first. Every copy the store makes (Preserve where no
//     rename or link can be had, PreserveCopy and PreserveCopyOf before a
//     change in place, Restore) first asks for a clone (FICLONE): on a
//     filesystem with reflinks (XFS, btrfs) the new file shares the
//     original's extents, the whole file at once, O(1) in its size, and a
//     later write to either un-shares only the blocks it touches, so the
//     entry keeps the bytes it was made with. Where the kernel refuses
//     (another filesystem, no reflinks, a file it will not clone) the
//     bytes are copied as before; a filesystem without reflinks
//     (EOPNOTSUPP, ENOTTY) is remembered and not asked again. A clone is
//     verified exactly as a copy: PreserveCopy, Preserve and Restore hash
//     the clone's own bytes, read back from it, so an entry is named by
//     what it holds even when a writer changed the original meanwhile,
//     and a checksum the caller gave that does not match fails with
//     ErrChecksum; PreserveCopyOf trusts its caller's checksum for a clone
//     as for a copy. A clone is as durable as a copy: fsynced before its
//     rename (on XFS the fsync, or protect's fdatasync of the entry, forces
//     the log that holds the clone's extent map and reference counts).
//   - A copy leaves the original's page cache as it found it (package
//     pagecache): the pages the copy read in are dropped after it.
//   - Counted by method. PreserveStats says how many originals, and how
//     many bytes, were kept since Open by each Method: moved, linked,
//     copied, cloned, or deduplicated onto an entry already there (the
//     mount's metrics export them).
//   - Retention lives in the store's own index only. Entry files are never
//     chmod'ed, chown'ed or utimes'ed: a preserved file keeps the times and
//     mode it had, so a program that still holds it open sees nothing change.
//     Retention counts from Entry.Refreshed; GC never removes an entry
//     younger than the retention.
//   - Fails closed. If an original cannot be preserved (ENOSPC, EIO, …) the
//     error wraps the errno (errors.Is works), the original is untouched, and
//     no partial entry or temp file is left behind.
//   - Crash safety. The directory is the truth; the index (bbolt, on the
//     hot path of every delete, so written behind in batches and without
//     fsync) is a cache of facts derivable from it. Close writes a durable "clean"
//     marker that Open consumes; after a crash (kill -9, power loss) Open
//     rebuilds the index from the directory, keeping the retention times of
//     records that survived and giving new-found entries their ctime (the
//     time of the rename that preserved them), drops records whose file is
//     gone and removes stale temp files. A corrupt index is rebuilt the same
//     way. A full file system does not stop the index: when there is no
//     room to rebuild it, to consume the marker, or for a commit to grow
//     the file, the index moves to an anonymous memory file (a memfd that
//     bbolt maps like any file) with what it held, and Close writes it back,
//     clean, if there is room by then (else the next Open rebuilds). While
//     it is in memory the file on disk has no clean marker, or is gone.
//     Preserved data itself is never lost: a moved original is in the
//     store or still at its path, never neither; a copy becomes visible only
//     after it is complete (and fsynced unless Options.NoSync).
//     A rename or link into the store is not fsynced separately: it is as
//     durable as the source filesystem's metadata, which the caller's own
//     fsync (cmfs's journal commit, on ext4 or xfs) makes durable too.
//
// Layout of the store directory:
//
//	<dir>/00 … <dir>/ff     entries, fanned out by their first two hex digits
//	<dir>/.index.db         the index (bbolt)
//	<dir>/.lock             held (flock) by the one process that has the store open
//	<dir>/.tmp/             copies in progress; emptied by Open
//	<dir>/.corrupt/         entries Fsck found corrupt, moved aside, never deleted
//
// A Store is safe for concurrent use by multiple goroutines. One process at
// a time may open a store directory; a second Open fails with ErrInUse.
package cmroot
