package control

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cmfs-project/cmfs/cmroot"
	"github.com/cmfs-project/cmfs/journal"
)

// Errors returned by the package, also across the socket: a client's error
// wraps the sentinel the server's error wrapped (as far as the gRPC code
// tells), so errors.Is works on both sides.
var (
	// ErrInvalid is returned for a malformed request (an empty range, a
	// negative retention, an empty entry name).
	ErrInvalid = errors.New("control: invalid argument")
	// ErrUnavailable is returned when nothing answers on the socket: no
	// mount is running, or it is shutting down.
	ErrUnavailable = errors.New("control: mount not answering")
)

// toStatus translates an error into the gRPC status the client sees. It
// is the only place server errors are mapped.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	code := codes.Internal
	switch {
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	case errors.Is(err, ErrInvalid):
		code = codes.InvalidArgument
	case errors.Is(err, cmroot.ErrNotFound):
		code = codes.NotFound
	case errors.Is(err, journal.ErrCorrupt):
		code = codes.DataLoss
	case errors.Is(err, journal.ErrClosed):
		code = codes.Unavailable
	}
	return status.Error(code, err.Error())
}

// remoteError is a server error as the client sees it: the server's
// message, unwrapping to the sentinel its code stands for.
type remoteError struct {
	msg  string
	base error
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.base }

// fromStatus turns a gRPC error back into an error that wraps the
// package's sentinels. It is the only place client errors are mapped.
func fromStatus(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	var base error
	switch st.Code() {
	case codes.Canceled:
		base = context.Canceled
	case codes.DeadlineExceeded:
		base = context.DeadlineExceeded
	case codes.InvalidArgument:
		base = ErrInvalid
	case codes.NotFound:
		base = cmroot.ErrNotFound
	case codes.DataLoss:
		base = journal.ErrCorrupt
	case codes.Unavailable:
		base = ErrUnavailable
	}
	return &remoteError{msg: st.Message(), base: base}
}
