// Package fusefs is cmfs's FUSE layer: a go-fuse loopback filesystem over a
// backing directory whose every operation that could destroy content goes
// through the protection core (package protect). Each method turns the
// node into a path relative to the backing directory, holds what the core
// must see steady (a node's open handles, the order of inode replacement
// against releases), calls the core, and turns its error into an errno in
// one place (toErrno). The loopback's own calls that would join the
// backing directory's path in front of a node's are made on the core's
// tree instead (backing.go).
//
// The adapter keeps what only FUSE needs: a node keeps its identity when
// the core puts a new inode in place of its file's (O_TRUNC keeps the
// original inode in cmroot), so the kernel sees one file (root.swaps); a
// directory listing hides the state directory and cmroot; links that only
// cmroot holds are not counted in nlink, so a preserved file looks deleted
// to every program.
//
// Reads and writes of an open file go straight to the backing file in the
// kernel (FUSE passthrough, where the daemon may: as root), and the mount
// asks for FUSE_HANDLE_KILLPRIV_V2 so that a write asks the daemon
// nothing. The daemon then clears the set-ID bits that a write or
// truncation by a caller without CAP_FSETID clears, and keeps the handles
// of a set-ID file out of passthrough to see their writes (setid.go, with
// its limits).
//
// Stats counts the operations that change the tree, and the opens,
// flushes, fsyncs and releases of files, by result: "ok" or the errno's
// name. Each method defers one atomic add into a fixed array (no lock, no
// map); the mount's metrics read them (Stats.Ops), and the in-flight
// intents of the core Mount opened (Stats.InFlight).
package fusefs
