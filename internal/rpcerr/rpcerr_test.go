package rpcerr

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

var (
	errA = errors.New("a")
	errB = errors.New("b")
	errC = errors.New("c") // travels as errB's code: errB wins on the way back
)

var m = Map{{errA, codes.NotFound}, {errB, codes.InvalidArgument}, {errC, codes.InvalidArgument}}

func TestRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code codes.Code
		is   error
	}{
		{fmt.Errorf("open x: %w", errA), codes.NotFound, errA},
		{fmt.Errorf("bad: %w", errB), codes.InvalidArgument, errB},
		{fmt.Errorf("also bad: %w", errC), codes.InvalidArgument, errB},
		{fmt.Errorf("gone: %w", context.Canceled), codes.Canceled, context.Canceled},
		{errors.New("boom"), codes.Internal, nil},
	} {
		st := m.ToStatus(tc.err)
		if got := status.Code(st); got != tc.code {
			t.Errorf("%v: code %v, want %v", tc.err, got, tc.code)
		}
		back := m.FromStatus(st)
		if back.Error() != tc.err.Error() {
			t.Errorf("%v: message %q on the client", tc.err, back.Error())
		}
		if tc.is != nil && !errors.Is(back, tc.is) {
			t.Errorf("%v: the client's error does not wrap %v", tc.err, tc.is)
		}
	}
	if m.ToStatus(nil) != nil || m.FromStatus(nil) != nil {
		t.Error("nil does not stay nil")
	}
	plain := errors.New("not a status")
	if m.FromStatus(plain) != plain {
		t.Error("a non-status error was changed")
	}
}
