// Package statedir is the layout of a cmfs state directory: the names of
// what the mount, the CLI and the sidecar keep in it, and the mount record
// through which a command given only the state directory finds the
// backing directory and cmroot again. It is the one home of these names,
// so that the sidecar (replicad, source, repl) can find a mount's files
// without importing the FUSE adapter.
//
// A state directory (BACKING/.cmfs unless --state says otherwise; cmfs
// restore also reserves RestoreStagingPrefix next to what it restores):
//
//	journal.db            the event log (package journal); one writer: the mount
//	cmroot/               preserved originals, unless --cmroot (package cmroot)
//	control.sock          the mount's control socket (package control)
//	inflight              changes under way (package protect)
//	tmp/                  new inodes for O_TRUNC swaps (package protect)
//	mount.json            the last mount's Record (boot id, clean stop)
//	.mount.json.room      room allocated for the next Record (full disks)
//	cmfs.log              stderr of a --daemon mount
//	replicad-ingest.json  how far replicad serve --ingest got
//	catalog*.db           the catalogs of replicad dump (repl.CatalogFile)
//	slots.json            replication slots and the gc horizon (package slot)
//	slots.lock            flock'ed by whoever changes slots.json
//	replicad.token        replicad serve's same-host credential, 0600 (package internal/auth)
//
// The package imports nothing of the project but internal/durable.
package statedir
