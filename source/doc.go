// Package source is replicad's source service (`replicad serve`): a gRPC
// service next to a cmfs mount through which a destination reads the
// source's files and journal. Data moves once: a file is streamed from the
// live warehouse tree while it still holds the content asked for, else
// from cmroot, where cmfs preserved it.
//
// # Files
//
// ReadFile names a file by its path relative to the warehouse root
// (Config.Backing), its size and its xxh64. The server serves the live
// file when its size matches, hashing it as it streams, and sends the
// xxh64 of what it sent in the last chunk; when the size differs, or the
// client asks with prefer_cmroot, it serves the cmroot entry
// "<xxh64>-<size>" instead. The client (Client.Fetch) computes the xxh64
// of what it receives: a live file whose bytes turned out different (same
// size, new content) is discarded and asked for again from cmroot, so a
// Fetch yields only the content asked for or fails. (WithStreaming hands
// live bytes through instead, unhashed on both ends — the request says
// no_checksum — for a caller that stages, verifies and retries itself: a
// load.) A file with a cmroot name (f.CM) is a preserved original and is
// read from cmroot only, or — for content an event named at a path —
// from wherever it has moved since (below).
//
// # Content that moves
//
// The content a request names can move while ReadFile looks for it: a
// concurrent writer renames the file (mv -f .t1 part-1-0), then
// overwrites or deletes it, which preserves it in cmroot. Content only
// ever moves forward, in journal order: from the path along the names
// later renames give it, into cmroot, where it stays until gc. When the
// path and cmroot miss, and the request says which event named the file
// (after_event), ReadFile chases it with repl.Locate, which looks in that
// same order — the path, every later name in journal order, then cmroot
// — so it cannot pass the content: whatever place the content is not at
// when looked at, it is further on. (The lookup this replaces looked at
// cmroot before the renamed names, and missed content moved from a name
// into cmroot between the two looks: follow exited with "not at the
// path, not in cmroot" for content that existed all along.) A pass that
// finds nothing means the content is at a name the journal does not list
// yet — cmfs moves first and journals right after — so Locate reads the
// new events, looks at the new names and at cmroot again, and gives up
// once the journal has been quiet for 250 ms (at most 2 s): the content
// is gone (gc), or its move is not journaled yet, which the caller's
// retry covers (follow retries a failed round with backoff). Files found
// this way are read through and matched before they are served. A live
// file that cmfs moved into cmroot between its open and the check of
// where it lies is passed over, not refused: it is served from cmroot.
//
// What is served: regular files inside the warehouse root, and cmroot
// entries named by checksum — nothing else. Refused: a path that is
// absolute, has a ".." element or a NUL (ErrInvalid); a path that leads
// outside the warehouse root through a symlink, and anything in the state
// directory (Backing/.cmfs, Config.State, Config.CMRoot), also when a
// symlink leads there (ErrRefused). Files are opened through an os.Root on
// the warehouse root, which follows a symlink only when it stays inside
// the root: a relative symlink to a file inside the warehouse is served (a
// destination sees the same bytes a reader of the source does), an
// absolute symlink is always refused, even one that points inside. The
// state directory check is made on the file actually opened (its path in
// /proc/self/fd), so a symlink swapped in after the check cannot lead
// there either.
//
// # Events
//
// Events relays the journal. While a mount answers on the state's control
// socket, events come from it (the mount holds the journal's lock);
// otherwise the journal is read read-only. A following stream switches
// between the two when a mount starts or stops under it, without losing
// or repeating an event.
//
// # Transport
//
// Without TLS the service binds, and the client connects to, loopback
// addresses only (ErrInsecure), and every call must carry the server's
// token (Config.Token, the client's WithToken; internal/auth): Serve
// refuses to start without one. With TLS — the service registered on a
// peer.Server node — the client certificate is the credential. A refused
// credential is ErrUnauthenticated.
//
// # Counts
//
// A Server counts its calls by method and status code, and the events,
// files and bytes its streams send (Stats, for replicad's metrics). The
// counting is in the service's handlers as registered, so that it is the
// same on Serve's own gRPC server and on a node's (Register); a call the
// credentials check refuses is not counted.
//
// Errors cross the wire as gRPC status codes, translated in one place on
// each side (toStatus, fromStatus), so errors.Is works on the client with
// the sentinels below.
package source
