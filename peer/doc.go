// Package peer is replicad's container service (api/container.proto): the
// admin calls of `replicad container ...` on one node, and the traffic
// that copies a container from one node to another.
//
// # Serving
//
// A Server wraps the node's container store (a *container.Store, through
// the Store interface) and serves the Container service. With
// Config.TLS set it speaks mutual TLS 1.3 (internal/tlsconfig) to clients
// and to the peers it dials, and the certificate is the credential;
// without, it listens on, and dials, loopback addresses only
// (tlsconfig.ErrInsecure), and every call, unary or streaming, must carry
// Config.Token (internal/auth; the client's WithToken), which the node
// also sends to the peers it dials. A refused token or certificate is
// ErrUnauthenticated and never retried; a certificate refusal that TLS
// 1.3 shows as a broken pipe is found by a probe (tlsconfig.Probe). The
// server has the Source service's flow-control windows (internal/window).
//
// # Replication
//
// Replicate on the source node puts a task on the node's Supervisor: a
// priority queue deduplicated by (container, target), with a concurrency
// limit (doubled while the node is decommissioning), a deadline per task,
// an optional bandwidth limit for everything the node sends, and
// Prometheus metrics; Jobs lists what is queued and running (for the
// status page of `replicad serve --http`). A task runs in one of two modes:
//
//   - push (the default): the source exports the container's tarball
//     straight into a Push stream to the target, which imports it. A
//     transfer cut off (connection reset, the target still cleaning up
//     the last attempt) is started again from offset 0 — an import is
//     atomic, so a failed one leaves nothing to resume — a bounded number
//     of times with exponential backoff.
//   - pull: the source asks the target to Fetch the container, and the
//     target downloads it from the source (Download, at Config.Addr:
//     `replicad serve --advertise`, else the listen address) — in
//     general from a list of sources, going on to the next when one
//     fails. Fetch is retried like a push.
//
// A request may leave the mode to the node (NodeDefault): push, or pull
// on a node whose Config.Pull is set (`replicad serve --push=false`).
//
// Either way Replicate returns when the target has imported the container
// (RECOVERING, or with WaitScan CLOSED/UNHEALTHY after its scan) or
// failed, with the target's reason.
//
// # Streams
//
// A tarball travels in messages of at most 1 MiB, each in a buffer of its
// own, sent as gRPC flow control allows: the sender holds one message at
// a time, and the flow-control windows bound what is in flight. Messages carry the container id and their
// offset; the receiver refuses a gap or an overlap (ErrInvalid), and the
// last message carries the xxh64 of the whole stream, checked before the
// import may finish (container.ErrCorrupt). The receiver feeds the stream
// to Store.Import through an io.Pipe, closing it with the stream's error,
// so the import sees why the stream ended and discards everything.
//
// Only the stream's end may follow the end marker: a message after it
// aborts the import (ErrInvalid).
//
// Every stream the node serves or reads (Push, Put, Download, Get, and
// the download of a Fetch) is held to Config.StreamIdleTimeout — each
// Recv and Send must complete within it — and to a deadline,
// Config.StreamDeadline or its size at Config.StreamMinRate, whichever
// is later. A stream that breaks either is cut (ErrUnavailable when
// idle, context.DeadlineExceeded at the deadline) through the same path
// as any other failure: the import sees the error and discards its
// tarball and extract directory, and releases its reservation, whether
// or not the peer is still connected.
//
// Errors cross the wire as gRPC status codes, translated once on each side
// (toStatus, fromStatus), so errors.Is works on the client with the
// container package's sentinels and this package's.
package peer
