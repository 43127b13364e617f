package fusefs

import (
	"errors"
	"syscall"
)

// toErrno translates an error into the errno the kernel gets. It is the
// one place this happens: wrapped errors keep their errno (errors.As), and
// anything without one is an I/O error, never a silent success or ENOSYS.
func toErrno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno
	}
	return syscall.EIO
}
