package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/cmfs-project/cmfs/container"
	"github.com/cmfs-project/cmfs/internal/cli"
	"github.com/cmfs-project/cmfs/peer"
)

func newContainerVerifyCmd(g *globalOptions, opts *containerOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "verify --server ADDR ID",
		Short: "Check every checksum of a container",
		Long: `Re-read container ID on the node and check everything it holds: the
descriptor's own checksum, the index's, the container checksum, that the
blocks tile the chunk files, and every block's xxh64. All good: CLOSED;
anything wrong: UNHEALTHY, with the reason, recorded durably on the node.
Prints the container's state; exits 1 when it is UNHEALTHY.`,
		Example: `  replicad container verify --server 127.0.0.1:9870 8061295411230218764`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runContainerVerify(cmd.Context(), g, opts, args)
		},
	}
}

func runContainerVerify(ctx context.Context, g *globalOptions, opts *containerOptions, args []string) error {
	d, err := opts.onContainer(ctx, args, (*peer.Client).Verify)
	if err != nil {
		return err
	}
	fmt.Fprintln(g.stdout, summary(d))
	if d.State == container.Unhealthy {
		return &cli.ExitError{Code: 1, Msg: fmt.Sprintf("container %d is UNHEALTHY: %s", d.ID, d.Reason)}
	}
	return nil
}
