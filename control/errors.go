package control

import (
	"errors"

	"google.golang.org/grpc/codes"

	"github.com/cmfs-project/cmfs/cmroot"
	"github.com/cmfs-project/cmfs/internal/rpcerr"
	"github.com/cmfs-project/cmfs/journal"
	"github.com/cmfs-project/cmfs/upkeep"
)

// Errors returned by the package, also across the socket: a client's error
// wraps the sentinel the server's error wrapped (as far as the gRPC code
// tells), so errors.Is works on both sides.
var (
	// ErrInvalid is returned for a malformed request (an empty entry
	// name, a negative retention; the server's upkeep.ErrInvalid comes
	// back as it).
	ErrInvalid = errors.New("control: invalid argument")
	// ErrUnavailable is returned when nothing answers on the socket: no
	// mount is running, or it is shutting down.
	ErrUnavailable = errors.New("control: mount not answering")
)

// errorCodes is how the package's errors travel across the socket.
var errorCodes = rpcerr.Map{
	{Err: ErrInvalid, Code: codes.InvalidArgument},
	{Err: upkeep.ErrInvalid, Code: codes.InvalidArgument},
	{Err: cmroot.ErrNotFound, Code: codes.NotFound},
	{Err: journal.ErrCorrupt, Code: codes.DataLoss},
	{Err: ErrUnavailable, Code: codes.Unavailable},
	{Err: journal.ErrClosed, Code: codes.Unavailable},
}

// toStatus translates an error into the gRPC status the client sees. It
// is the only place server errors are mapped.
func toStatus(err error) error { return errorCodes.ToStatus(err) }

// fromStatus turns a gRPC error back into an error that wraps the
// package's sentinels. It is the only place client errors are mapped.
func fromStatus(err error) error { return errorCodes.FromStatus(err) }
