// Package grace stops replicad's gRPC servers (the source's, a node's,
// the mount's control socket) the same way: gracefully, so that calls in
// flight finish, but within a grace period, after which what is still
// running is cut, so that a slow reader of a large file or a long
// transfer does not hold the exit up.
package grace

import "time"

// Period is the grace period the servers give their calls.
const Period = 5 * time.Second

// Server is what Stop stops: a *grpc.Server.
type Server interface {
	GracefulStop()
	Stop()
}

// Stop stops srv gracefully, and forcibly once period has passed; it
// returns once srv has stopped, and says whether it had to cut calls.
func Stop(srv Server, period time.Duration) (cut bool) {
	stopped := make(chan struct{})
	go func() {
		srv.GracefulStop()
		close(stopped)
	}()
	t := time.NewTimer(period)
	defer t.Stop()
	select {
	case <-stopped:
		return false
	case <-t.C:
		srv.Stop()
		<-stopped
		return true
	}
}
