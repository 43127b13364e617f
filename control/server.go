package control

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"

	"github.com/cmfs-project/cmfs/api/controlpb"
	"github.com/cmfs-project/cmfs/api/eventpb"
	"github.com/cmfs-project/cmfs/cmroot"
	"github.com/cmfs-project/cmfs/internal/grace"
	"github.com/cmfs-project/cmfs/journal"
	"github.com/cmfs-project/cmfs/slot"
	"github.com/cmfs-project/cmfs/upkeep"
)

// Info describes the mount a Server serves.
type Info struct {
	Mountpoint string
	Backing    string
	State      string
	CMRoot     string
	// Retain is the retention GC uses when a request names none.
	Retain time.Duration
	// PathSyncs counts the fsyncs of what events name (nil: unknown).
	PathSyncs func() uint64
}

// Server serves the control service for one mount. The journal and the
// store are the caller's; they must stay open until Serve has returned.
type Server struct {
	controlpb.UnimplementedControlServer

	j     *journal.Log
	store *cmroot.Store
	slots *slot.Store
	info  Info

	// maint serializes fsck and gc: two repairs must not race.
	maint sync.Mutex

	// life ends when Serve stops, so following streams end with it
	// instead of holding the shutdown up.
	life context.Context
	end  context.CancelFunc
}

// NewServer returns a server for the mount described by info.
func NewServer(j *journal.Log, store *cmroot.Store, info Info) *Server {
	life, end := context.WithCancel(context.Background())
	s := &Server{j: j, store: store, info: info, life: life, end: end}
	if info.State != "" {
		s.slots = slot.Open(info.State)
	}
	return s
}

// Serve listens on socketPath (replacing a stale socket left by a crashed
// mount, refusing one that still answers) with mode 0600, and serves until
// ctx ends; it then stops, removes the socket and returns nil.
func (s *Server) Serve(ctx context.Context, socketPath string) error {
	defer s.end()
	if err := removeStale(socketPath); err != nil {
		return err
	}
	lis, err := net.Listen("unix", socketPath)
	if err != nil {
		return fmt.Errorf("listen %s: %w", socketPath, err)
	}
	if err := os.Chmod(socketPath, 0o600); err != nil {
		lis.Close()
		return fmt.Errorf("chmod %s: %w", socketPath, err)
	}
	// The mode is set after bind, and the state directory's may be
	// anything: the peer's uid is what decides.
	lis = peerListener{lis.(*net.UnixListener)}
	srv := grpc.NewServer()
	controlpb.RegisterControlServer(srv, s)

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(lis) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve %s: %w", socketPath, err)
	case <-ctx.Done():
	}
	s.end()
	grace.Stop(srv, grace.Period)
	<-errc
	return nil
}

// peerListener accepts only connections whose peer (SO_PEERCRED) runs as
// this process's uid or as root; others are closed unanswered.
type peerListener struct{ *net.UnixListener }

func (l peerListener) Accept() (net.Conn, error) {
	for {
		c, err := l.AcceptUnix()
		if err != nil {
			return nil, err
		}
		if uid, ok := peerUID(c); ok && (uid == 0 || uid == os.Getuid()) {
			return c, nil
		}
		c.Close()
	}
}

// peerUID is the uid of the process at the other end of c.
func peerUID(c *net.UnixConn) (int, bool) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, false
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil || cerr != nil {
		return 0, false
	}
	return int(cred.Uid), true
}

// removeStale removes a socket file nothing listens on any more.
func removeStale(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("stat %s: %w", path, err)
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("%s exists and is not a socket", path)
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return fmt.Errorf("%s: another process is serving on it", path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove stale socket: %w", err)
	}
	return nil
}

// Status implements controlpb.ControlServer.
func (s *Server) Status(ctx context.Context, _ *controlpb.StatusRequest) (*controlpb.StatusResponse, error) {
	entries, bytes := s.store.Stats()
	return &controlpb.StatusResponse{
		Mountpoint:  s.info.Mountpoint,
		Backing:     s.info.Backing,
		State:       s.info.State,
		Cmroot:      s.info.CMRoot,
		Pid:         int64(os.Getpid()),
		LastEventId: s.j.Last(),
		CmEntries:   int64(entries),
		CmBytes:     bytes,
		Commit:      s.commitStats(),
	}, nil
}

// commitStats describes the journal's commit path, and the fsyncs of what
// its events name when the mount says how many (Info.PathSyncs).
func (s *Server) commitStats() *controlpb.CommitStats {
	st := s.j.SyncStats()
	c := &controlpb.CommitStats{
		Sync:       st.Mode,
		Groups:     st.Groups,
		Events:     s.j.Stats().Events,
		Flushes:    st.Flushes,
		WalSyncs:   st.WALSyncs,
		Applies:    st.Applies,
		FlushP50Us: uint64(st.FlushP50 / time.Microsecond),
		FlushP99Us: uint64(st.FlushP99 / time.Microsecond),
	}
	if s.info.PathSyncs != nil {
		c.PathSyncs = s.info.PathSyncs()
	}
	return c
}

// Events implements controlpb.ControlServer.
func (s *Server) Events(req *controlpb.EventsRequest, stream grpc.ServerStreamingServer[eventpb.Event]) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	defer context.AfterFunc(s.life, cancel)()
	err := upkeep.Walk(ctx, s.j, req.From, req.To, req.Follow, func(e *journal.Event) error {
		return stream.Send(EventToProto(e))
	})
	if err != nil && s.life.Err() != nil && stream.Context().Err() == nil {
		// The mount is going away, not the client: end the stream cleanly.
		return nil
	}
	return toStatus(err)
}

// Fsck implements controlpb.ControlServer.
func (s *Server) Fsck(ctx context.Context, req *controlpb.FsckRequest) (*controlpb.FsckResponse, error) {
	s.maint.Lock()
	defer s.maint.Unlock()
	r, err := upkeep.FsckRetain(s.j, s.store, req.Repair, s.retain(), time.Now())
	if err != nil {
		return nil, toStatus(err)
	}
	return reportToProto(r), nil
}

// GC implements controlpb.ControlServer.
func (s *Server) GC(ctx context.Context, req *controlpb.GCRequest) (*controlpb.GCResponse, error) {
	retain, retainMax := time.Duration(req.RetainNanos), time.Duration(req.RetainMaxNanos)
	if retain == 0 {
		retain = time.Duration(req.RetainSeconds) * time.Second // an older client
	}
	if retainMax == 0 {
		retainMax = time.Duration(req.RetainMaxSeconds) * time.Second
	}
	if retain == 0 {
		retain = s.retain()
	}
	s.maint.Lock()
	defer s.maint.Unlock()
	opts := upkeep.GCOptions{Retain: retain, RetainMax: retainMax, Slots: s.slots}
	res, err := upkeep.GC(ctx, s.j, s.store, opts, time.Now())
	if err != nil {
		return nil, toStatus(err)
	}
	return &controlpb.GCResponse{Removed: int64(res.Removed), Bytes: res.Bytes,
		Pinned: int64(res.Pinned), PinnedBytes: res.PinnedBytes, Horizon: res.Horizon}, nil
}

// Lookup implements controlpb.ControlServer.
func (s *Server) Lookup(ctx context.Context, req *controlpb.LookupRequest) (*controlpb.Entry, error) {
	if req.Name == "" {
		return nil, toStatus(fmt.Errorf("%w: empty entry name", ErrInvalid))
	}
	e, err := s.store.Lookup(req.Name)
	if err != nil {
		return nil, toStatus(fmt.Errorf("lookup %s: %w", req.Name, err))
	}
	return &controlpb.Entry{
		Name:              e.Name,
		Xxh64:             e.XXH64,
		Size:              e.Size,
		PreservedUnixNano: unixNano(e.Preserved),
		RefreshedUnixNano: unixNano(e.Refreshed),
		Path:              s.store.Path(e.Name),
	}, nil
}

// retain is the mount's retention.
func (s *Server) retain() time.Duration {
	if s.info.Retain > 0 {
		return s.info.Retain
	}
	return cmroot.DefaultRetain
}
