// Package metricsrv is the HTTP server of the Prometheus metrics of
// replicad (serve --metrics, follow --metrics) and of the cmfs mount
// (mount --metrics), and of serve --http, which adds the
// status page beside /metrics: a listener opened first, so that an
// address in use fails before anything else is set up, then served until
// the command's context ends.
package metricsrv

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/cmfs-project/cmfs/internal/cli"
)

// Listen listens on addr (host:port) for the metrics server.
//
// Errors: "metrics: listen ADDR: REASON".
func Listen(addr string) (net.Listener, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: listen %s: %w", addr, cli.UnwrapOp(err))
	}
	return lis, nil
}

// Serve serves h at /metrics on lis until ctx ends, then shuts the
// server down, giving a scrape in flight a second; wg is done once it has.
// It returns the address served, lis's (the port picked for port 0).
func Serve(ctx context.Context, wg *sync.WaitGroup, lis net.Listener, h http.Handler) string {
	mux := http.NewServeMux()
	mux.Handle("/metrics", h)
	return ServeMux(ctx, wg, lis, mux)
}

// ServeMux is Serve of a whole mux: /metrics and whatever else the
// command serves beside it on one listener (serve --http: the status
// page).
func ServeMux(ctx context.Context, wg *sync.WaitGroup, lis net.Listener, mux *http.ServeMux) string {
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	wg.Add(1)
	go func() {
		defer wg.Done()
		hs.Serve(lis) // ends with Shutdown below
	}()
	context.AfterFunc(ctx, func() {
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		hs.Shutdown(sctx)
	})
	return lis.Addr().String()
}
