package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/cmfs-project/cmfs/internal/auth"
	"github.com/cmfs-project/cmfs/internal/systemd"
	"github.com/cmfs-project/cmfs/internal/tlsconfig"
)

// The daemons under a service manager (Type=notify): notifyService says
// READY=1, STATUS=, WATCHDOG=1 and STOPPING=1 for serve and follow alike,
// from what each says of itself (service; follow's is in cmd_follow.go).
//
// serve (replicad.service): the server registers the standard gRPC
// health service beside its own, and what proves it up and alive is a
// health check made the way a client makes one — a new connection to its
// own listener, with its own credential (the token, or its certificate),
// through the same interceptors and handlers every call passes. READY=1
// follows the first that succeeds; with WatchdogSec=, WATCHDOG=1 follows
// each later one. A server whose accept loop, handshakes or handlers are
// stuck stops pinging, and the manager restarts it.

// readyRetry is the pause between health checks until the first succeeds.
const readyRetry = 50 * time.Millisecond

// readyWarn is how long the first health check may keep failing before
// each failure is logged at warn.
const readyWarn = 5 * time.Second

// registerHealth puts the health service on reg, serving.
func registerHealth(reg grpc.ServiceRegistrar) *health.Server {
	hs := health.NewServer()
	healthpb.RegisterHealthServer(reg, hs)
	return hs
}

// selfProbe returns a health check of the server listening at addr, made
// with the server's own credential: its certificate with tc (the server
// name checked is one its certificate carries, whatever address it
// listens at), else the token.
func selfProbe(addr net.Addr, tc tlsconfig.Config, token string) (systemd.Probe, error) {
	target := loopbackAddr(addr)
	creds := insecure.NewCredentials()
	var perRPC []grpc.DialOption
	if tc.Enabled() {
		cfg, err := tlsconfig.Client(tc)
		if err != nil {
			return nil, err
		}
		leaf := cfg.Certificates[0].Leaf
		switch {
		case leaf != nil && len(leaf.DNSNames) > 0:
			cfg.ServerName = leaf.DNSNames[0]
		case leaf != nil && len(leaf.IPAddresses) > 0:
			cfg.ServerName = leaf.IPAddresses[0].String()
		default:
			return nil, fmt.Errorf("certificate %s names no DNS or IP address: the service manager's health check of this node has no name to verify", tc.Cert)
		}
		creds = credentials.NewTLS(cfg)
	} else {
		perRPC = append(perRPC, grpc.WithPerRPCCredentials(auth.Credentials(token)))
	}
	opts := append([]grpc.DialOption{grpc.WithTransportCredentials(creds)}, perRPC...)
	return func(ctx context.Context) error {
		conn, err := grpc.NewClient("passthrough:///"+target, opts...)
		if err != nil {
			return fmt.Errorf("health check of %s: %w", target, err)
		}
		defer conn.Close()
		// WaitForReady: a connection still being made is waited for, up
		// to the probe's deadline, rather than failed at once.
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
		switch {
		case err != nil && tc.Enabled():
			return fmt.Errorf("health check of %s with this node's own certificate (with --tls-allow, list its own name): %w", target, err)
		case err != nil:
			return fmt.Errorf("health check of %s: %w", target, err)
		case resp.GetStatus() != healthpb.HealthCheckResponse_SERVING:
			return fmt.Errorf("health check of %s: %s", target, resp.GetStatus())
		}
		return nil
	}, nil
}

// loopbackAddr is addr with an unspecified IP (a wildcard listener)
// replaced by loopback: where this host reaches it.
func loopbackAddr(addr net.Addr) string {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok || !tcp.IP.IsUnspecified() {
		return addr.String()
	}
	ip := net.IPv4(127, 0, 0, 1)
	if tcp.IP.To4() == nil {
		ip = net.IPv6loopback
	}
	return (&net.TCPAddr{IP: ip, Port: tcp.Port}).String()
}

// service is what notifyService tells the service manager about a
// daemon.
type service struct {
	// ready waits until the daemon does what it is for (true) or ctx
	// ends (false).
	ready func(ctx context.Context) bool
	// status is the STATUS= line: sent with READY=1, and again, before
	// READY=1 too, at each signal of changed (nil: never).
	status  func() string
	changed <-chan struct{}
	// alive proves the daemon alive: once it is ready, for WATCHDOG=1;
	// before, with extend, for EXTEND_TIMEOUT_USEC= (a start as long as
	// it stays alive).
	alive  systemd.Probe
	extend bool
	// stop, if not nil, runs when ctx ends, before STOPPING=1 with
	// stopping as its status.
	stop     func()
	stopping string
}

// notifyService tells the service manager, if one listens, how a daemon
// is doing until ctx ends: READY=1 (with status) once svc is ready,
// WATCHDOG=1 after each later success of its alive probe when the
// watchdog is on, its status as it changes, STOPPING=1 when ctx ends. A
// daemon that ends before it is ready never says READY=1. It runs under
// wg; without a manager it starts nothing.
func notifyService(ctx context.Context, wg *sync.WaitGroup, svc service, log *slog.Logger) {
	if !systemd.Enabled() {
		return
	}
	warn := func(err error) {
		if err != nil {
			log.Warn("service manager", slog.Any("err", err))
		}
	}
	if svc.changed != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-ctx.Done():
					return
				case <-svc.changed:
					warn(systemd.Status(svc.status()))
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer func() {
			if svc.stop != nil {
				svc.stop()
			}
			warn(systemd.Stopping(svc.stopping))
		}()
		if !waitReady(ctx, svc, log) {
			return
		}
		warn(systemd.Ready(svc.status()))
		warn(systemd.Watchdog(ctx, svc.alive, log))
		<-ctx.Done()
	}()
}

// waitReady waits for svc to be ready (true) or ctx to end (false),
// extending the start meanwhile if svc says so.
func waitReady(ctx context.Context, svc service, log *slog.Logger) bool {
	if !svc.extend {
		return svc.ready(ctx)
	}
	ectx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := systemd.ExtendStart(ectx, svc.alive, log); err != nil {
			log.Warn("service manager", slog.Any("err", err))
		}
	}()
	defer func() { cancel(); <-done }()
	return svc.ready(ctx)
}

// serveService is serve as notifyService tells of it: ready and alive
// when probe, the health check of its own listener, succeeds; status its
// "listening on" line; at the stop, hs turns NOT_SERVING.
func serveService(probe systemd.Probe, hs *health.Server, status string, log *slog.Logger) service {
	return service{
		ready:    func(ctx context.Context) bool { return waitHealthy(ctx, probe, log) },
		status:   func() string { return status },
		alive:    probe,
		stop:     hs.Shutdown,
		stopping: "stopping: finishing calls in progress",
	}
}

// waitHealthy runs probe until it succeeds (true) or ctx ends (false).
func waitHealthy(ctx context.Context, probe systemd.Probe, log *slog.Logger) bool {
	warned := time.Now()
	for {
		pctx, cancel := context.WithTimeout(ctx, readyWarn)
		err := probe(pctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return false
		case err == nil:
			return true
		case time.Since(warned) >= readyWarn:
			log.Warn("not ready: the health check of this server's own listener fails", slog.Any("err", err))
			warned = time.Now()
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(readyRetry):
		}
	}
}
