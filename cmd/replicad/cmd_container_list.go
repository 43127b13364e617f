package main

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

type containerListOptions struct {
	*containerOptions
	json bool
}

func newContainerListCmd(g *globalOptions, copts *containerOptions) *cobra.Command {
	opts := containerListOptions{containerOptions: copts}
	cmd := &cobra.Command{
		Use:   "list --server ADDR [--json]",
		Short: "List a node's containers",
		Long: `List the node's containers, by id: state, replica index, data bytes,
blocks and descriptor checksum (and why, for an UNHEALTHY one).

--json prints one object per line with keys id (a string), state,
reason (UNHEALTHY only), replica_index, replication, bytes, blocks,
chunks, max_size, created, container_checksum and descriptor_checksum.`,
		Example: `  replicad container list --server 127.0.0.1:9870
  replicad container list --server 127.0.0.1:9870 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runContainerList(cmd.Context(), g, opts, args)
		},
	}
	cmd.Flags().BoolVar(&opts.json, "json", false, "print one JSON object per container")
	return cmd
}

func runContainerList(ctx context.Context, g *globalOptions, opts containerListOptions, _ []string) error {
	c, err := opts.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	ds, err := c.List(ctx)
	if err != nil {
		return opts.nodeError("list containers", err)
	}
	if opts.json {
		for _, d := range ds {
			if err := printJSON(g, toJSON(d)); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(g.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tREPLICA\tBYTES\tBLOCKS\tDESCRIPTOR CHECKSUM\tREASON")
	for _, d := range ds {
		sum := d.DescriptorChecksum
		if sum == "" {
			sum = "-"
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%d\t%s\t%s\n", d.ID, d.State, d.ReplicaIndex, d.Bytes, d.Blocks, sum, d.Reason)
	}
	return tw.Flush()
}
