package main

import (
	"github.com/cmfs-project/cmfs/control"
	"github.com/cmfs-project/cmfs/internal/cli"
	"github.com/cmfs-project/cmfs/slot"

	"context"
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"
)

type statusOptions struct {
	stateOptions
	json bool
}

func newStatusCmd(g *globalOptions) *cobra.Command {
	var opts statusOptions
	cmd := &cobra.Command{
		Use:   "status [--state DIR | BACKING] [--json]",
		Short: "Show whether it is mounted, the last event, cmroot usage and replication slots",
		Example: `  cmfs status /data/warehouse
  cmfs status --state /var/lib/cmfs --json`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runStatus(cmd.Context(), g, opts, args)
		},
	}
	opts.addFlags(cmd)
	cmd.Flags().BoolVar(&opts.json, "json", false, "print as one JSON object")
	return cmd
}

// statusReport is what status prints.
type statusReport struct {
	Mounted     bool   `json:"mounted"`
	Mountpoint  string `json:"mountpoint"`
	PID         int    `json:"pid,omitempty"`
	Backing     string `json:"backing"`
	State       string `json:"state"`
	CMRoot      string `json:"cmroot"`
	LastEventID uint64 `json:"last_event_id"`
	CMEntries   int    `json:"cm_entries"`
	CMBytes     int64  `json:"cm_bytes"`
	// Slots are the replication slots; SlotHorizon the newest event
	// naming an entry gc removed (slot.State.Horizon).
	Slots       []slot.Report `json:"slots"`
	SlotHorizon uint64        `json:"slot_horizon"`
	// Commit is the mount's commit path, while mounted.
	Commit *control.Commit `json:"commit,omitempty"`
}

func runStatus(ctx context.Context, g *globalOptions, opts statusOptions, args []string) error {
	t, _, err := opts.resolve(args, false)
	if err != nil {
		return err
	}
	var r statusReport
	if c, st := live(ctx, t); c != nil {
		defer c.Close()
		r = statusReport{
			Mounted:     true,
			Mountpoint:  st.Mountpoint,
			PID:         st.PID,
			Backing:     st.Backing,
			State:       st.State,
			CMRoot:      st.CMRoot,
			LastEventID: st.LastEventID,
			CMEntries:   st.CMEntries,
			CMBytes:     st.CMBytes,
			Commit:      &st.Commit,
		}
		if r.Slots, r.SlotHorizon, err = readSlots(ctx, t, c, nil, r.LastEventID); err != nil {
			return err
		}
	} else {
		off, err := openOffline(t)
		if err != nil {
			return err
		}
		defer off.Close()
		r = statusReport{
			Backing:     t.backing,
			State:       t.state,
			CMRoot:      t.cmroot(),
			LastEventID: off.j.Last(),
		}
		r.CMEntries, r.CMBytes = off.store.Stats()
		if r.Slots, r.SlotHorizon, err = readSlots(ctx, t, nil, off.j, r.LastEventID); err != nil {
			return err
		}
	}
	if opts.json {
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		fmt.Fprintf(g.stdout, "%s\n", b)
		return nil
	}
	w := g.stdout
	if r.Mounted {
		fmt.Fprintf(w, "mounted:    yes, at %s (pid %d)\n", r.Mountpoint, r.PID)
	} else {
		fmt.Fprintf(w, "mounted:    no\n")
	}
	fmt.Fprintf(w, "backing:    %s\n", r.Backing)
	fmt.Fprintf(w, "state:      %s\n", r.State)
	fmt.Fprintf(w, "cmroot:     %s\n", r.CMRoot)
	fmt.Fprintf(w, "last event: %d\n", r.LastEventID)
	fmt.Fprintf(w, "cm entries: %d (%s)\n", r.CMEntries, cli.Bytes(r.CMBytes))
	if c := r.Commit; c != nil {
		fmt.Fprintf(w, "sync:       %s\n", c.Sync)
		fmt.Fprintf(w, "commits:    %d events in %d groups; %d flushes (p50 %dµs, p99 %dµs); %d WAL and %d file/directory fsyncs\n",
			c.Events, c.Groups, c.Flushes, c.FlushP50US, c.FlushP99US, c.WALSyncs, c.PathSyncs)
	}
	printSlots(w, r.Slots, r.SlotHorizon)
	return nil
}
