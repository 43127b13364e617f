package peer

import (
	"errors"

	"google.golang.org/grpc/codes"

	"github.com/cmfs-project/cmfs/container"
	"github.com/cmfs-project/cmfs/internal/auth"
	"github.com/cmfs-project/cmfs/internal/rpcerr"
	"github.com/cmfs-project/cmfs/internal/tlsconfig"
)

// Errors of this package, on the server and, through status codes, on the
// client. The container package's sentinels travel too (see errorCodes).
var (
	// ErrInvalid is returned for a malformed request or stream: a zero
	// container id, a missing target or source, an offset gap or overlap,
	// messages of another container.
	ErrInvalid = errors.New("peer: invalid request")
	// ErrUnavailable is returned when a peer cannot be reached or the
	// transfer was cut off, when no source of a Fetch could deliver, and
	// when the server is going away. Replication retries it.
	ErrUnavailable = errors.New("peer: unavailable")
	// ErrClosed is returned for a task submitted to a Supervisor that has
	// stopped.
	ErrClosed = errors.New("peer: supervisor stopped")
	// ErrUnauthenticated is wrapped when a node refused the client's
	// credential: no token or a wrong one (WithToken), or a certificate
	// refused in the TLS handshake. Replication does not retry it.
	ErrUnauthenticated = auth.ErrUnauthenticated
)

// errorCodes is how errors travel. Where sentinels share a code, the
// client gets the first one listed.
var errorCodes = rpcerr.Map{
	{Err: ErrInvalid, Code: codes.InvalidArgument},
	{Err: container.ErrBadCompression, Code: codes.InvalidArgument},
	{Err: container.ErrNotFound, Code: codes.NotFound},
	{Err: container.ErrBlockNotFound, Code: codes.NotFound},
	{Err: container.ErrExists, Code: codes.AlreadyExists},
	{Err: container.ErrImporting, Code: codes.Aborted},
	{Err: container.ErrNoSpace, Code: codes.ResourceExhausted},
	{Err: container.ErrNotClosed, Code: codes.FailedPrecondition},
	{Err: container.ErrNotOpen, Code: codes.FailedPrecondition},
	{Err: container.ErrHostile, Code: codes.PermissionDenied},
	{Err: container.ErrCorrupt, Code: codes.DataLoss},
	{Err: ErrUnavailable, Code: codes.Unavailable},
	{Err: container.ErrClosed, Code: codes.Unavailable},
	{Err: ErrClosed, Code: codes.Unavailable},
	{Err: auth.ErrUnauthenticated, Code: codes.Unauthenticated},
}

// blockCodes is errorCodes for Get, whose NotFound means the block.
var blockCodes = append(rpcerr.Map{{Err: container.ErrBlockNotFound, Code: codes.NotFound}}, errorCodes...)

// toStatus translates an error into the status the client sees. It is the
// only place server errors are mapped.
func toStatus(err error) error { return errorCodes.ToStatus(err) }

// fromStatus turns a gRPC error back into an error that wraps the
// sentinels. It is the only place client errors are mapped (Get's aside).
func fromStatus(err error) error { return errorCodes.FromStatus(err) }

// retryable says whether a transfer that failed with err may succeed if
// started again: it was cut off, or the target is still discarding the
// last attempt. A peer that refused this node's certificate (or whose
// certificate this node refused) will do so again.
func retryable(err error) bool {
	return (errors.Is(err, ErrUnavailable) && !tlsconfig.Refused(err)) || errors.Is(err, container.ErrImporting)
}
