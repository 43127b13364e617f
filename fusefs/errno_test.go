package fusefs

import (
	"os"
	"syscall"
	"testing"
)

func TestToErrno(t *testing.T) {
	wrapped := &os.PathError{Op: "rename", Path: "x", Err: syscall.ENOSPC}
	if got := toErrno(wrapped); got != syscall.ENOSPC {
		t.Errorf("toErrno(wrapped ENOSPC) = %v", got)
	}
	if got := toErrno(os.ErrInvalid); got != syscall.EIO {
		t.Errorf("toErrno(no errno) = %v, want EIO", got)
	}
	if got := toErrno(nil); got != 0 {
		t.Errorf("toErrno(nil) = %v", got)
	}
}
