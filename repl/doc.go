// Package repl turns a cmfs journal into dumps and applies dumps at a
// destination warehouse (Hive REPL DUMP / REPL LOAD semantics), so that the
// destination passes through exactly the states the source passed through,
// and data moves once: a dump lists files, it never holds their bytes.
//
// Dump reads events through Events (a local journal.Log, or a relay) and,
// for a BOOTSTRAP, the tree from a Catalog (the tree as of one event, kept
// current from the journal) or by walking a Tree. Load fetches content
// through Fetcher — from the live path while its checksum still matches,
// else from cmroot by checksum — several files at a time, ahead of the
// event being applied; every byte is verified before it becomes visible,
// and content becomes visible event by event, in order. A Follower keeps
// a target loaded from a FollowSource in rounds (Sync: dump from the
// target's last event, load, confirm), driven by Run with backoff; what it
// measures goes to a FollowMetrics the caller implements, and Stalled
// tells a watchdog whether Run's loop is stuck. A target has one
// loader at a time (Lock). Nothing here mounts, listens or dials.
//
// # Dump layout (version 2)
//
//	<dump>/_dumpmetadata   JSON, written first (durably):
//	                       {"kind":"BOOTSTRAP"|"INCREMENTAL","from":N,"to":M,
//	                        "source":"<id>","created":"<RFC 3339, ns>","version":2
//	                        [,"db":"<filter>"][,"table":"<filter>"]}
//	<dump>/_finished_dump  JSON, written last (durably, after a syncfs of the
//	                       dump's filesystem): {"to":M[,"walk_end":K]}.
//	                       A dump without it is incomplete and Load refuses it.
//	<dump>/_progress       INCREMENTAL, while it is written: the last event id
//	                       known durable (a decimal and a newline); a rerun
//	                       resumes after it. Ignored once _finished_dump exists.
//
// INCREMENTAL (from >= 1): one directory per event in [from, to], named by
// its id zero-padded to 20 digits (00000000000000000042), so that names
// sort in id order. Each is written under a ".tmp-" name and renamed, so a
// directory with an event's name is whole:
//
//	<id>/_metadata   the event as encoding/json writes journal.Event (the
//	                 encoding `cmfs events --json` prints), a newline after it
//	<id>/_files      one _files line per file the load must fetch: the
//	                 event's files with new content (CM == ""), in event
//	                 order; preserved originals (CM != "") stay in
//	                 _metadata only, since the replica never needs them
//
// With a db/table filter, events of other databases/tables have no
// directory; the dump still covers [from, to]. A move across the filter's
// edge is written, under its id, as what it is inside the filter (see
// filter.go): a removal (DELETE, DROP_*, RMDIR of the path that left), or
// an arrival — an INSERT/WRITE of a file's content, a SYMLINK, or a
// CREATE_*/MKDIR whose _files list the whole tree that arrived and which
// holds one or two more files:
//
//	<id>/_dirs       every directory of the tree that arrives at the
//	                 event's path, itself included, one escaped path per
//	                 line; the load replaces what the target holds at
//	                 that path with these directories, the _files and
//	                 the _symlinks
//	<id>/_symlinks   the symlinks of that tree, if it has any, as in a
//	                 BOOTSTRAP unit (a loader older than _symlinks in
//	                 event directories leaves them out)
//
// BOOTSTRAP (from = 0): the current tree, pinned to to = the newest event
// id read BEFORE the walk; walk_end in _finished_dump is the newest id
// after it. Every directory of the dump below is a unit, named by the
// source names escaped as in _files lines, a leading '_' escaped as %5F:
//
//	<db>/_metadata                    {"db":"sales"}
//	<db>/<table>/_metadata            {"db":"sales","table":"orders"[,"partitioned":true]}
//	<db>/<table>/<k=v>[/<k=v>…]/_metadata {"db":…,"table":…,"partition":"k1=v1/k2=v2"}
//	<unit>/_dirs                      the directories of the unit, itself
//	                                  included (data subdirectories too), one
//	                                  escaped path per line, so empty tables
//	                                  and partitions replicate
//	<unit>/_files                     the unit's files (CM always empty)
//	<unit>/_symlinks                  the unit's symlinks: one
//	                                  <path>#<target> line each, both
//	                                  escaped as in _files lines
//	_outside/_dirs, _outside/_files,  everything outside the warehouse layout
//	_outside/_symlinks
//
// A database unit holds the <db>.db directory and files directly in it; a
// table unit its table directory and the files and data directories not
// below a partition; a partition unit (every k=v level is one) its
// directory and everything below it that is not a deeper partition. A
// unit's _dirs, _files and _symlinks are always written, possibly empty
// (a dump written before _symlinks existed has none, and no symlinks).
// A BOOTSTRAP carries every kind of entry an INCREMENTAL carries:
// directories, files and symlinks (with their targets, never followed).
//
// # _files lines
//
// One file per line, fields separated by '#', every line ending in '\n':
//
//	<path>#<size>#<xxh64>#<cm>\n
//	sales.db/orders/dt=2024-01-01/part-0#1024#9f86d081884c7d65#
//
// path is relative to the warehouse root, slash-separated and clean (no
// leading '/', no "", "." or ".." component); size is decimal, no sign or
// leading zero; xxh64 is the file's checksum (package checksum: the xxh64
// of its content, or for a file longer than 256 KiB of its blocks'), 16
// lowercase hex digits;
// cm is the cmroot entry name of a preserved original, empty for new
// content (an entry for new content, once preserved, is named
// "<xxh64>-<size>"). path and cm are escaped: '%', '#', every byte of a
// rune that is not printable (unicode.IsPrint: newlines, controls, spaces
// other than ' ') and every byte that is not UTF-8 become '%' and two
// uppercase hex digits, so any name round-trips. _dirs lines are escaped
// paths alone. A parser refuses anything else, and a last line without
// its newline (a torn write), with an error naming the file and line and
// wrapping ErrFormat.
//
// # Target state
//
// <target>/.replstate, JSON: {"last_repl_id":N,"dump":"<dir>",
// "time":"…"[,"source":…][,"fuzzy_until":K][,"bootstrapping":…]}.
// Content is staged, verified and renamed into place event by event;
// durability is grouped: at least every 256 MiB of content and every
// second, and before a load returns (also on error), one syncfs makes
// everything applied durable and only then is .replstate written
// (temp, fsync, rename, fsync dir). The state therefore never claims an
// event a power loss could take back; after a crash the target may hold
// effects of events past last_repl_id, which a rerun re-applies
// idempotently (content already in place is not fetched again).
// <target>/.repl-staging holds content being fetched; it is emptied at the
// start and removed at the end of every load. <target>/.repl-lock is the
// target's lock: a loader (a load, a follow for its whole life) holds an
// exclusive flock(2) on it before it touches anything in the target, and
// writes its pid, command line and start into it, so that a second loader
// is refused naming it (ErrTargetBusy) or waits (LockOptions.Wait). The
// flock is the truth: a holder killed with -9 never blocks the next one.
// The three names are reserved at the target's root.
//
// # Caveats
//
// A rename is applied as rename(2) applies it, an empty directory at the
// new name replaced (os.Rename would refuse it).
// Events in (to, walk_end] of the BOOTSTRAP a target started from raced
// with the walk; they are applied tolerantly (content found nowhere is
// skipped and counted in LoadResult.Missing; a rename whose both ends
// exist keeps the destination), and the target is exact from walk_end on.
// Files of one event with the same size and xxh64 (the names of a
// hard-linked file, as cmfs journals a write to it) are fetched once and
// linked to the other names at the target; the loader never changes a
// file in place, so such links never carry a later change along.
// Content that a later event renamed away (renames preserve nothing in
// cmroot) is looked for under the names later RENAME and LINK events gave
// it, in journal order, then in cmroot, where it ends when overwritten or
// deleted: the order content moves in, so a lookup cannot miss content
// that moves while it looks (Locate, used by LocalFetcher and the source
// service; locate.go says why). Mode, owner and
// times are not replicated: files are 0644, directories 0755. An exchange
// rename of two directories applied twice (a crash between the rename and
// the state update) swaps them back.
package repl
