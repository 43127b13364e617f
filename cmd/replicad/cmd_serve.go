package main

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/spf13/cobra"

	"github.com/cmfs-project/cmfs/source"
)

type serveOptions struct {
	state   string
	backing string
	listen  string
}

func newServeCmd(g *globalOptions) *cobra.Command {
	var opts serveOptions
	cmd := &cobra.Command{
		Use:   "serve --state DIR [--backing DIR] [--listen ADDR]",
		Short: "Serve a warehouse's files and journal to destinations",
		Long: `Serve the files and journal of a cmfs-protected warehouse over gRPC, for
'replicad load --source' and 'replicad follow' at a destination. A file is
streamed from the live tree while it holds the content asked for, else from
cmroot; the journal is read through the mount's control socket while it is
mounted, read-only otherwise.

The backing directory and cmroot come from STATE/mount.json, written by
every cmfs mount, or --backing DIR (state BACKING/.cmfs unless --state).
Without TLS only loopback addresses are allowed. Once it listens it prints
"listening on ADDR" (the actual address: with port 0, the one picked) and
serves until SIGINT or SIGTERM, then exits 0.`,
		Example: `  replicad serve --state /data/warehouse/.cmfs
  replicad serve --backing /data/warehouse --listen 127.0.0.1:9860`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runServe(cmd.Context(), g, opts, args)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.state, "state", "", "the mount's state `DIR` (default: BACKING/.cmfs)")
	f.StringVar(&opts.backing, "backing", "", "the warehouse root `DIR` (default: from STATE/mount.json)")
	f.StringVar(&opts.listen, "listen", source.DefaultAddr, "`ADDR` to listen on (loopback only without TLS)")
	return cmd
}

func runServe(ctx context.Context, g *globalOptions, opts serveOptions, _ []string) error {
	m, err := resolveMount(opts.state, opts.backing)
	if err != nil {
		return err
	}
	srv, err := source.NewServer(source.Config{Backing: m.backing, State: m.state, CMRoot: m.cmroot})
	if err != nil {
		return err
	}
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
		return fmt.Errorf("listen %s: %w", opts.listen, unwrapOp(err))
	}
	cfg := srv.Config()
	fmt.Fprintf(g.stdout, "listening on %s (warehouse %s, state %s, source %s)\n", lis.Addr(), cfg.Backing, cfg.State, cfg.SourceID)
	return srv.Serve(ctx, lis)
}

// unwrapOp drops the *net.OpError wrapper whose address the caller's
// message already names.
func unwrapOp(err error) error {
	var oe *net.OpError
	if errors.As(err, &oe) {
		return oe.Err
	}
	return err
}
