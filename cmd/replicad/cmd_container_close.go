package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/cmfs-project/cmfs/peer"
)

func newContainerCloseCmd(g *globalOptions, opts *containerOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "close --server ADDR ID",
		Short: "Close a node's open container",
		Long: `Close the open container ID: CLOSING, then every file made durable, the
checksum file written and the descriptor rewritten CLOSED. A CLOSED
container can be replicated. Closing a CLOSED container is a no-op. A
close that fails (a full volume) leaves the container CLOSING, its blocks
still served; close it again once there is room.`,
		Example: `  replicad container close --server 127.0.0.1:9870 8061295411230218764`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runContainerClose(cmd.Context(), g, opts, args)
		},
	}
}

func runContainerClose(ctx context.Context, g *globalOptions, opts *containerOptions, args []string) error {
	d, err := opts.onContainer(ctx, args, (*peer.Client).CloseContainer)
	if err != nil {
		return err
	}
	fmt.Fprintln(g.stdout, summary(d))
	return nil
}
