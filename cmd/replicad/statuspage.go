package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"

	"github.com/cmfs-project/cmfs/api/clusterpb"
	"github.com/cmfs-project/cmfs/cluster/coord"
	"github.com/cmfs-project/cmfs/container"
	"github.com/cmfs-project/cmfs/internal/cli"
	"github.com/cmfs-project/cmfs/internal/metricsrv"
	"github.com/cmfs-project/cmfs/internal/statedir"
	"github.com/cmfs-project/cmfs/peer"
	"github.com/cmfs-project/cmfs/source"
	"github.com/cmfs-project/cmfs/statuspage"
)

// serve --http: the status page (statuspage) and /metrics on one HTTP
// listener. --metrics stays what it was, /metrics alone, so that a
// scrape config keeps working; --http is the one address an operator
// needs, and serves the same metrics.

// listenHTTP listens for --http before anything else is set up, as
// --metrics does: an address in use fails first.
func listenHTTP(addr string) (net.Listener, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--http: listen %s: %w", addr, cli.UnwrapOp(err))
	}
	return lis, nil
}

// serveHTTP serves the page of cfg and metrics at /metrics on lis until
// ctx ends (under wg), and returns the words for the "listening on" line.
func serveHTTP(ctx context.Context, wg *sync.WaitGroup, lis net.Listener, cfg statuspage.Config, metrics http.Handler) string {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metrics)
	statuspage.New(cfg).Register(mux)
	return fmt.Sprintf("status http://%s/", metricsrv.ServeMux(ctx, wg, lis, mux))
}

// warehousePage is the warehouse part of the page of a source.
func warehousePage(src *source.Server, ingest bool) *statuspage.WarehouseConfig {
	cfg := src.Config()
	w := &statuspage.WarehouseConfig{Backing: cfg.Backing, State: cfg.State, Source: cfg.SourceID, Events: src.Journal(), Pins: src.Pins}
	if ingest {
		w.IngestCursor = filepath.Join(cfg.State, statedir.IngestCursorFile)
	}
	return w
}

// coordinatorText is how the page words a coordinator's error.
func coordinatorText(err error) string { return coord.FromStatus(err).Error() }

// localCoordinator adapts the coordinator this node runs (the gRPC
// service, called in process) to the page.
type localCoordinator struct{ svc *coord.Service }

func (l localCoordinator) Nodes(ctx context.Context, req *clusterpb.NodesRequest) (*clusterpb.NodesResponse, error) {
	return l.svc.Nodes(ctx, req)
}

func (l localCoordinator) Containers(ctx context.Context, req *clusterpb.ContainersRequest) (*clusterpb.ContainersResponse, error) {
	return l.svc.Containers(ctx, req)
}

func (l localCoordinator) Status(ctx context.Context, req *clusterpb.StatusRequest) (*clusterpb.StatusResponse, error) {
	return l.svc.Status(ctx, req)
}

// remoteCoordinator asks the coordinators a node joined, over gRPC with
// the node's own credentials, as its heartbeats do: the one that last
// answered first, then the others in order. A standby's refusal or an
// unreachable coordinator moves on to the next; the connection is kept
// between calls and closed when ctx ends.
type remoteCoordinator struct {
	node  *peer.Server
	addrs []string

	mu     sync.Mutex
	cur    int
	client *peer.Client
}

func newRemoteCoordinator(ctx context.Context, node *peer.Server, addrs []string) *remoteCoordinator {
	r := &remoteCoordinator{node: node, addrs: addrs}
	context.AfterFunc(ctx, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.client != nil {
			r.client.Close()
			r.client = nil
		}
	})
	return r
}

// call runs fn against the coordinators until one answers other than
// standing by or being away; the last error otherwise.
func (r *remoteCoordinator) call(ctx context.Context, fn func(c clusterpb.CoordinatorClient) error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var err error
	addr := ""
	for range r.addrs {
		addr = r.addrs[r.cur]
		if r.client == nil {
			if r.client, err = r.node.Dial(ctx, addr); err != nil {
				r.client = nil
				r.cur = (r.cur + 1) % len(r.addrs)
				continue
			}
		}
		err = fn(clusterpb.NewCoordinatorClient(r.client.Conn()))
		if e := coord.FromStatus(err); err == nil || !errors.Is(e, coord.ErrStandby) && !errors.Is(e, peer.ErrUnavailable) {
			return err
		}
		r.client.Close()
		r.client = nil
		r.cur = (r.cur + 1) % len(r.addrs)
	}
	return fmt.Errorf("%s: %w", addr, err)
}

func (r *remoteCoordinator) Nodes(ctx context.Context, req *clusterpb.NodesRequest) (resp *clusterpb.NodesResponse, err error) {
	err = r.call(ctx, func(c clusterpb.CoordinatorClient) error { resp, err = c.Nodes(ctx, req); return err })
	return resp, err
}

func (r *remoteCoordinator) Containers(ctx context.Context, req *clusterpb.ContainersRequest) (resp *clusterpb.ContainersResponse, err error) {
	err = r.call(ctx, func(c clusterpb.CoordinatorClient) error {
		resp, err = c.Containers(ctx, req, grpc.MaxCallRecvMsgSize(256<<20))
		return err
	})
	return resp, err
}

func (r *remoteCoordinator) Status(ctx context.Context, req *clusterpb.StatusRequest) (resp *clusterpb.StatusResponse, err error) {
	err = r.call(ctx, func(c clusterpb.CoordinatorClient) error { resp, err = c.Status(ctx, req); return err })
	return resp, err
}

// nodePage is the page of a node serving gRPC on addr: its containers
// and queue, the warehouse it serves (src; nil: none) and the cluster it
// is part of.
func nodePage(ctx context.Context, opts serveOptions, addr string, node *peer.Server, store *container.Store, src *source.Server, role clusterRole) statuspage.Config {
	cfg := statuspage.Config{NodeID: node.Config().NodeID, Rack: opts.rack, Addr: addr, Containers: store, Queue: node.Supervisor()}
	if src != nil {
		cfg.Warehouse = warehousePage(src, opts.ingest)
	}
	if opts.coordinator || len(role.join) > 0 {
		c := &statuspage.ClusterConfig{Coordinator: opts.coordinator, Join: role.join, ErrorText: coordinatorText}
		if role.local != nil {
			c.Client = localCoordinator{role.local}
		} else {
			c.Client = newRemoteCoordinator(ctx, node, role.join)
		}
		cfg.Cluster = c
	}
	return cfg
}

// sourceMetrics are the metrics of a source alone (no --volume): its
// slots and what it served, the Go runtime's and the process's, as
// --metrics serves them.
func sourceMetrics(src *source.Server) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(sourceCollectors(src)...)
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
}
