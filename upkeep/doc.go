// Package upkeep is what reads and maintains a state directory's journal
// and cmroot, the same whether a mount holds them (package control runs
// it behind the mount's socket) or not (the CLI opens the journal and the
// store itself): Walk (a range of events, and a live tail), Fsck (cmroot
// against every name the journal references) and GC (by age, keeping
// what the replication slots of package slot still need, up to a
// retain-max).
//
// It sits above journal, cmroot and slot and below control, source and
// the commands; cmroot itself cannot hold Fsck and GC, since slot imports
// cmroot.
package upkeep

import "errors"

// ErrInvalid is returned for a malformed request: an empty range, a
// negative retention.
var ErrInvalid = errors.New("upkeep: invalid argument")
