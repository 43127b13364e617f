// Package integration holds the end-to-end tests of cmfs and replicad.
// They run the real binaries (bin/cmfs and bin/replicad, which `make
// build` makes), mount cmfs with FUSE, drive it with real processes and
// system calls, and check what it leaves behind with independent tools
// (xxhsum, the read-only journal, the cmroot files themselves):
//
//   - cmfs: protection of every destructive operation, crashes at each
//     failpoint and kill -9 loops, a power loss (the mount over a lazyfs
//     whose unsynced writes are dropped), full disks, bad input,
//     preservation by reflink over a backing directory on XFS (made on a
//     loop device; needs mkfs.xfs, which CI must have);
//   - replicad: dump, load and follow between a source mount and a
//     target, slots, containers replicated between `replicad serve`
//     nodes, with faults on the wire from an in-process toxiproxy and
//     nodes in network namespaces of their own, and authentication
//     (tokens, mutual TLS) refused and accepted; the status page of
//     `serve --http` as headless Chromium renders it (needs chromium,
//     which CI must have);
//   - operations: `make install` into a temporary PREFIX and `make
//     uninstall` from it (TestMakeInstall, which needs no FUSE), and
//     scripts/demo.sh, the story `make demo` tells (TestDemo); both
//     daemons under a fake systemd notify socket (TestSystemdMount,
//     TestSystemdServe, TestUnitExecStart), dist/systemd's units through
//     systemd-analyze verify (TestUnitFiles) and under a real systemd,
//     PID 1 of namespaces of its own: start, restart after kill -9, the
//     watchdog, stop (TestRealSystemd; both need systemd, which CI must
//     have), and mount(8) with the fuse.cmfs helper linked into
//     /sbin for the test's length: mount -t, an fstab line, umount
//     (TestMountHelper); the mount's Prometheus metrics, every one that
//     docs/metrics.md lists and only those, moving under a load
//     (TestMountMetrics), and no listener without --metrics
//     (TestMountNoMetrics).
//
// The tests need /dev/fuse and root: without them every test skips with
// the reason, and with CI=true in the environment such a skip is a
// failure. Without xxhsum the package refuses to run. Every test's mounts are unmounted in t.Cleanup, after which the
// journal is verified and `cmfs fsck` must pass, so each test also checks
// the invariants of what it did.
package integration
