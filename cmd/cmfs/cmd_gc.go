package main

import (
	"github.com/cmfs-project/cmfs/internal/cli"

	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/cmfs-project/cmfs/control"
)

type gcOptions struct {
	stateOptions
	retain time.Duration
}

func newGCCmd(g *globalOptions) *cobra.Command {
	var opts gcOptions
	cmd := &cobra.Command{
		Use:   "gc [--state DIR | BACKING] [--retain DUR]",
		Short: "Remove preserved originals older than the retention",
		Long: `Remove cmroot entries whose latest preservation is older than the
retention (default: the one the mount was started with, else 24h).
Runs inside the mount when it is mounted.`,
		Example: `  cmfs gc /data/warehouse
  cmfs gc --state /var/lib/cmfs --retain 72h`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runGC(cmd.Context(), g, opts, args)
		},
	}
	opts.addFlags(cmd)
	cmd.Flags().DurationVar(&opts.retain, "retain", 0, "keep entries younger than this (default: the mount's retention)")
	return cmd
}

func runGC(ctx context.Context, g *globalOptions, opts gcOptions, args []string) error {
	t, _, err := opts.resolve(args, false)
	if err != nil {
		return err
	}
	if opts.retain < 0 {
		return fmt.Errorf("--retain %s: must not be negative", opts.retain)
	}
	var res control.GCResult
	if c, _ := live(ctx, t); c != nil {
		defer c.Close()
		if res, err = c.GC(ctx, opts.retain); err != nil {
			return fmt.Errorf("gc: %w", err)
		}
	} else {
		store, err := openStore(t)
		if err != nil {
			return err
		}
		defer store.Close()
		retain := opts.retain
		if retain == 0 {
			retain = t.record.Retention()
		}
		if res, err = control.GC(store, retain, time.Now()); err != nil {
			return err
		}
	}
	fmt.Fprintf(g.stdout, "removed %d entries, %s\n", res.Removed, cli.Bytes(res.Bytes))
	return nil
}
