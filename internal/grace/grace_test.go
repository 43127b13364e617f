package grace

import (
	"sync/atomic"
	"testing"
	"time"
)

// fakeServer's GracefulStop returns once its calls are done: at once, or
// when Stop cuts them.
type fakeServer struct {
	busy    bool
	cutCall chan struct{}
	stops   atomic.Int32
}

func (s *fakeServer) GracefulStop() {
	if s.busy {
		<-s.cutCall
	}
}

func (s *fakeServer) Stop() {
	s.stops.Add(1)
	close(s.cutCall)
}

func TestStop(t *testing.T) {
	for _, tt := range []struct {
		name    string
		busy    bool
		wantCut bool
	}{
		{"idle: graceful", false, false},
		{"a call that does not end: cut after the period", true, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := &fakeServer{busy: tt.busy, cutCall: make(chan struct{})}
			start := time.Now()
			cut := Stop(srv, 50*time.Millisecond)
			took := time.Since(start)
			if cut != tt.wantCut || int(srv.stops.Load()) != map[bool]int{false: 0, true: 1}[tt.wantCut] {
				t.Errorf("Stop: cut %v after %d Stop calls, want cut %v", cut, srv.stops.Load(), tt.wantCut)
			}
			if tt.wantCut && took < 50*time.Millisecond {
				t.Errorf("cut after %v, before the grace period", took)
			}
		})
	}
}
