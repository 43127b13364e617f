package main

import (
	"github.com/cmfs-project/cmfs/internal/cli"

	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cmfs-project/cmfs/cmroot"
	"github.com/cmfs-project/cmfs/slot"
	"github.com/cmfs-project/cmfs/upkeep"
)

// days is a duration flag that also takes days ("7d", "1d12h").
type days time.Duration

func (d *days) String() string { return time.Duration(*d).String() }
func (d *days) Type() string   { return "duration" }
func (d *days) Set(s string) error {
	v, err := parseDays(s)
	if err != nil {
		return err
	}
	*d = days(v)
	return nil
}

// parseDays is time.ParseDuration with a leading whole number of days.
func parseDays(s string) (time.Duration, error) {
	if i := strings.IndexByte(s, 'd'); i > 0 {
		n, err := strconv.Atoi(s[:i])
		if err != nil || n < 0 {
			return 0, fmt.Errorf("invalid duration %q", s)
		}
		rest := time.Duration(0)
		if s[i+1:] != "" {
			if rest, err = time.ParseDuration(s[i+1:]); err != nil {
				return 0, fmt.Errorf("invalid duration %q", s)
			}
		}
		return time.Duration(n)*24*time.Hour + rest, nil
	}
	return time.ParseDuration(s)
}

type gcOptions struct {
	stateOptions
	retain    time.Duration
	retainMax time.Duration
}

func newGCCmd(g *globalOptions) *cobra.Command {
	var opts gcOptions
	cmd := &cobra.Command{
		Use:   "gc [--state DIR | BACKING] [--retain DUR]",
		Short: "Remove preserved originals older than the retention",
		Long: `Remove cmroot entries whose latest preservation is older than the
retention (default: the one the mount was started with, else 24h).
Runs inside the mount when it is mounted.

Entries a replication slot still needs are kept past the retention: every
entry an event after the oldest slot's position names (slots are
registered by 'replicad follow' through 'replicad serve'; 'cmfs slots'
lists them). --retain-max (default 7d) bounds that: an entry older than it
is removed anyway, and a destination that needed it is told which event it
can no longer reproduce and how to bootstrap again.`,
		Example: `  cmfs gc /data/warehouse
  cmfs gc --state /var/lib/cmfs --retain 72h --retain-max 14d`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runGC(cmd.Context(), g, opts, args)
		},
	}
	opts.addFlags(cmd)
	cmd.Flags().DurationVar(&opts.retain, "retain", 0, "keep entries younger than this (default: the mount's retention)")
	opts.retainMax = upkeep.DefaultRetainMax
	cmd.Flags().Var((*days)(&opts.retainMax), "retain-max", "keep entries a replication slot needs at most this long (7d, 36h, ...)")
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
	if opts.retainMax <= 0 {
		return fmt.Errorf("--retain-max %s: must be positive", opts.retainMax)
	}
	var res upkeep.GCResult
	if c, _ := live(ctx, t); c != nil {
		defer c.Close()
		if res, err = c.GC(ctx, opts.retain, opts.retainMax); err != nil {
			return fmt.Errorf("gc: %w", err)
		}
	} else {
		off, err := openOffline(t)
		if err != nil {
			return err
		}
		defer off.Close()
		retain := opts.retain
		if retain == 0 {
			retain = t.record.Retention(cmroot.DefaultRetain)
		}
		gopts := upkeep.GCOptions{Retain: retain, RetainMax: opts.retainMax, Slots: slot.Open(t.state)}
		if res, err = upkeep.GC(ctx, off.j, off.store, gopts, time.Now()); err != nil {
			return err
		}
	}
	fmt.Fprintf(g.stdout, "removed %d entries, %s", res.Removed, cli.Bytes(res.Bytes))
	if res.Pinned > 0 {
		fmt.Fprintf(g.stdout, "; kept %d entries, %s, that replication slots need", res.Pinned, cli.Bytes(res.PinnedBytes))
	}
	fmt.Fprintln(g.stdout)
	return nil
}
