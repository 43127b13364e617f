// Package slot keeps replication slots: what each registered destination
// of a cmfs mount has loaded, so that cmroot's gc keeps the preserved
// originals it still needs (as PostgreSQL's replication slots hold WAL).
//
// Contract:
//
//   - A slot is a name and a position: the id of the last event the
//     destination has applied. Every event after it may still have to be
//     reproduced there, so every cmroot entry such an event names is
//     pinned: gc keeps it past the retention, up to a bound (--retain-max)
//     so that a dead destination cannot fill the disk.
//   - The slots live in the state directory, in one small JSON file
//     (STATE/slots.json) written durably (internal/durable) and changed
//     under an exclusive flock of STATE/slots.lock, because two processes
//     change it: `replicad serve` (destinations register and advance their
//     slots) and the mount's gc (or `cmfs gc` unmounted), which records
//     what it removed.
//   - The horizon is gc's record of what it removed: every cmroot entry gc
//     ever removed is named only by events at or before State.Horizon. A
//     destination at or past the horizon can always catch up; one behind
//     it may not, and FirstLost says exactly which event it can no longer
//     reproduce. A slot behind the horizon is lost: it pins nothing any
//     more, until its destination is bootstrapped again and its position
//     passes the horizon.
//
// Errors: ErrInvalid for a bad slot name, ErrNotFound for a slot that is
// not there, ErrFormat for a slots file that cannot be read; all wrapped
// with the file's name.
package slot
