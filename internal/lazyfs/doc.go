// Package lazyfs is a power-loss simulator for the test suite, after
// LazyFS ("When Amnesia Strikes", VLDB 2024): a loopback FUSE filesystem
// over a directory that keeps every byte written to a regular file in
// memory until that file is fsynced, and forgets all of it at Crash.
//
// The contract:
//
//   - Writes, truncates and extends of a regular file go to a per-inode
//     overlay (dirty pages and the file's logical size) and reach the
//     underlying file only at fsync(2) or fdatasync(2) of that file,
//     through any of its descriptors. Reads, stat and mmap see the merge of
//     the underlying file and the overlay, so before a crash the mount
//     behaves like any filesystem.
//   - Metadata passes through to the underlying directory at once and
//     survives a crash, as in LazyFS's default: create, mkdir, unlink,
//     rename, link, symlink, chmod, chown, utimes, xattrs. A file created
//     and written without fsync comes back empty; an append without fsync
//     comes back at the last synced size; a renamed file keeps its name.
//     Timestamps of a write pass through too (mtime and ctime change when
//     the write is taken, as on a real filesystem).
//   - Crash simulates a power failure: it drops every overlay, detaches the
//     mount (lazily if something still holds it) and mounts the directory
//     afresh at the same mountpoint, so readers see only durable bytes and
//     no page cache of the old mount. The processes that used the mount
//     are meant to be dead already (kill -9 first); should one survive,
//     its writes to the old mount fail with EIO.
//   - Unmount is a clean shutdown: it writes every overlay back first, as
//     the kernel flushes dirty pages at umount.
//
// What it does not model: syncfs(2) and sync(1) make nothing durable here,
// because the kernel sends FUSE_SYNCFS only to virtiofs servers, so go-fuse
// never hears of them (a real filesystem would flush everything);
// fsync of a directory is passed through and needed for nothing, since
// metadata is never lost; torn or reordered writes within a file (a
// synced file is written back whole); loss of metadata; lost or failing
// fsyncs; fallocate and copy_file_range (refused with EOPNOTSUPP, so
// callers fall back to plain writes). Overlays are kept by inode, and an
// inode number the underlying filesystem reuses for a new file starts
// clean. New files belong to lazyfs's user, not the caller. It runs as root: a write-only descriptor's overlay reopens the
// file read-write through /proc/self/fd.
//
// The mount disables FUSE passthrough (which it could not use: it must see
// every write), so that a FUSE filesystem stacked on it, such as cmfs, can
// hand its files to the kernel with passthrough: the kernel refuses a
// backing file on a filesystem whose own stacking depth has already
// reached the upper one's limit (ELOOP), and go-fuse then quietly serves
// every read and write itself.
//
// The kernel keeps its page cache for the mount (no direct I/O, so mmap
// works, as bbolt needs), with zero attribute and entry timeouts, and
// writes are write-through (no writeback cache): every write reaches the
// overlay before write(2) returns.
package lazyfs
