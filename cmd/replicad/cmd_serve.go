package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/cmfs-project/cmfs/cluster"
	"github.com/cmfs-project/cmfs/cluster/coord"
	"github.com/cmfs-project/cmfs/container"
	"github.com/cmfs-project/cmfs/ingest"
	"github.com/cmfs-project/cmfs/internal/auth"
	"github.com/cmfs-project/cmfs/internal/cli"
	"github.com/cmfs-project/cmfs/internal/metricsrv"
	"github.com/cmfs-project/cmfs/internal/statedir"
	"github.com/cmfs-project/cmfs/internal/tlsconfig"
	"github.com/cmfs-project/cmfs/peer"
	"github.com/cmfs-project/cmfs/repl"
	"github.com/cmfs-project/cmfs/source"
	"github.com/cmfs-project/cmfs/statuspage"
)

type serveOptions struct {
	state   string
	backing string
	listen  string

	// The node: its containers and their replication.
	nodeID        string
	rack          string
	volumes       []string
	containerSize cli.ByteSize
	push          bool
	creds         credFlags
	bandwidth     cli.ByteRate
	concurrency   int
	metrics       string
	http          string
	ingest        bool
	ingestIdle    time.Duration
	ingestRepl    string
	advertise     string
	streamIdle    time.Duration
	streamDead    time.Duration
	streamRate    cli.ByteRate
	log           cli.LogFlags

	// The cluster: a coordinator, and the nodes that join it.
	coordinator  bool
	join         []string
	heartbeat    time.Duration
	staleAfter   time.Duration
	deadAfter    time.Duration
	rmInterval   time.Duration
	maintRedund  int
	clusterStore string
	cmdTimeout   time.Duration
	leaderLease  time.Duration

	// changed says whether a flag was given (nil: none was).
	changed func(name string) bool
}

// ingestPoll bounds how long serve --ingest waits between looks at the
// journal: it follows the journal (the mount's event stream, or the
// journal file's own 50 ms poll when unmounted), so this only matters
// when neither can tell.
const ingestPoll = 10 * time.Second

func newServeCmd(g *globalOptions) *cobra.Command {
	opts := serveOptions{containerSize: container.DefaultContainerSize, streamRate: peer.DefaultStreamMinRate}
	cmd := &cobra.Command{
		Use:   "serve [--state DIR] [--listen ADDR] [--node-id ID --volume DIR...] [flags]",
		Short: "Serve a warehouse's files and journal, and a node's containers",
		Long: `Serve over gRPC, on one listener:

  - with --state (or --backing), the files and journal of a cmfs-protected
    warehouse, for 'replicad load --source' and 'replicad follow' at a
    destination. A file is streamed from the live tree while it holds the
    content asked for, else from cmroot; the journal is read through the
    mount's control socket while it is mounted, read-only otherwise. The
    backing directory and cmroot come from STATE/mount.json, written by
    every cmfs mount, or --backing DIR (state BACKING/.cmfs unless --state).
  - with --volume, this node's containers (the 'replicad container'
    commands) and their replication to and from peers: push by default,
    pull with --push=false (the target downloads from this node when a
    replicate names no --mode).

--ingest (needs --state and --volume) writes the files journal events add,
and the originals they preserve, into the open container as the events are
journaled (it follows the journal, as an events stream does), and remembers
the last event ingested in STATE/` + statedir.IngestCursorFile + ` so that a restart
resumes. A container closes at --container-size, or after --ingest-idle
without a new file. Its replication is --ingest-replication (default
replica:3): with --join, the coordinator copies every container that
closes to as many nodes, so the warehouse's history outlives this host
('replicad load --cluster' fetches it from them).

--advertise ADDR is the address peers dial this node at: the one a target
downloads from in pull mode. By default it is the --listen address, which
will not do when peers reach the node through a forwarder or NAT, or
with a wildcard --listen.

--coordinator makes this node the cluster's coordinator as well: it keeps
the cluster's nodes, containers, replicas and pending commands in
--cluster-store (default: VOLUME/cluster.db of the first --volume), marks a
node STALE after --stale-after and DEAD after --dead-after without a
heartbeat, and every --rm-interval sends the commands that bring every
CLOSED container to its replication (copies on as many racks as it can
use), in push mode or, with --push=false, pull mode. --join ADDR[,ADDR...]
makes the node heartbeat to the coordinator(s) every --heartbeat and carry
out their commands; a coordinator without --join heartbeats to itself.
'replicad admin' reads and changes the cluster.

With --cluster-store etcd://HOST:PORT[,HOST:PORT...] the cluster is kept
in etcd, and several nodes may be --coordinator: one leads (an etcd
election, on a lease of --leader-lease), the others stand by, send their
callers to the leader, and one of them takes over when the leader's lease
ends. Give every node all the coordinators in --join.

A stream this node serves or reads (push, put, download, get, a pull's
download) is cut when its peer sends or takes nothing for
--stream-idle-timeout, or is not done within --stream-deadline or its
size at --stream-min-rate, whichever is longer. A cut import leaves
nothing behind and frees the room it had reserved; a cut push is retried.

Every client must be authenticated. With --tls-cert, --tls-key and
--tls-ca the node speaks mutual TLS 1.3 to clients and peers, and the
certificate is the credential (--tls-allow narrows the peers to some
names). Without, it serves, and dials, loopback addresses only, and a
client must send the token in --token-file (default STATE/` + auth.FileName + `, or
VOLUME/` + auth.FileName + ` of the first --volume without a warehouse; created
when missing, mode 0600; refused unless only the serving account can read
it): a local user who cannot read the file cannot connect. The node dials
its peers with its own token, so nodes on one host share one
--token-file. --metrics ADDR
serves Prometheus metrics on http://ADDR/metrics: the warehouse's
replication slots (replicad_slot_*: each destination's position, lag in
events, and the cmroot entries and bytes it pins) and what the source
served (replicad_source_*: calls by method and result, events, files and
bytes sent); with --volume, the container replication metrics
(replicad_replication_*) and the volumes' (replicad_volume_*: containers
by state, used and free bytes); with --coordinator, the cluster's
(replicad_cluster_*: nodes by health and operational state, containers
by class, commands issued), while it leads. docs/metrics.md lists them.

--http ADDR serves a live status page on http://ADDR/ (it refreshes itself
every second), the JSON it reads on http://ADDR/status.json, and the same
metrics on http://ADDR/metrics: the warehouse's newest events, how far
each destination (replication slot) and --ingest lag behind, the node's
containers by state and its replication queue, and with --coordinator or
--join the cluster's nodes and containers by class. Like --metrics it is
not authenticated: give an address only those who may see the
warehouse's paths can reach.

Once it listens it prints "listening on ADDR (...)" (the actual address:
with port 0, the one picked; the token file clients give) and serves until SIGINT or SIGTERM, then
closes the open container and exits 0.

Beside its own services it serves the standard gRPC health service, behind
the same credentials. Under systemd (Type=notify: NOTIFY_SOCKET set) it
reports READY=1 once a health check through its own listener, made with
its own credential, succeeds (with --tls-allow, list the node's own name),
WATCHDOG=1 after each later check with WatchdogSec=, and STOPPING=1 as it
stops.`,
		Example: `  replicad serve --state /data/warehouse/.cmfs
  replicad serve --backing /data/warehouse --listen 127.0.0.1:9860
  replicad serve --listen 127.0.0.1:9870 --node-id dn1 --volume /disk1/replicad --volume /disk2/replicad
  replicad serve --state /data/warehouse/.cmfs --listen 127.0.0.1:9870 --node-id dn1 --volume /disk1/replicad --ingest --container-size 1GiB
  replicad serve --listen dn1.example.com:9870 --node-id dn1 --rack r1 --volume /disk1/replicad \
      --tls-cert dn1.pem --tls-key dn1-key.pem --tls-ca ca.pem --replication-bandwidth 100MiB/s --metrics :9871`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.changed = cmd.Flags().Changed
			return runServe(cmd.Context(), g, opts, args)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.state, "state", "", "the mount's state `DIR` (default: BACKING/.cmfs)")
	f.StringVar(&opts.backing, "backing", "", "the warehouse root `DIR` (default: from STATE/mount.json)")
	f.StringVar(&opts.listen, "listen", source.DefaultAddr, "`ADDR` to listen on (loopback only without TLS)")
	f.StringVar(&opts.nodeID, "node-id", "", "this node's `ID` in metrics (default: the host name)")
	f.StringVar(&opts.rack, "rack", "", "this node's rack `NAME`")
	f.StringArrayVar(&opts.volumes, "volume", nil, "a `DIR` to keep containers in (created if missing; repeat for more)")
	f.Var(&opts.containerSize, "container-size", "close the open container at this `SIZE` of data (64MiB, 5GiB, ...)")
	f.BoolVar(&opts.push, "push", true, "replicate in push mode when a replicate names no --mode (false: the target pulls)")
	opts.creds.register(f, "node's", "STATE/"+auth.FileName+", or VOLUME/"+auth.FileName+" of the first --volume without a warehouse")
	f.Var(&opts.bandwidth, "replication-bandwidth", "cap what this node sends to peers at `N/s` bytes (100MiB/s; default: no cap)")
	f.IntVar(&opts.concurrency, "replication-concurrency", peer.DefaultConcurrency, "replications this node runs at once (doubled while decommissioning)")
	f.StringVar(&opts.metrics, "metrics", "", "serve Prometheus metrics on `ADDR` (default: off)")
	f.StringVar(&opts.http, "http", "", "serve the status page, /status.json and /metrics on `ADDR` (default: off)")
	f.BoolVar(&opts.ingest, "ingest", false, "write the files the journal's events add or preserve into the open container")
	f.DurationVar(&opts.ingestIdle, "ingest-idle", time.Minute, "with --ingest, close the open container after this long without a new file (0: never)")
	f.StringVar(&opts.ingestRepl, "ingest-replication", container.DefaultReplication, "with --ingest, the replication (replica:N) of the containers ingest fills")
	f.StringVar(&opts.advertise, "advertise", "", "`ADDR` (host:port) peers reach this node at, which a target downloads from in pull mode (default: the --listen address)")
	f.DurationVar(&opts.streamIdle, "stream-idle-timeout", peer.DefaultStreamIdleTimeout, "cut a stream (push, put, download, get) whose peer sends or takes nothing for this long")
	f.DurationVar(&opts.streamDead, "stream-deadline", peer.DefaultStreamDeadline, "cut a stream not done within this long, or its size at --stream-min-rate if that is longer")
	f.Var(&opts.streamRate, "stream-min-rate", "the slowest `N/s` a stream's deadline allows for its size (see --stream-deadline)")
	f.BoolVar(&opts.coordinator, "coordinator", false, "be the cluster's coordinator too (see 'replicad admin')")
	f.StringSliceVar(&opts.join, "join", nil, "heartbeat to the coordinator at `ADDR[,ADDR...]` and run its commands")
	f.DurationVar(&opts.heartbeat, "heartbeat", coord.DefaultHeartbeat, "with --join or --coordinator, the time between heartbeats")
	f.DurationVar(&opts.staleAfter, "stale-after", coord.DefaultStaleAfter, "with --coordinator, a node without a heartbeat for this long is STALE")
	f.DurationVar(&opts.deadAfter, "dead-after", coord.DefaultDeadAfter, "with --coordinator, a node without a heartbeat for this long is DEAD (its replicas are copied again)")
	f.DurationVar(&opts.rmInterval, "rm-interval", coord.DefaultRMInterval, "with --coordinator, the time between replication manager cycles")
	f.IntVar(&opts.maintRedund, "maintenance-remaining-redundancy", cluster.DefaultMaintenanceRemainingRedundancy, "with --coordinator, copies beyond one that stay in service while others are in maintenance")
	f.StringVar(&opts.clusterStore, "cluster-store", "", "with --coordinator, the cluster state `FILE` (default: VOLUME/cluster.db of the first --volume), or etcd://HOST:PORT[,HOST:PORT...]")
	f.DurationVar(&opts.leaderLease, "leader-lease", defaultLeaderLease, "with --cluster-store etcd://..., how long a dead leader keeps leading (whole seconds)")
	f.DurationVar(&opts.cmdTimeout, "command-timeout", cluster.DefaultTimeout, "with --coordinator, how long a replicate or delete may take before it is sent again")
	opts.log.Register(f)
	return cmd
}

// nodeFlags are the flags that configure the container service.
var nodeFlags = []string{"node-id", "rack", "container-size", "push", "tls-cert", "tls-key", "tls-ca", "tls-allow",
	"replication-bandwidth", "replication-concurrency", "ingest", "ingest-idle", "ingest-replication",
	"advertise", "stream-idle-timeout", "stream-deadline", "stream-min-rate",
	"coordinator", "join", "heartbeat", "stale-after", "dead-after", "rm-interval",
	"maintenance-remaining-redundancy", "cluster-store", "command-timeout", "leader-lease"}

// coordinatorFlags are the coordinator's settings.
var coordinatorFlags = []string{"stale-after", "dead-after", "rm-interval", "maintenance-remaining-redundancy", "cluster-store", "command-timeout", "leader-lease"}

func runServe(ctx context.Context, g *globalOptions, opts serveOptions, _ []string) error {
	changed := opts.changed
	if changed == nil {
		changed = func(string) bool { return false }
	}
	warehouse := opts.state != "" || opts.backing != ""
	if opts.http != "" && opts.http == opts.metrics {
		return fmt.Errorf("--http %s serves /metrics too: give --http or --metrics, not both", opts.http)
	}
	if !warehouse && len(opts.volumes) == 0 {
		return errors.New("what to serve? give --state DIR (a warehouse's files and journal) or --volume DIR (containers)")
	}
	if len(opts.volumes) == 0 {
		for _, name := range nodeFlags {
			if changed(name) {
				return fmt.Errorf("--%s is a setting of the container service: give --volume DIR too", name)
			}
		}
		return serveSource(ctx, g, opts)
	}
	switch {
	case opts.ingest && !warehouse:
		return errors.New("--ingest needs --state DIR: the warehouse whose journal to ingest")
	case changed("ingest-idle") && !opts.ingest:
		return errors.New("--ingest-idle needs --ingest")
	case changed("ingest-replication") && !opts.ingest:
		return errors.New("--ingest-replication needs --ingest")
	case container.ValidateReplication(opts.ingestRepl) != nil:
		return fmt.Errorf("--ingest-%w", container.ValidateReplication(opts.ingestRepl))
	case opts.containerSize <= 0:
		return fmt.Errorf("--container-size %d must be positive", opts.containerSize)
	case opts.concurrency <= 0:
		return fmt.Errorf("--replication-concurrency %d must be positive", opts.concurrency)
	case opts.ingestIdle < 0:
		return fmt.Errorf("--ingest-idle %s must not be negative", opts.ingestIdle)
	case opts.advertise != "" && !hostPort(opts.advertise):
		return fmt.Errorf("--advertise %q: want HOST:PORT, the address peers dial this node at", opts.advertise)
	case opts.streamIdle <= 0:
		return fmt.Errorf("--stream-idle-timeout %s must be positive", opts.streamIdle)
	case opts.streamDead <= 0:
		return fmt.Errorf("--stream-deadline %s must be positive", opts.streamDead)
	case opts.streamRate <= 0:
		return fmt.Errorf("--stream-min-rate %s must be positive", &opts.streamRate)
	case changed("heartbeat") && !opts.coordinator && len(opts.join) == 0:
		return errors.New("--heartbeat needs --join ADDR or --coordinator")
	case opts.heartbeat <= 0:
		return fmt.Errorf("--heartbeat %s must be positive", opts.heartbeat)
	case opts.staleAfter <= 0 || opts.deadAfter <= opts.staleAfter:
		return fmt.Errorf("--stale-after %s and --dead-after %s: want 0 < stale-after < dead-after", opts.staleAfter, opts.deadAfter)
	case opts.rmInterval <= 0:
		return fmt.Errorf("--rm-interval %s must be positive", opts.rmInterval)
	case opts.maintRedund < 0:
		return fmt.Errorf("--maintenance-remaining-redundancy %d must not be negative", opts.maintRedund)
	case opts.cmdTimeout <= 0:
		return fmt.Errorf("--command-timeout %s must be positive", opts.cmdTimeout)
	}
	for _, a := range opts.join {
		if !hostPort(a) {
			return fmt.Errorf("--join %q: want HOST:PORT of a coordinator", a)
		}
	}
	endpoints, isEtcd := etcdEndpoints(opts.clusterStore)
	for _, a := range endpoints {
		if !hostPort(a) {
			return fmt.Errorf("--cluster-store %q: want etcd://HOST:PORT[,HOST:PORT...]", opts.clusterStore)
		}
	}
	switch {
	case isEtcd && len(endpoints) == 0:
		return fmt.Errorf("--cluster-store %q: want etcd://HOST:PORT[,HOST:PORT...]", opts.clusterStore)
	case changed("leader-lease") && !isEtcd:
		return errors.New("--leader-lease needs --cluster-store etcd://...: only etcd elects a leader")
	case opts.leaderLease < time.Second || opts.leaderLease%time.Second != 0:
		return fmt.Errorf("--leader-lease %s: want whole seconds, at least 1s", opts.leaderLease)
	}
	if !opts.coordinator {
		for _, name := range coordinatorFlags {
			if changed(name) {
				return fmt.Errorf("--%s is a setting of the coordinator: give --coordinator too", name)
			}
		}
	}
	return serveNode(ctx, g, opts)
}

// serveSource serves the Source service alone, on its own gRPC server.
func serveSource(ctx context.Context, g *globalOptions, opts serveOptions) error {
	m, err := resolveMount(opts.state, opts.backing)
	if err != nil {
		return err
	}
	token, tokenFile, err := opts.creds.serverToken(filepath.Join(m.state, auth.FileName))
	if err != nil {
		return err
	}
	logger := opts.log.Logger(g.stderr)
	srv, err := source.NewServer(source.Config{Backing: m.backing, State: m.state, CMRoot: m.cmroot, Token: token, Logger: logger})
	if err != nil {
		return err
	}
	hs := registerHealth(srv)
	// source decides what is loopback: Dial refuses the same addresses
	// ListenAndServe does, without connecting. A refused address goes
	// through ListenAndServe for its message; an allowed one is listened
	// on here, so that the address is known (port 0) and announced only
	// once connections are accepted.
	if c, err := source.Dial(ctx, opts.listen); err != nil {
		if errors.Is(err, source.ErrInsecure) {
			return srv.ListenAndServe(ctx, opts.listen)
		}
		return fmt.Errorf("listen %s: %w", opts.listen, err)
	} else {
		c.Close()
	}
	lis, err := net.Listen("tcp", opts.listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", opts.listen, cli.UnwrapOp(err))
	}
	cfg := srv.Config()
	// What serves beside the source (metrics, the page, notify) stops
	// with it: cancel, then wait.
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	metrics := ""
	if opts.metrics != "" {
		mlis, err := metricsrv.Listen(opts.metrics)
		if err != nil {
			lis.Close()
			return err
		}
		metrics = fmt.Sprintf(", metrics http://%s/metrics", metricsrv.Serve(ctx, &wg, mlis, sourceMetrics(srv)))
	}
	if opts.http != "" {
		hlis, err := listenHTTP(opts.http)
		if err != nil {
			lis.Close()
			return err
		}
		page := statuspage.Config{Addr: lis.Addr().String(), Warehouse: warehousePage(srv, false)}
		metrics += ", " + serveHTTP(ctx, &wg, hlis, page, sourceMetrics(srv))
	}
	listening := fmt.Sprintf("listening on %s (warehouse %s, state %s, source %s, token %s%s)", lis.Addr(), cfg.Backing, cfg.State, cfg.SourceID, tokenFile, metrics)
	fmt.Fprintln(g.stdout, listening)
	probe, err := selfProbe(lis.Addr(), tlsconfig.Config{}, token)
	if err != nil {
		lis.Close()
		return err
	}
	notifyService(ctx, &wg, serveService(probe, hs, listening, logger), logger)
	return srv.Serve(ctx, lis)
}

// serveNode serves the Container service over the volumes and, with a
// warehouse, the Source service on the same listener.
func serveNode(ctx context.Context, g *globalOptions, opts serveOptions) (err error) {
	tc := opts.creds.config()
	if tc.Enabled() {
		// Checked before anything is opened, for a clear message.
		if _, err := tlsconfig.Server(tc); err != nil {
			return err
		}
	} else if err := tlsconfig.CheckLoopback(ctx, "listen on", opts.listen); err != nil {
		return err
	} else if opts.advertise != "" {
		if err := tlsconfig.CheckLoopback(ctx, "advertise", opts.advertise); err != nil {
			return err
		}
	}
	var m mount
	if opts.state != "" || opts.backing != "" {
		if m, err = resolveMount(opts.state, opts.backing); err != nil {
			return err
		}
	}
	nodeID := opts.nodeID
	if nodeID == "" {
		if nodeID, err = os.Hostname(); err != nil {
			return fmt.Errorf("--node-id not given and no host name: %w", err)
		}
	}
	// Listen first: an address in use fails before a volume is created.
	lis, err := net.Listen("tcp", opts.listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", opts.listen, cli.UnwrapOp(err))
	}
	defer lis.Close() // Serve closes it; this is for the failures before
	var mlis net.Listener
	if opts.metrics != "" {
		if mlis, err = metricsrv.Listen(opts.metrics); err != nil {
			return err
		}
		defer mlis.Close()
	}
	var hlis net.Listener
	if opts.http != "" {
		if hlis, err = listenHTTP(opts.http); err != nil {
			return err
		}
		defer hlis.Close()
	}
	logger := opts.log.Logger(g.stderr)
	volumes := make([]string, len(opts.volumes))
	for i, v := range opts.volumes {
		// Created if missing, but not its parents: a mistyped path fails.
		if volumes[i], err = makeDirectory("volume", v); err != nil {
			return err
		}
	}
	tokenDir := volumes[0]
	if m.state != "" {
		tokenDir = m.state
	}
	token, tokenFile, err := opts.creds.serverToken(filepath.Join(tokenDir, auth.FileName))
	if err != nil {
		return err
	}
	store, err := container.OpenStore(volumes, container.Options{ContainerSize: int64(opts.containerSize)})
	if err != nil {
		return err
	}
	defer func() {
		// Closes the open container, so that the next start need not
		// recover it.
		if cerr := store.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("close the container store: %w", cerr)
		}
	}()
	node, err := peer.NewServer(store, peer.Config{
		NodeID:      nodeID,
		Rack:        opts.rack,
		TLS:         tc,
		Token:       token,
		Bandwidth:   int64(opts.bandwidth),
		Concurrency: opts.concurrency,
		Pull:        !opts.push,
		Addr:        opts.advertise,

		StreamIdleTimeout: opts.streamIdle,
		StreamDeadline:    opts.streamDead,
		StreamMinRate:     int64(opts.streamRate),
		Logger:            logger,
	})
	if err != nil {
		return err
	}
	hs := registerHealth(node)
	if err := node.Supervisor().Register(newVolumeCollector(store, node.Supervisor().Labels())); err != nil {
		return err
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait() // before the store closes (deferred earlier, runs later)

	var src *source.Server
	if m.backing != "" {
		if src, err = source.NewServer(source.Config{Backing: m.backing, State: m.state, CMRoot: m.cmroot, Logger: logger}); err != nil {
			return err
		}
		defer src.Close()
		src.Register(ctx, node)
		for _, c := range sourceCollectors(src) {
			if err := node.Supervisor().Register(c); err != nil {
				return err
			}
		}
	}
	var feed *ingest.Feed
	if opts.ingest {
		feed, err = ingest.New(ingest.Config{
			Store:       store,
			Events:      src.Journal(),
			Fetcher:     &repl.LocalFetcher{Root: m.backing, CMRoot: m.cmroot, Events: src.Journal()},
			Cursor:      filepath.Join(m.state, statedir.IngestCursorFile),
			Idle:        opts.ingestIdle,
			Replication: opts.ingestRepl,
			Logger:      logger,
		})
		if err != nil {
			return err
		}
	}

	desc := []string{fmt.Sprintf("node %s", nodeID)}
	if opts.rack != "" {
		desc = append(desc, "rack "+opts.rack)
	}
	desc = append(desc, "volumes "+strings.Join(volumes, ", "))
	if src != nil {
		cfg := src.Config()
		desc = append(desc, fmt.Sprintf("warehouse %s, state %s, source %s", cfg.Backing, cfg.State, cfg.SourceID))
	}
	if feed != nil {
		desc = append(desc, fmt.Sprintf("ingesting after event %d", feed.Last()))
	}
	if !opts.push {
		desc = append(desc, "pull")
	}
	if opts.advertise != "" {
		desc = append(desc, "advertised as "+opts.advertise)
	}
	if tokenFile != "" {
		desc = append(desc, "token "+tokenFile)
	} else {
		desc = append(desc, "mTLS")
	}
	if mlis != nil {
		desc = append(desc, fmt.Sprintf("metrics http://%s/metrics", metricsrv.Serve(ctx, &wg, mlis, node.Metrics())))
	}
	if feed != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			feed.Run(ctx, ingestPoll) // reports through the logger; nil when ctx ends
		}()
	}
	var role clusterRole
	if opts.coordinator || len(opts.join) > 0 {
		if role, err = startCluster(ctx, g, opts, node, store, volumes[0], lis.Addr().String(), nodeID, &wg); err != nil {
			return err
		}
		desc = append(desc, role.desc)
	}
	if hlis != nil {
		desc = append(desc, serveHTTP(ctx, &wg, hlis, nodePage(ctx, opts, lis.Addr().String(), node, store, src, role), node.Metrics()))
	}
	listening := fmt.Sprintf("listening on %s (%s)", lis.Addr(), strings.Join(desc, "; "))
	fmt.Fprintln(g.stdout, listening)
	if !tc.Enabled() {
		logger.Warn("no TLS (--tls-cert, --tls-key, --tls-ca): serving and dialing loopback addresses only, to clients that give --token-file",
			slog.String("token_file", tokenFile))
	}
	probe, err := selfProbe(lis.Addr(), tc, token)
	if err != nil {
		return err
	}
	notifyService(ctx, &wg, serveService(probe, hs, listening, logger), logger)
	err = node.Serve(ctx, lis)
	cancel()
	return err
}

// hostPort says whether addr is a host (a name or an IP) and a port
// other than 0: an address to dial.
func hostPort(addr string) bool {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return false
	}
	p, err := strconv.ParseUint(port, 10, 16)
	return err == nil && p != 0
}
