package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/cmfs-project/cmfs/slot"
)

type slotsOptions struct {
	stateOptions
	json bool
	drop string
}

func newSlotsCmd(g *globalOptions) *cobra.Command {
	var opts slotsOptions
	cmd := &cobra.Command{
		Use:   "slots [--state DIR | BACKING] [--json] [--drop NAME]",
		Short: "List (or drop) the replication slots that hold originals back from gc",
		Long: `List the replication slots of a mount: one per destination that follows
it with 'replicad follow' (STATE/slots.json). For each: the last event
its destination applied, how many events it is behind, and the cmroot
entries (and bytes) that events after it name, which gc keeps past the
retention (up to 'cmfs gc --retain-max'). A slot that is LOST fell behind
what gc kept: it pins nothing, and its destination must be bootstrapped
again. The gc horizon is the newest event that names an entry gc removed.

--drop NAME removes a slot (a destination retired for good): what it
pinned is left to the retention. Works mounted and unmounted.`,
		Example: `  cmfs slots /data/warehouse
  cmfs slots --state /var/lib/cmfs --json
  cmfs slots /data/warehouse --drop dr-site:/replica`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runSlots(cmd.Context(), g, opts, args)
		},
	}
	opts.addFlags(cmd)
	cmd.Flags().BoolVar(&opts.json, "json", false, "print as one JSON object")
	cmd.Flags().StringVar(&opts.drop, "drop", "", "remove the slot called `NAME`")
	return cmd
}

func runSlots(ctx context.Context, g *globalOptions, opts slotsOptions, args []string) error {
	t, _, err := opts.resolve(args, false)
	if err != nil {
		return err
	}
	if opts.drop != "" {
		if err := slot.Open(t.state).Drop(opts.drop); err != nil {
			return err
		}
		fmt.Fprintf(g.stdout, "dropped slot %q\n", opts.drop)
		return nil
	}
	var r struct {
		Slots   []slot.Report `json:"slots"`
		Horizon uint64        `json:"horizon"`
		Last    uint64        `json:"last_event_id"`
	}
	if c, st := live(ctx, t); c != nil {
		defer c.Close()
		r.Last = st.LastEventID
		r.Slots, r.Horizon, err = readSlots(ctx, t, c, nil, r.Last)
	} else {
		j, jerr := openJournal(t)
		if jerr != nil {
			return jerr
		}
		defer j.Close()
		r.Last = j.Last()
		r.Slots, r.Horizon, err = readSlots(ctx, t, nil, j, r.Last)
	}
	if err != nil {
		return err
	}
	if opts.json {
		if r.Slots == nil {
			r.Slots = []slot.Report{}
		}
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		fmt.Fprintf(g.stdout, "%s\n", b)
		return nil
	}
	fmt.Fprintf(g.stdout, "last event: %d\n", r.Last)
	printSlots(g.stdout, r.Slots, r.Horizon)
	return nil
}
