package repl

import "errors"

// Errors returned by this package, wrapped with what was tried.
var (
	// ErrNoCopy: the content a file entry names is neither at its path
	// (with that checksum) nor in cmroot — nor, for a Fetcher of the
	// cluster's blocks, on any of its nodes.
	ErrNoCopy = errors.New("repl: no copy of the content")
	// ErrStale: a live file changed while it was read; the bytes delivered
	// so far must be discarded.
	ErrStale = errors.New("repl: source file changed while read")
	// ErrChecksum: bytes do not match the size and xxh64 they should have.
	ErrChecksum = errors.New("repl: checksum mismatch")
	// ErrUnsafePath: a path is absolute, holds "..", passes through a
	// symlink, or leads outside the tree it must stay in.
	ErrUnsafePath = errors.New("repl: unsafe path")
	// ErrFormat: a dump file is mangled (a _files or _dirs line, a JSON
	// file, an event directory name).
	ErrFormat = errors.New("repl: malformed dump")
	// ErrIncomplete: a dump has no _finished_dump.
	ErrIncomplete = errors.New("repl: incomplete dump")
	// ErrGap: a dump starts after the event following the target's last
	// loaded one.
	ErrGap = errors.New("repl: events missing between target and dump")
	// ErrNoEvents: an incremental dump was asked for from an id past the
	// journal's newest event.
	ErrNoEvents = errors.New("repl: no events to dump")
	// ErrMismatch: a dump directory or a target already holds something
	// else than what was asked for (another dump, a non-empty tree, another
	// source).
	ErrMismatch = errors.New("repl: dump or target holds something else")
	// ErrTargetBusy: another loader (a load, a follow) holds the target;
	// the error is a *BusyError that names it.
	ErrTargetBusy = errors.New("repl: target is being loaded by another process")
)
