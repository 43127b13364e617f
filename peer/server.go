package peer

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/experimental"

	"github.com/cmfs-project/cmfs/api/containerpb"
	"github.com/cmfs-project/cmfs/container"
	"github.com/cmfs-project/cmfs/internal/auth"
	"github.com/cmfs-project/cmfs/internal/bufpool"
	"github.com/cmfs-project/cmfs/internal/grace"
	"github.com/cmfs-project/cmfs/internal/rpclog"
	"github.com/cmfs-project/cmfs/internal/tlsconfig"
	"github.com/cmfs-project/cmfs/internal/window"
)

// buffers is the gRPC buffer pool of the package's servers and clients:
// gRPC's own zeroes every buffer it hands out, some 5% of a push target's
// CPU on 1 MiB messages (see internal/bufpool).
var buffers = bufpool.New()

// Server serves the Container service over a node's Store, and runs the
// node's replication (its Supervisor). It serves once: Serve or
// ListenAndServe.
type Server struct {
	containerpb.UnimplementedContainerServer

	store     Store
	cfg       Config
	sup       *Supervisor
	lim       *rate.Limiter
	srv       *grpc.Server
	clientTLS *tls.Config // for dialing peers; nil without TLS
	addr      atomic.Pointer[string]

	// onRetry, if set (tests), is called before each further attempt.
	onRetry func(attempt int, err error)

	// staged are the EC indexes this node encoded or rebuilt and holds
	// for targets to download (pull mode).
	stagedMu sync.Mutex
	staged   map[stagedKey]*container.Staged
}

// NewServer returns a server of store with cfg's defaults filled in and,
// with cfg.TLS, the certificates loaded.
//
// Errors: ErrInvalid (wrapped) for a negative setting, or neither TLS
// nor a token; tlsconfig's (ErrIncomplete, ErrFile) for the TLS files.
func NewServer(store Store, cfg Config) (*Server, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if !cfg.TLS.Enabled() && cfg.Token == "" {
		return nil, fmt.Errorf("peer: neither TLS nor a token: every client must be authenticated: %w", ErrInvalid)
	}
	s := &Server{store: store, cfg: cfg, lim: newLimiter(cfg.Bandwidth)}
	creds := insecure.NewCredentials()
	if cfg.TLS.Enabled() {
		scfg, err := tlsconfig.Server(cfg.TLS)
		if err != nil {
			return nil, err
		}
		if s.clientTLS, err = tlsconfig.Client(cfg.TLS); err != nil {
			return nil, err
		}
		creds = credentials.NewTLS(scfg)
	}
	if cfg.Addr != "" {
		s.addr.Store(&cfg.Addr)
	}
	if s.sup, err = NewSupervisor(cfg, s.replicate); err != nil {
		return nil, err
	}
	opts := append(window.Server(), grpc.Creds(creds), experimental.BufferPool(buffers))
	opts = append(opts, rpclog.ServerOptions(cfg.Logger)...)
	if s.clientTLS == nil {
		opts = append(opts, auth.ServerOptions(cfg.Token)...)
	}
	s.srv = grpc.NewServer(opts...)
	containerpb.RegisterContainerServer(s.srv, s)
	return s, nil
}

// RegisterService registers another service on the server's gRPC server,
// so that it shares the listener and the credentials (a *Server is a
// grpc.ServiceRegistrar): call it before Serve.
func (s *Server) RegisterService(desc *grpc.ServiceDesc, impl any) { s.srv.RegisterService(desc, impl) }

// Config returns the configuration with the defaults filled in.
func (s *Server) Config() Config { return s.cfg }

// Addr returns the address peers reach this node at: Config.Addr, else
// the address Serve listens on ("" before).
func (s *Server) Addr() string {
	if a := s.addr.Load(); a != nil {
		return *a
	}
	return ""
}

// Supervisor returns the node's replication supervisor.
func (s *Server) Supervisor() *Supervisor { return s.sup }

// SetDecommissioning doubles the replication concurrency while on.
func (s *Server) SetDecommissioning(on bool) { s.sup.SetDecommissioning(on) }

// Metrics serves the replication metrics (Prometheus): mount it on
// /metrics.
func (s *Server) Metrics() http.Handler { return s.sup.Handler() }

// Serve serves on lis, and runs the replication supervisor, until ctx
// ends; then it stops (calls in progress get a few seconds; replication
// tasks are cancelled) and returns nil. It closes lis.
//
// Errors: without TLS, *tlsconfig.InsecureError if lis is not on a
// loopback address; the listener's error.
func (s *Server) Serve(ctx context.Context, lis net.Listener) error {
	if s.clientTLS == nil {
		if err := tlsconfig.CheckLoopback(ctx, "serve on", lis.Addr().String()); err != nil {
			lis.Close()
			return err
		}
	}
	if s.Addr() == "" {
		a := lis.Addr().String()
		s.addr.Store(&a)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	supDone := make(chan struct{})
	go func() {
		s.sup.Run(ctx)
		close(supDone)
	}()
	errc := make(chan error, 1)
	go func() { errc <- s.srv.Serve(lis) }()
	select {
	case err := <-errc:
		cancel()
		<-supDone
		return fmt.Errorf("serve %s: %w", lis.Addr(), err)
	case <-ctx.Done():
	}
	if grace.Stop(s.srv, grace.Period) {
		s.cfg.Logger.Warn("node: calls still running after the grace period were cut (their imports are discarded)", slog.Duration("grace", grace.Period))
	}
	<-errc
	<-supDone
	return nil
}

// ListenAndServe listens on addr and serves until ctx ends. Without TLS
// addr must be a loopback address.
//
// Errors: without TLS, *tlsconfig.InsecureError (wrapping
// tlsconfig.ErrInsecure) for an address that is, or resolves to,
// anything but loopback; the listener's error.
func (s *Server) ListenAndServe(ctx context.Context, addr string) error {
	if s.clientTLS == nil {
		if err := tlsconfig.CheckLoopback(ctx, "listen on", addr); err != nil {
			return err
		}
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", addr, err)
	}
	return s.Serve(ctx, lis)
}

// Dial connects to another node with this node's credential (its
// certificate, else its token), for the node's other clients: the
// cluster agent's heartbeats share it (Client.Conn).
func (s *Server) Dial(ctx context.Context, addr string) (*Client, error) { return s.dial(ctx, addr) }

// dial connects to a peer with the node's credential: its certificate,
// else its token.
func (s *Server) dial(ctx context.Context, addr string) (*Client, error) {
	if s.clientTLS != nil {
		return Dial(ctx, addr, WithTLS(s.clientTLS))
	}
	return Dial(ctx, addr, WithToken(s.cfg.Token))
}

func (s *Server) Put(stream containerpb.Container_PutServer) error {
	g := s.guard(stream.Context(), "put")
	defer g.stop()
	first, err := recv(g, stream.Recv)
	if err == io.EOF {
		return toStatus(fmt.Errorf("put: no message: %w", ErrInvalid))
	}
	if err != nil {
		return toStatus(g.fail(err))
	}
	if r := first.Replication; r != "" {
		if err := container.ValidateReplication(r); err != nil {
			return toStatus(fmt.Errorf("put: %w: %w", ErrInvalid, err))
		}
	}
	type result struct {
		id  uint64
		b   container.BlockID
		err error
	}
	pr, pw := io.Pipe()
	done := make(chan result, 1)
	go func() {
		id, b, err := s.store.PutReplication(pr, first.Replication)
		pr.CloseWithError(errEnded)
		done <- result{id, b, err}
	}()
	var recvErr, writeErr error
	received := int64(len(first.Data))
	_, writeErr = pw.Write(first.Data)
	for writeErr == nil {
		g.expect(received)
		m, err := recv(g, stream.Recv)
		if err == io.EOF {
			break
		}
		if err != nil {
			recvErr = g.fail(err)
			break
		}
		received += int64(len(m.Data))
		_, writeErr = pw.Write(m.Data)
	}
	pw.CloseWithError(recvErr) // nil: EOF, the file is complete
	res := <-done
	switch {
	case recvErr != nil:
		return toStatus(recvErr) // cut, or the client went away (then nobody reads this)
	case res.err != nil:
		// The store's message says what failed; the client, which named
		// the file, says which file.
		return toStatus(res.err)
	case writeErr != nil:
		return toStatus(errors.New("put: the store stopped reading before the end"))
	}
	return stream.SendAndClose(&containerpb.PutResponse{ContainerId: res.id, Block: blockToPB(res.b)})
}

// errEnded tells a writer into a pipe that its reader has returned.
var errEnded = errors.New("the reader has ended")

func (s *Server) Close(ctx context.Context, req *containerpb.CloseRequest) (*containerpb.Descriptor, error) {
	if req.ContainerId == 0 {
		return nil, toStatus(fmt.Errorf("close: no container id: %w", ErrInvalid))
	}
	d, err := s.store.CloseContainer(req.ContainerId)
	if err != nil {
		return nil, toStatus(err)
	}
	return descToPB(d), nil
}

func (s *Server) List(ctx context.Context, req *containerpb.ListRequest) (*containerpb.ListResponse, error) {
	resp := &containerpb.ListResponse{}
	for _, d := range s.store.List() {
		resp.Containers = append(resp.Containers, descToPB(d))
	}
	return resp, nil
}

func (s *Server) Get(req *containerpb.GetRequest, stream containerpb.Container_GetServer) error {
	if req.Block == nil {
		return toStatus(fmt.Errorf("get: no block: %w", ErrInvalid))
	}
	b := blockFromPB(req.Block)
	rc, size, err := s.store.OpenBlock(b)
	if err != nil {
		return blockCodes.ToStatus(err)
	}
	defer rc.Close()
	g := s.guard(stream.Context(), fmt.Sprintf("get %s", b))
	defer g.stop()
	g.expect(size)
	first := true
	for {
		buf := make([]byte, min(chunkSize, max(size, 1)))
		n, err := io.ReadFull(rc, buf)
		if n > 0 || first {
			m := &containerpb.BlockData{Data: buf[:n]}
			if first {
				m.Size, first = size, false
			}
			if err := g.send(func() error { return stream.Send(m) }); err != nil {
				return toStatus(g.fail(err))
			}
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return nil
		}
		if err != nil {
			return blockCodes.ToStatus(fmt.Errorf("get %s: %w", b, err))
		}
	}
}

func (s *Server) Verify(ctx context.Context, req *containerpb.VerifyRequest) (*containerpb.Descriptor, error) {
	if req.ContainerId == 0 {
		return nil, toStatus(fmt.Errorf("verify: no container id: %w", ErrInvalid))
	}
	d, err := s.store.Verify(ctx, req.ContainerId)
	if err != nil {
		return nil, toStatus(err)
	}
	return descToPB(d), nil
}

// Replicate puts the task on the supervisor and waits for it. The task's
// deadline is the call's, if it has one. A caller that goes away does not
// cancel the task (another may be waiting for it).
func (s *Server) Replicate(ctx context.Context, req *containerpb.ReplicateRequest) (*containerpb.ReplicateResponse, error) {
	t, err := taskFromPB(req)
	if err != nil {
		return nil, toStatus(err)
	}
	if t.Target == s.Addr() {
		return nil, toStatus(fmt.Errorf("replicate container %d to %s: that is this node: %w", t.Container, t.Target, ErrInvalid))
	}
	if t.Mode == NodeDefault {
		t.Mode = Push
		if s.cfg.Pull {
			t.Mode = Pull
		}
	}
	if d, ok := ctx.Deadline(); ok {
		t.Deadline = d
	}
	res, err := s.sup.Submit(t).Wait(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	return &containerpb.ReplicateResponse{
		Container:    descToPB(res.Descriptor),
		Bytes:        res.Bytes,
		Attempts:     int32(res.Attempts),
		DurationNano: int64(res.Duration),
		Mode:         modeToPB(res.Mode),
	}, nil
}

func taskFromPB(req *containerpb.ReplicateRequest) (Task, error) {
	if req.ContainerId == 0 {
		return Task{}, fmt.Errorf("replicate: no container id: %w", ErrInvalid)
	}
	if req.Target == "" {
		return Task{}, fmt.Errorf("replicate container %d: no target: %w", req.ContainerId, ErrInvalid)
	}
	c, err := container.ParseCompression(req.Compression)
	if err != nil {
		return Task{}, err
	}
	mode := Push
	switch req.Mode {
	case containerpb.Mode_PUSH:
	case containerpb.Mode_PULL:
		mode = Pull
	case containerpb.Mode_NODE_DEFAULT:
		mode = NodeDefault
	default:
		return Task{}, fmt.Errorf("replicate container %d: mode %v: %w", req.ContainerId, req.Mode, ErrInvalid)
	}
	return Task{
		Container:   req.ContainerId,
		Target:      req.Target,
		Mode:        mode,
		Compression: c,
		Priority:    int(req.Priority),
		WaitScan:    req.WaitScan,
	}, nil
}

// Push imports the tarball the client streams: the stream is checked
// (tarReader) and fed to Store.Import through a pipe. Whatever ends the
// stream early — a gap, a bad checksum, the client gone — closes the pipe
// with that error, so the import fails and discards what it got.
func (s *Server) Push(stream containerpb.Container_PushServer) error {
	ctx := stream.Context()
	g := s.guard(ctx, "push")
	defer g.stop()
	first, err := recv(g, stream.Recv)
	if err == io.EOF {
		return toStatus(fmt.Errorf("push: no message: %w", ErrInvalid))
	}
	if err != nil {
		return toStatus(g.fail(err))
	}
	id := first.ContainerId
	switch {
	case id == 0:
		return toStatus(fmt.Errorf("push: no container id: %w", ErrInvalid))
	case first.Offset != 0:
		return toStatus(fmt.Errorf("push container %d: first message at offset %d: %w", id, first.Offset, ErrInvalid))
	case first.Size < 0:
		return toStatus(fmt.Errorf("push container %d: size %d: %w", id, first.Size, ErrInvalid))
	}
	comp, err := container.ParseCompression(first.Compression)
	if err != nil {
		return toStatus(fmt.Errorf("push container %d: %w", id, err))
	}
	g.what = fmt.Sprintf("push container %d", id)
	g.expect(first.Size)
	s.sup.m.received.Add(float64(len(first.Data)))
	r := newTarReader(first, func() (*containerpb.TarChunk, error) {
		m, err := recv(g, stream.Recv)
		if err == nil {
			s.sup.m.received.Add(float64(len(m.Data)))
		}
		return m, err
	})
	d, n, err := s.importFrom(g.ctx, id, first.Size, comp, r)
	if err != nil {
		return toStatus(g.fail(err))
	}
	g.stop() // the scan is the node's own work
	if first.WaitScan {
		if d, err = s.store.WaitScan(ctx, id); err != nil {
			return toStatus(err)
		}
	}
	return stream.SendAndClose(&containerpb.ImportResponse{Container: descToPB(d), Bytes: n})
}

// importFrom runs Store.Import on what r delivers, through a pipe; it
// returns the stream's error rather than the import's when the stream
// failed first.
func (s *Server) importFrom(ctx context.Context, id uint64, size int64, comp container.Compression, r *tarReader) (container.Descriptor, int64, error) {
	type result struct {
		d   container.Descriptor
		err error
	}
	pr, pw := io.Pipe()
	done := make(chan result, 1)
	go func() {
		d, err := s.store.Import(ctx, id, size, comp, pr)
		pr.CloseWithError(errEnded)
		done <- result{d, err}
	}()
	readErr, _ := r.copyTo(pw)
	pw.CloseWithError(readErr) // nil: EOF, the stream is complete
	res := <-done
	if readErr != nil {
		return container.Descriptor{}, r.Received(), readErr
	}
	if res.err != nil {
		return container.Descriptor{}, r.Received(), res.err
	}
	return res.d, r.Received(), nil
}

// Download streams a container's tarball: Export writes straight into the
// stream, held to the node's bandwidth limit.
func (s *Server) Download(req *containerpb.DownloadRequest, stream containerpb.Container_DownloadServer) error {
	ctx := stream.Context()
	if req.ContainerId == 0 {
		return toStatus(fmt.Errorf("download: no container id: %w", ErrInvalid))
	}
	comp, err := container.ParseCompression(req.Compression)
	if err != nil {
		return toStatus(fmt.Errorf("download container %d: %w", req.ContainerId, err))
	}
	d, export, err := s.exporter(req.ContainerId, int(req.ReplicaIndex), comp)
	if err != nil {
		return toStatus(err)
	}
	g := s.guard(ctx, fmt.Sprintf("download container %d", d.ID))
	defer g.stop()
	g.expect(d.Size())
	send := func(m *containerpb.TarChunk) error {
		err := g.send(func() error { return stream.Send(m) })
		if err == nil {
			s.sup.m.sent.Add(float64(len(m.Data)))
		}
		return err
	}
	w := newTarWriter(d.ID, &containerpb.TarChunk{Size: d.Size(), Compression: string(comp)}, send)
	if err := export(g.ctx, limit(g.ctx, s.lim, w)); err != nil {
		return toStatus(g.fail(err))
	}
	if err := w.Close(); err != nil {
		return toStatus(g.fail(err)) // cut, or the client went away
	}
	return nil
}

// Fetch imports a container from the first of the sources that delivers
// it. A failure of this node (the container is here already or being
// imported, no room, ctx) ends it; any other (the source unreachable,
// without the container, a stream cut off or corrupt, a tarball refused)
// moves on to the next source.
func (s *Server) Fetch(ctx context.Context, req *containerpb.FetchRequest) (*containerpb.ImportResponse, error) {
	id := req.ContainerId
	if id == 0 {
		return nil, toStatus(fmt.Errorf("fetch: no container id: %w", ErrInvalid))
	}
	if len(req.Sources) == 0 {
		return nil, toStatus(fmt.Errorf("fetch container %d: no source: %w", id, ErrInvalid))
	}
	comp, err := container.ParseCompression(req.Compression)
	if err != nil {
		return nil, toStatus(fmt.Errorf("fetch container %d: %w", id, err))
	}
	var failed []string
	var first error
	lasting := true // every source failed for good
	for _, src := range req.Sources {
		d, n, err := s.fetchFrom(ctx, src, id, int(req.ReplicaIndex), comp)
		if err == nil {
			if req.WaitScan {
				if d, err = s.store.WaitScan(ctx, id); err != nil {
					return nil, toStatus(err)
				}
			}
			return &containerpb.ImportResponse{Container: descToPB(d), Bytes: n, Source: src}, nil
		}
		if ctx.Err() != nil || localFailure(err) {
			return nil, toStatus(err)
		}
		failed = append(failed, fmt.Sprintf("%s: %v", src, err))
		if first == nil {
			first = err
		}
		lasting = lasting && (errors.Is(err, container.ErrNotFound) || errors.Is(err, container.ErrNotClosed) || errors.Is(err, ErrUnauthenticated))
	}
	cause := ErrUnavailable
	switch {
	// No source has the container to give, or will let this node in:
	// asking again will not help.
	case lasting && errors.Is(first, container.ErrNotFound):
		cause = container.ErrNotFound
	case lasting && errors.Is(first, ErrUnauthenticated):
		cause = ErrUnauthenticated
	case lasting:
		cause = container.ErrNotClosed
	}
	return nil, toStatus(fmt.Errorf("fetch container %d: no source delivered (%s): %w", id, strings.Join(failed, "; "), cause))
}

func (s *Server) fetchFrom(ctx context.Context, src string, id uint64, index int, comp container.Compression) (container.Descriptor, int64, error) {
	c, err := s.dial(ctx, src)
	if err != nil {
		return container.Descriptor{}, 0, err
	}
	defer c.Close()
	g := s.guard(ctx, fmt.Sprintf("download container %d from %s", id, src))
	defer g.stop()
	stream, err := c.rpc.Download(g.ctx, &containerpb.DownloadRequest{ContainerId: id, Compression: string(comp), ReplicaIndex: uint32(index)})
	if err != nil {
		return container.Descriptor{}, 0, fromStatus(err)
	}
	first, err := recv(g, stream.Recv)
	if err == io.EOF {
		err = fmt.Errorf("download container %d: empty stream: %w", id, io.ErrUnexpectedEOF)
	}
	if err != nil {
		return container.Descriptor{}, 0, g.fail(fromStatus(err))
	}
	if first.ContainerId != id {
		return container.Descriptor{}, 0, fmt.Errorf("download container %d: the source sent container %d: %w", id, first.ContainerId, ErrInvalid)
	}
	g.expect(first.Size)
	s.sup.m.received.Add(float64(len(first.Data)))
	r := newTarReader(first, func() (*containerpb.TarChunk, error) {
		m, err := recv(g, stream.Recv)
		if err != nil {
			return nil, fromStatus(err)
		}
		s.sup.m.received.Add(float64(len(m.Data)))
		return m, nil
	})
	d, n, err := s.importFrom(g.ctx, id, first.Size, comp, r)
	return d, n, g.fail(err)
}

// localFailure says whether an import failed because of this node rather
// than what a source sent: trying another source would not help.
func localFailure(err error) bool {
	return errors.Is(err, container.ErrExists) || errors.Is(err, container.ErrImporting) ||
		errors.Is(err, container.ErrNoSpace) || errors.Is(err, container.ErrClosed)
}
