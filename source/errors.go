package source

import (
	"errors"

	"google.golang.org/grpc/codes"

	"github.com/cmfs-project/cmfs/internal/auth"
	"github.com/cmfs-project/cmfs/internal/rpcerr"
	"github.com/cmfs-project/cmfs/internal/tlsconfig"
	"github.com/cmfs-project/cmfs/journal"
	"github.com/cmfs-project/cmfs/repl"
	"github.com/cmfs-project/cmfs/slot"
)

// Errors returned by the package, on the server and, through the status
// codes, on the client: a client error wraps the sentinel the server's
// error wrapped. Those a Client's Fetch returns also match repl's, so
// that a load reacts to them as to its own fetcher's (ErrNotFound is a
// repl.ErrNoCopy, ErrRefused a repl.ErrUnsafePath, ErrMismatch a
// repl.ErrChecksum).
var (
	// ErrNotFound is returned by ReadFile and Fetch when neither the path
	// nor cmroot holds the content asked for.
	ErrNotFound error = &sentinel{"source: not found", repl.ErrNoCopy}
	// ErrInvalid is returned for a malformed request: a bad checksum or
	// size, an absolute path, a ".." element, a NUL, an empty range.
	ErrInvalid = errors.New("source: invalid request")
	// ErrRefused is returned for a path the service never serves: one
	// that leads outside the warehouse root, or into the state directory.
	ErrRefused error = &sentinel{"source: refused", repl.ErrUnsafePath}
	// ErrMismatch is returned by a Fetch reader at EOF when the bytes
	// received from cmroot do not have the xxh64 asked for: a corrupt
	// entry.
	ErrMismatch error = &sentinel{"source: checksum mismatch", repl.ErrChecksum}
	// ErrUnavailable is returned when the journal cannot be read: held by
	// a mount whose control socket does not answer, or the server is
	// going away.
	ErrUnavailable = errors.New("source: unavailable")
	// ErrInsecure is wrapped when ListenAndServe or Dial is given a
	// non-loopback address: without TLS only loopback is allowed.
	ErrInsecure = errors.New("source: non-loopback address without TLS")
	// ErrUnauthenticated is wrapped when the server refused the client's
	// credential: no token or a wrong one (WithToken), or a certificate
	// refused in the TLS handshake. Asking again will not help.
	ErrUnauthenticated = auth.ErrUnauthenticated
)

// errChanged: a live file held other bytes than asked for, found at the
// end of its read. Fetch then asks for the content from cmroot itself.
var errChanged error = &sentinel{"source: live file changed", repl.ErrStale}

// sentinel is an error of this package that is also one of repl's.
type sentinel struct {
	msg string
	is  error
}

func (e *sentinel) Error() string { return e.msg }
func (e *sentinel) Unwrap() error { return e.is }

// insecureError is tlsconfig's refusal, in its words (which name the TLS
// flags), wrapping this package's sentinel.
type insecureError struct{ op, addr string }

func (e *insecureError) Error() string {
	return (&tlsconfig.InsecureError{Op: e.op, Addr: e.addr}).Error()
}

func (e *insecureError) Unwrap() error { return ErrInsecure }

// errorCodes is how the package's errors travel to the client.
var errorCodes = rpcerr.Map{
	{Err: ErrInvalid, Code: codes.InvalidArgument},
	{Err: slot.ErrNotFound, Code: codes.FailedPrecondition},
	{Err: ErrRefused, Code: codes.PermissionDenied},
	{Err: ErrNotFound, Code: codes.NotFound},
	{Err: journal.ErrCorrupt, Code: codes.DataLoss},
	{Err: ErrUnavailable, Code: codes.Unavailable},
	{Err: journal.ErrLocked, Code: codes.Unavailable},
	{Err: journal.ErrClosed, Code: codes.Unavailable},
	{Err: auth.ErrUnauthenticated, Code: codes.Unauthenticated},
}

// toStatus translates an error into the gRPC status the client sees. It
// is the only place server errors are mapped.
func toStatus(err error) error { return errorCodes.ToStatus(err) }

// fromStatus turns a gRPC error back into an error that wraps the
// package's sentinels. It is the only place client errors are mapped.
func fromStatus(err error) error { return errorCodes.FromStatus(err) }
