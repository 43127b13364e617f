package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/cmfs-project/cmfs/container"
	"github.com/cmfs-project/cmfs/internal/cli"
	"github.com/cmfs-project/cmfs/peer"
)

type containerReplicateOptions struct {
	*containerOptions
	to          string
	mode        string
	compression string
	waitScan    bool
}

func newContainerReplicateCmd(g *globalOptions, copts *containerOptions) *cobra.Command {
	opts := containerReplicateOptions{containerOptions: copts}
	cmd := &cobra.Command{
		Use:   "replicate --server ADDR ID --to ADDR [--mode push|pull] [--compression ALG]",
		Short: "Copy a closed container from one node to another",
		Long: `Ask the node at --server to copy its CLOSED (or UNHEALTHY) container ID to
the node at --to, through its replication queue, and wait until the
target has imported it or failed, with the target's reason.

--mode push: the source streams the tarball to the target; pull: the
target downloads it from the source; by default, as the source node is
configured (push, or pull when it serves with --push=false). A transfer
cut off is started again from the beginning, a few times. --compression
(none, gzip, snappy, lz4 or zstd; default none) is the tarball's on the
wire.

The target places the container as RECOVERING and scans every block,
then marks it CLOSED or UNHEALTHY; --wait-scan waits for that verdict
too, and exits 1 if it is UNHEALTHY.`,
		Example: `  replicad container replicate --server 127.0.0.1:9870 8061295411230218764 --to 127.0.0.1:9880
  replicad container replicate --server dn1:9870 8061295411230218764 --to dn2:9870 --mode pull --compression zstd --tls-cert admin.pem --tls-key admin-key.pem --tls-ca ca.pem`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runContainerReplicate(cmd.Context(), g, opts, args)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.to, "to", "", "`ADDR` of the target node")
	f.StringVar(&opts.mode, "mode", "", "push or pull (default: as the source node is configured)")
	f.StringVar(&opts.compression, "compression", "none", "of the tarball on the wire: none, gzip, snappy, lz4 or zstd")
	f.BoolVar(&opts.waitScan, "wait-scan", false, "wait for the target's scan: CLOSED or UNHEALTHY")
	return cmd
}

func runContainerReplicate(ctx context.Context, g *globalOptions, opts containerReplicateOptions, args []string) error {
	id, err := oneID(args)
	if err != nil {
		return err
	}
	if opts.to == "" {
		return fmt.Errorf("replicate container %d where? give --to ADDR", id)
	}
	comp, err := container.ParseCompression(opts.compression)
	if err != nil {
		return fmt.Errorf("--compression %q: want none, gzip, snappy, lz4 or zstd", opts.compression)
	}
	mode := peer.NodeDefault
	if opts.mode != "" {
		if mode, err = peer.ParseMode(opts.mode); err != nil {
			return fmt.Errorf("--mode %q: want push or pull", opts.mode)
		}
	}
	if opts.to == opts.server {
		return fmt.Errorf("replicate container %d: --to %s is the node at --server; give another node's address", id, opts.to)
	}
	c, err := opts.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	res, err := c.Replicate(ctx, peer.Task{Container: id, Target: opts.to, Mode: mode, Compression: comp, WaitScan: opts.waitScan})
	if err != nil {
		return opts.nodeError("", err) // the node's message names the container and the target
	}
	attempts := "1 attempt"
	if res.Attempts != 1 {
		attempts = fmt.Sprintf("%d attempts", res.Attempts)
	}
	d := res.Descriptor
	fmt.Fprintf(g.stdout, "container %d on %s: %s; %s, %s, %s on the wire in %s, %s\n",
		id, opts.to, d.State, res.Mode, comp, cli.Bytes(res.Bytes), res.Duration.Round(time.Millisecond), attempts)
	if d.State == container.Unhealthy {
		return &cli.ExitError{Code: 1, Msg: fmt.Sprintf("container %d on %s is UNHEALTHY: %s", id, opts.to, d.Reason)}
	}
	return nil
}
