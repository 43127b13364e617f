// Package rpcerr carries errors across the project's gRPC services: a
// server error becomes a status whose code stands for the sentinel it
// wraps, and the client turns the status back into an error that keeps
// the server's message and wraps that sentinel, so errors.Is works on both
// sides.
package rpcerr

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cmfs-project/cmfs/internal/tlsconfig"
)

// Code pairs a sentinel error with the gRPC code it travels as.
type Code struct {
	Err  error
	Code codes.Code
}

// Map is a service's table of sentinels, tried in order. context.Canceled
// and context.DeadlineExceeded travel as their codes without being listed.
type Map []Code

// ToStatus translates an error into the status the client sees: the code
// of the first sentinel it wraps, codes.Internal for anything else. A
// status passes through unchanged.
func (m Map) ToStatus(err error) error {
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
	default:
		for _, c := range m {
			if errors.Is(err, c.Err) {
				code = c.Code
				break
			}
		}
	}
	return status.Error(code, err.Error())
}

// FromStatus turns a status back into an error with the server's message
// that wraps the first sentinel listed for its code. A connection that
// failed because a TLS handshake refused a certificate (Unavailable to
// gRPC) counts as codes.Unauthenticated: like a refused token, it will be
// refused again. Anything that is not a status passes through unchanged.
func (m Map) FromStatus(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	code := st.Code()
	if code == codes.Unavailable && tlsconfig.Refused(err) {
		code = codes.Unauthenticated
	}
	var base error
	switch code {
	case codes.Canceled:
		base = context.Canceled
	case codes.DeadlineExceeded:
		base = context.DeadlineExceeded
	default:
		for _, c := range m {
			if c.Code == code {
				base = c.Err
				break
			}
		}
	}
	return &remoteError{msg: st.Message(), base: base}
}

// remoteError is a server error as the client sees it.
type remoteError struct {
	msg  string
	base error
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.base }
