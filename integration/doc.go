// Package integration holds the end-to-end tests of cmfs: they build the
// real bin/cmfs, mount it with FUSE, drive it with real processes and
// system calls, and check what it leaves behind with independent tools
// (xxhsum, the read-only journal, the cmroot files themselves).
//
// The tests need /dev/fuse and root. Without them every test skips with
// the reason; with CI=true in the environment such a skip is a failure.
// Every test's mounts are unmounted in t.Cleanup, after which the journal
// is verified and `cmfs fsck` must pass, so each test also checks the
// invariants of what it did.
package integration
