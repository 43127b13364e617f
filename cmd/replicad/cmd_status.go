package main

import (
	"github.com/cmfs-project/cmfs/internal/cli"

	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/cmfs-project/cmfs/repl"
)

type statusOptions struct {
	target string
	json   bool
}

func newStatusCmd(g *globalOptions) *cobra.Command {
	var opts statusOptions
	cmd := &cobra.Command{
		Use:   "status --target DIR [--json]",
		Short: "Show how far a destination warehouse is loaded",
		Long: `Show the last event loaded into a destination warehouse (last_repl_id),
the dump it came from, when it was loaded, and the source. A target never
loaded says so, with last_repl_id 0. --json prints one object with keys
last_repl_id, dump, time (RFC 3339; absent if never loaded), source, and
fuzzy_until and bootstrapping where set.

While a 'replicad follow' keeps the target loaded it says how it is
doing, and status shows it (key follow): following, or retrying since
the first of N rounds failed in a row, with the last error and when the
next retry is due; a follow that was killed is shown as not running.`,
		Example: `  replicad status --target /replica
  replicad status --target /replica --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runStatus(cmd.Context(), g, opts, args)
		},
	}
	cmd.Flags().StringVar(&opts.target, "target", "", "the destination warehouse `DIR`")
	cmd.Flags().BoolVar(&opts.json, "json", false, "print one JSON object")
	return cmd
}

// statusReport is what status prints with --json.
type statusReport struct {
	LastReplID    uint64             `json:"last_repl_id"`
	Dump          string             `json:"dump"`
	Time          string             `json:"time,omitempty"`
	Source        string             `json:"source"`
	FuzzyUntil    uint64             `json:"fuzzy_until,omitempty"`
	Bootstrapping string             `json:"bootstrapping,omitempty"`
	Follow        *repl.FollowStatus `json:"follow,omitempty"`
}

func runStatus(_ context.Context, g *globalOptions, opts statusOptions, _ []string) error {
	if opts.target == "" {
		return errors.New("which destination? give --target DIR")
	}
	target, err := cli.Directory("target", opts.target)
	if err != nil {
		return err
	}
	st, ok, err := repl.ReadState(target)
	if err != nil {
		return err
	}
	r := statusReport{LastReplID: st.LastReplID, Dump: st.Dump, Source: st.Source, FuzzyUntil: st.FuzzyUntil, Bootstrapping: st.Bootstrapping}
	if ok && !st.Time.IsZero() {
		r.Time = st.Time.UTC().Format(time.RFC3339Nano)
	}
	if fs, found, err := repl.ReadFollowStatus(target); err != nil {
		return err
	} else if found {
		r.Follow = &fs
	}
	if opts.json {
		return printJSON(g, r)
	}
	w := g.stdout
	defer printFollow(w, r.Follow)
	if !ok {
		fmt.Fprintf(w, "target %s was never loaded\nlast_repl_id: 0\n", target)
		return nil
	}
	fmt.Fprintf(w, "last_repl_id: %d\n", r.LastReplID)
	fmt.Fprintf(w, "dump:         %s\n", r.Dump)
	fmt.Fprintf(w, "time:         %s\n", r.Time)
	fmt.Fprintf(w, "source:       %s\n", r.Source)
	if r.Bootstrapping != "" {
		fmt.Fprintf(w, "bootstrapping: %s (unfinished: rerun its load)\n", r.Bootstrapping)
	}
	if r.FuzzyUntil > r.LastReplID {
		fmt.Fprintf(w, "exact from:   event %d (events up to it raced with the bootstrap)\n", r.FuzzyUntil)
	}
	return nil
}

// printFollow prints what a follow of the target says, if one does.
func printFollow(w io.Writer, f *repl.FollowStatus) {
	switch {
	case f == nil:
		return
	case !f.Running:
		fmt.Fprintf(w, "follow:       not running (pid %d gone; it was %s from %s)\n", f.PID, f.State, f.Source)
	case f.State == repl.FollowRetrying:
		fmt.Fprintf(w, "follow:       retrying (pid %d, source %s): %d rounds failed in a row since %s; next retry %s\n",
			f.PID, f.Source, f.Failures, f.Since.Format(time.RFC3339), f.NextRetry.Format(time.RFC3339Nano))
	default:
		fmt.Fprintf(w, "follow:       %s (pid %d, source %s) since %s\n", f.State, f.PID, f.Source, f.Since.Format(time.RFC3339))
	}
	if f.LastError != "" {
		fmt.Fprintf(w, "last error:   %s\n", f.LastError)
	}
}
