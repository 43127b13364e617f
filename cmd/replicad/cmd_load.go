package main

import (
	"github.com/cmfs-project/cmfs/internal/cli"

	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/cmfs-project/cmfs/cluster/blocks"
	"github.com/cmfs-project/cmfs/peer"
	"github.com/cmfs-project/cmfs/repl"
	"github.com/cmfs-project/cmfs/source"
)

type loadOptions struct {
	dump        string
	target      string
	source      string
	sourceState string
	cluster     []string
	json        bool
	wait        time.Duration
	creds       credFlags
}

func newLoadCmd(g *globalOptions) *cobra.Command {
	var opts loadOptions
	cmd := &cobra.Command{
		Use:   "load --dump DIR --target DIR [--source ADDR | --source-state DIR] [--cluster COORD] [--wait DUR] [--json]",
		Short: "Apply a dump to a destination warehouse",
		Long: `Apply a dump to the warehouse directory TARGET (created if missing), event
by event in id order. Every file is fetched once — from the source's live
tree while it still holds the content, else from its cmroot — and verified
before it becomes visible; after each event the target records it durably
in TARGET/.replstate, so loading a dump twice is a no-op and a failed load
continues where it stopped when rerun.

Files come from a 'replicad serve' at --source ADDR (with --tls-cert,
--tls-key and --tls-ca for a node that serves mutual TLS), or, on the
source's machine, straight from the mount whose state directory is
--source-state.

With --cluster COORD[,COORD...] (a cluster's coordinator), content the
source has no copy of, or that cannot be fetched from it, is fetched from
the cluster last: by its xxh64 and size, as a block that the source's
'replicad serve --ingest' wrote into a container the cluster replicated.
With --cluster alone no source is needed: a destination is brought to any
event of a dump while the source host is down or gone, as long as the
cluster holds the blocks. The cluster is reached with the same
credentials.

A target is loaded by one loader at a time (a load, or a 'replicad
follow' for as long as it runs): another one is refused with one line
naming it (pid, command, since when); with --wait DUR the load waits that
long for it first.

Prints what was applied; --json prints one object with keys from, to,
applied (events), files, bytes (and missing, when files inside a
BOOTSTRAP's racing window could not be fetched). On a terminal a progress
bar is drawn on stderr.`,
		Example: `  replicad load --dump /dumps/incremental-101-200 --target /replica --source 127.0.0.1:9860
  replicad load --dump /dumps/bootstrap-100 --target /replica --source-state /data/warehouse/.cmfs
  replicad load --dump /dumps/incremental-1-200 --target /replica --cluster coord1:9870 --tls-cert c.pem --tls-key c-key.pem --tls-ca ca.pem`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runLoad(cmd.Context(), g, opts, args)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.dump, "dump", "", "the dump `DIR`")
	f.StringVar(&opts.target, "target", "", "the destination warehouse `DIR`")
	f.StringVar(&opts.source, "source", "", "`ADDR` of the source's 'replicad serve'")
	f.StringVar(&opts.sourceState, "source-state", "", "state `DIR` of the source mount, on this machine")
	f.StringSliceVar(&opts.cluster, "cluster", nil, "fetch what the source has not from the cluster whose coordinator is at `ADDR[,ADDR...]`")
	f.BoolVar(&opts.json, "json", false, "print one JSON object")
	f.DurationVar(&opts.wait, "wait", 0, "wait this long for another loader of the target (default: refuse at once)")
	opts.creds.register(f, "client", "")
	return cmd
}

// loadReport is what load prints with --json.
type loadReport struct {
	From    uint64 `json:"from"`
	To      uint64 `json:"to"`
	Applied int    `json:"applied"`
	Files   int    `json:"files"`
	Bytes   int64  `json:"bytes"`
	Missing int    `json:"missing,omitempty"`
}

func runLoad(ctx context.Context, g *globalOptions, opts loadOptions, _ []string) error {
	if opts.dump == "" {
		return errors.New("which dump? give --dump DIR")
	}
	if opts.target == "" {
		return errors.New("where to? give --target DIR")
	}
	if opts.source != "" && opts.sourceState != "" {
		return errors.New("give one of --source ADDR and --source-state DIR, not both")
	}
	if opts.source == "" && opts.sourceState == "" && len(opts.cluster) == 0 {
		return errors.New("where from? give --source ADDR, --source-state DIR or --cluster COORD")
	}
	for _, a := range opts.cluster {
		if !hostPort(a) {
			return fmt.Errorf("--cluster %q: want HOST:PORT of a coordinator", a)
		}
	}
	dump, err := cli.Directory("dump", opts.dump)
	if err != nil {
		return err
	}
	md, err := repl.ReadMetadata(dump)
	if err != nil {
		return fmt.Errorf("dump %s: %w", opts.dump, err)
	}
	if opts.wait < 0 {
		return fmt.Errorf("--wait %s must not be negative", opts.wait)
	}
	target, err := makeDirectory("target", opts.target)
	if err != nil {
		return err
	}
	lock, err := repl.LockTarget(ctx, target, repl.LockOptions{Wait: opts.wait})
	if err != nil {
		return err
	}
	defer lock.Unlock()

	var fetch repl.Fallback
	if opts.source != "" {
		c, err := dialSource(ctx, opts.source, opts.creds)
		if err != nil {
			return err
		}
		defer c.Close()
		// A server that refuses this client says so before the target
		// is touched (a source that is away is the first fetch's error).
		if _, err := c.Status(ctx); errors.Is(err, source.ErrUnauthenticated) {
			return fmt.Errorf("--source %s: %w", opts.source, err)
		}
		fetch = append(fetch, repl.Origin{Name: "the source", Fetcher: c})
	} else if opts.sourceState != "" {
		m, err := resolveMount(opts.sourceState, "")
		if err != nil {
			return err
		}
		events, closeEvents, err := openEvents(ctx, m)
		if err != nil {
			return err
		}
		defer closeEvents()
		fetch = append(fetch, repl.Origin{Name: "the source", Fetcher: &repl.LocalFetcher{Root: m.backing, CMRoot: m.cmroot, Events: events}})
	}
	if len(opts.cluster) > 0 {
		bf, err := clusterFetcher(ctx, opts.cluster, opts.creds)
		if err != nil {
			return err
		}
		defer bf.Close()
		fetch = append(fetch, repl.Origin{Name: "the cluster", Fetcher: bf})
	}

	lo := repl.LoadOptions{Lock: lock}
	var b *bar
	if isTerminal(g.stderr) {
		b = newBar(g.stderr, "load "+filepath.Base(dump), eventsToApply(target, md))
		lo.Progress = b
	}
	var fetcher repl.Fetcher = fetch
	if len(fetch) == 1 && len(opts.cluster) == 0 {
		fetcher = fetch[0].Fetcher // the source's own messages, as before
	}
	res, err := repl.Load(ctx, dump, target, fetcher, lo)
	if b != nil {
		b.Done()
	}
	if err != nil && len(opts.cluster) > 0 {
		// Nodes the cluster fetcher could not reach, said plainly.
		return &wrapped{msg: grpcDial.ReplaceAllString(err.Error(), "cannot connect: $1"), err: err}
	}
	if err != nil {
		return err
	}
	r := loadReport{From: res.From, To: res.To, Applied: res.Applied, Files: res.Files, Bytes: res.Bytes, Missing: res.Missing}
	if opts.json {
		return printJSON(g, r)
	}
	fmt.Fprintf(g.stdout, "loaded %s into %s: events %d..%d, %d applied, %d files, %s\n",
		dump, target, r.From, r.To, r.Applied, r.Files, cli.Bytes(r.Bytes))
	if r.Missing > 0 {
		fmt.Fprintf(g.stdout, "%d files raced with the bootstrap and were left to later events\n", r.Missing)
	}
	return nil
}

// eventsToApply is how many events of the dump the target does not hold
// yet, for the progress bar (0: unknown, as for a BOOTSTRAP).
func eventsToApply(target string, md repl.Metadata) uint64 {
	if md.Kind != repl.Incremental {
		return 0
	}
	start := md.From
	if st, ok, err := repl.ReadState(target); err == nil && ok && st.LastReplID+1 > start {
		start = st.LastReplID + 1
	}
	if start > md.To {
		return 0
	}
	return md.To - start + 1
}

// clusterFetcher reads blocks from the cluster whose coordinator is at
// coords, dialing it and its nodes with creds.
func clusterFetcher(ctx context.Context, coords []string, creds credFlags) (*blocks.Fetcher, error) {
	cfg, token, err := creds.client(ctx, "--cluster", coords[0])
	if err != nil {
		return nil, err
	}
	opt := peer.WithToken(token)
	if cfg != nil {
		opt = peer.WithTLS(cfg)
	}
	return blocks.New(blocks.Config{
		Coordinators: coords,
		Dial:         func(ctx context.Context, addr string) (*peer.Client, error) { return peer.Dial(ctx, addr, opt) },
	})
}
