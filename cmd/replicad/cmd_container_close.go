package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
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
	id, err := oneID(args)
	if err != nil {
		return err
	}
	c, err := opts.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	d, err := c.CloseContainer(ctx, id)
	if err != nil {
		return opts.nodeError("", err) // the node's message names the container
	}
	fmt.Fprintln(g.stdout, summary(d))
	return nil
}
