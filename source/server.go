package source

import (
	"github.com/cmfs-project/cmfs/repl"

	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/experimental"

	"github.com/cmfs-project/cmfs/api/replpb"
	"github.com/cmfs-project/cmfs/internal/auth"
	"github.com/cmfs-project/cmfs/internal/bufpool"
	"github.com/cmfs-project/cmfs/internal/grace"
	"github.com/cmfs-project/cmfs/internal/rpclog"
	"github.com/cmfs-project/cmfs/internal/statedir"
	"github.com/cmfs-project/cmfs/internal/tlsconfig"
	"github.com/cmfs-project/cmfs/internal/window"
)

// DefaultAddr is where `replicad serve` listens unless told otherwise.
const DefaultAddr = "127.0.0.1:9860"

// buffers is the gRPC buffer pool of the package's servers and clients:
// one that does not zero the megabytes of file data going through it.
var buffers = bufpool.New()

// Config says what a Server serves.
type Config struct {
	// Backing is the warehouse root: the directory the mount passes
	// through to. Files are served from it.
	Backing string
	// State is the mount's state directory (journal, control socket).
	// Default: Backing/.cmfs.
	State string
	// CMRoot is the mount's cmroot. Default: State/cmroot.
	CMRoot string
	// SourceID names the source in Status (and so in dumps). Default:
	// "<hostname>:<Backing>".
	SourceID string
	// Token is what every call to Serve's server must carry (the
	// client's WithToken; see internal/auth). Serve refuses to start
	// without one. A Server registered on another (Register) is behind
	// that server's checks instead.
	Token string
	// Logger is told, at debug, of every call Serve's server serves, and
	// of calls cut at the end of the grace period (warn). Default: none.
	Logger *slog.Logger
}

// Server is the Source service. It serves once: Serve or ListenAndServe.
type Server struct {
	replpb.UnimplementedSourceServer

	cfg  Config
	root *os.Root // the warehouse root; every live file is opened through it
	// denyRel are the state directories inside the warehouse root,
	// relative to it, and denyAbs the same as absolute, symlink-free paths.
	denyRel []string
	denyAbs []string
	srv     *grpc.Server
	// desc is the service as registered, every call counted in stats.
	desc  *grpc.ServiceDesc
	stats *counters

	// life ends when Serve stops, so following streams end with it
	// instead of holding the shutdown up.
	life context.Context
	end  context.CancelFunc
}

// NewServer checks cfg (Backing and State must be existing directories)
// and returns a server with the Source service registered.
func NewServer(cfg Config) (*Server, error) {
	if cfg.Backing == "" {
		return nil, fmt.Errorf("source: no warehouse root (Backing) given: %w", ErrInvalid)
	}
	backing, err := realDir("warehouse root", cfg.Backing)
	if err != nil {
		return nil, err
	}
	cfg.Backing = backing
	if cfg.State == "" {
		cfg.State = filepath.Join(backing, statedir.Name)
	}
	if cfg.State, err = realDir("state directory", cfg.State); err != nil {
		return nil, err
	}
	if cfg.CMRoot == "" {
		cfg.CMRoot = filepath.Join(cfg.State, statedir.CMRootDir)
	}
	if cfg.CMRoot, err = realPath(cfg.CMRoot); err != nil {
		return nil, err
	}
	if cfg.SourceID == "" {
		host, err := os.Hostname()
		if err != nil {
			host = "localhost"
		}
		cfg.SourceID = host + ":" + backing
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg}
	defaultState, err := realPath(filepath.Join(backing, statedir.Name))
	if err != nil {
		return nil, err
	}
	for _, d := range []string{defaultState, cfg.State, cfg.CMRoot} {
		rel, err := filepath.Rel(backing, d)
		if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
			continue // outside the root: os.Root keeps every request out
		}
		if rel == "." {
			return nil, fmt.Errorf("source: the state directory %s is the warehouse root: %w", d, ErrInvalid)
		}
		s.denyRel = append(s.denyRel, filepath.ToSlash(rel))
		s.denyAbs = append(s.denyAbs, d)
	}
	if s.root, err = os.OpenRoot(backing); err != nil {
		return nil, fmt.Errorf("source: open warehouse root: %w", err)
	}
	s.life, s.end = context.WithCancel(context.Background())
	opts := append(window.Server(), experimental.BufferPool(buffers))
	opts = append(opts, rpclog.ServerOptions(cfg.Logger)...)
	if cfg.Token != "" {
		opts = append(opts, auth.ServerOptions(cfg.Token)...)
	}
	s.srv = grpc.NewServer(opts...)
	s.desc = s.service()
	s.srv.RegisterService(s.desc, s)
	return s, nil
}

// Config returns the configuration with every default filled in.
func (s *Server) Config() Config { return s.cfg }

// RegisterService registers another service on the server's own gRPC
// server, behind the same token, for Serve and ListenAndServe (the health
// service serve's service manager probes): call it before Serve.
func (s *Server) RegisterService(desc *grpc.ServiceDesc, impl any) { s.srv.RegisterService(desc, impl) }

// realDir returns the absolute, symlink-free path of an existing directory.
func realDir(what, p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", fmt.Errorf("source: %s %s: %w", what, p, err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return "", fmt.Errorf("source: %s: %w", what, err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("source: %s %s is not a directory", what, p)
	}
	return filepath.EvalSymlinks(abs)
}

// realPath is realDir for a path that may not exist yet (cmroot before
// the first mount): its symlinks resolved as far as it exists.
func realPath(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", fmt.Errorf("source: %s: %w", p, err)
	}
	if r, err := filepath.EvalSymlinks(abs); err == nil {
		return r, nil
	}
	dir, err := realPath(filepath.Dir(abs))
	if err != nil || dir == filepath.Dir(abs) {
		return abs, nil
	}
	return filepath.Join(dir, filepath.Base(abs)), nil
}

// Serve serves on lis until ctx ends, then stops (following streams end,
// other calls get a few seconds to finish) and returns nil. It closes lis.
//
// Errors: ErrInvalid (wrapped) without Config.Token; the listener's.
func (s *Server) Serve(ctx context.Context, lis net.Listener) error {
	defer s.root.Close()
	defer s.end()
	if s.cfg.Token == "" {
		lis.Close()
		return fmt.Errorf("source: no token (Config.Token): every client must be authenticated: %w", ErrInvalid)
	}
	errc := make(chan error, 1)
	go func() { errc <- s.srv.Serve(lis) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve %s: %w", lis.Addr(), err)
	case <-ctx.Done():
	}
	s.end()
	if grace.Stop(s.srv, grace.Period) {
		s.cfg.Logger.Warn("source: calls still running after the grace period were cut", slog.Duration("grace", grace.Period))
	}
	<-errc
	return nil
}

// Register puts the Source service on reg, another gRPC server that
// shares its listener and credentials (a peer.Server), instead of Serve.
// When ctx ends, following Events streams end, so that the other server's
// graceful stop does not wait for them; call Close once it has stopped.
func (s *Server) Register(ctx context.Context, reg grpc.ServiceRegistrar) {
	reg.RegisterService(s.desc, s)
	context.AfterFunc(ctx, s.end)
}

// Close releases what a Server registered elsewhere (Register) holds.
// Serve and ListenAndServe close it themselves.
func (s *Server) Close() error {
	s.end()
	return s.root.Close()
}

// Journal returns the journal as the service reads it: through the mount's
// control socket while one answers, read-only otherwise, switching when a
// mount starts or stops (as Events streams do). It also has
// Wait(ctx, after) (uint64, error), which returns once an event after
// after exists (ingest.Waiter).
func (s *Server) Journal() repl.Events { return serverEvents{s} }

// ListenAndServe listens on addr, which must be a loopback address (it
// serves without TLS; a node serves this service over mutual TLS on its
// own listener), and serves until ctx ends.
//
// Errors: ErrInsecure (wrapped) for an address that is, or resolves to,
// anything but loopback; the listener's error.
func (s *Server) ListenAndServe(ctx context.Context, addr string) error {
	if err := checkLoopback(ctx, "listen on", addr); err != nil {
		s.root.Close()
		return err
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		s.root.Close()
		return fmt.Errorf("listen %s: %w", addr, err)
	}
	return s.Serve(ctx, lis)
}

// checkLoopback refuses an address that is not loopback; tlsconfig
// decides, for every service.
func checkLoopback(ctx context.Context, op, addr string) error {
	err := tlsconfig.CheckLoopback(ctx, op, addr)
	switch {
	case errors.Is(err, tlsconfig.ErrInsecure):
		return &insecureError{op: op, addr: addr}
	case errors.Is(err, tlsconfig.ErrAddress):
		return fmt.Errorf("%v: %w", err, ErrInvalid)
	}
	return err
}
