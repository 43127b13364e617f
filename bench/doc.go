// Package bench measures filesystem implementations side by side: the same
// workloads (bench/workload.go) run against a plain directory, plain go-fuse
// loopback, libfuse's passthrough_ll and cmfs, each over its own fresh
// backing directory, in one process and one run, so every ratio compares
// numbers taken on the same machine at the same time.
//
// A workload is a function of a directory; it never knows which
// implementation serves it. Implementations (impl.go) turn a backing
// directory into a mounted directory and back; the mount helpers
// (mount.go) poll the mountpoint's st_dev with a deadline and always
// unmount, falling back to a lazy `fusermount3 -u -z`. OnScratch runs
// rows with every implementation mounted again over backing directories on
// filesystems it makes on loop devices for them, and removes: one XFS for
// the reflink row, a fresh ext4 per implementation for the small-file rows.
//
// The workloads of many small changes (FileSet) also time every single
// operation, each worker into its own log-linear histogram (Latencies), so
// that the per-op table (OpTable) shows p50 and p99 beside the throughput;
// around their runs the harness reads what a mount's commit path did
// (Mount.Commit: cmfs status --json) to show device flushes per operation.
//
// Caveats: the numbers include the page cache of the machine they run on.
// Reads are made cold by `sync; echo 3 > /proc/sys/vm/drop_caches`, which
// needs root; without it the harness says so and reads may hit the cache.
package bench
