package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/cmfs-project/cmfs/internal/cli"
	"github.com/cmfs-project/cmfs/slot"
)

type slotsOptions struct {
	source string
	json   bool
	drop   string
	creds  credFlags
}

func newSlotsCmd(g *globalOptions) *cobra.Command {
	var opts slotsOptions
	cmd := &cobra.Command{
		Use:   "slots --source ADDR [--json] [--drop NAME]",
		Short: "List (or drop) a source's replication slots",
		Long: `List the replication slots of the 'replicad serve' at --source: one per
destination that follows it (replicad follow --slot). For each: the last
event its destination applied (position), how many events it is behind
(lag), and the cmroot entries and bytes that events after its position
name, which the source's gc keeps past the retention, up to 'cmfs gc
--retain-max'. A LOST slot fell behind what gc kept: it pins nothing and
its destination must be bootstrapped again. --json prints one object with
keys slots (name, position, lag, lost, pinned_entries, pinned_bytes,
created, updated) and horizon.

--drop NAME removes a slot: what it pinned is left to the retention.`,
		Example: `  replicad slots --source 127.0.0.1:9860
  replicad slots --source 127.0.0.1:9860 --drop dr-site:/replica`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runSlots(cmd.Context(), g, opts, args)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.source, "source", "", "`ADDR` of the source's 'replicad serve'")
	f.BoolVar(&opts.json, "json", false, "print one JSON object")
	f.StringVar(&opts.drop, "drop", "", "remove the slot called `NAME`")
	opts.creds.register(f, "client", "")
	return cmd
}

func runSlots(ctx context.Context, g *globalOptions, opts slotsOptions, _ []string) error {
	if opts.source == "" {
		return errors.New("which source? give --source ADDR")
	}
	client, err := dialSource(ctx, opts.source, opts.creds)
	if err != nil {
		return err
	}
	defer client.Close()
	if opts.drop != "" {
		if err := client.DropSlot(ctx, opts.drop); err != nil {
			return err
		}
		fmt.Fprintf(g.stdout, "dropped slot %q\n", opts.drop)
		return nil
	}
	pins, horizon, err := client.Slots(ctx)
	if err != nil {
		return err
	}
	if opts.json {
		out := struct {
			Slots   []slot.Report `json:"slots"`
			Horizon uint64        `json:"horizon"`
		}{Slots: []slot.Report{}, Horizon: horizon}
		for _, p := range pins {
			out.Slots = append(out.Slots, slot.Report{Name: p.Name, Position: p.Position, Lag: p.Lag, Lost: p.Lost, Entries: p.Entries, Bytes: p.Bytes, Created: p.Created, Updated: p.Updated})
		}
		b, err := json.Marshal(out)
		if err != nil {
			return err
		}
		fmt.Fprintf(g.stdout, "%s\n", b)
		return nil
	}
	if len(pins) == 0 {
		fmt.Fprintln(g.stdout, "no slots")
		return nil
	}
	fmt.Fprintf(g.stdout, "gc horizon: event %d\n", horizon)
	for _, p := range pins {
		state := fmt.Sprintf("pins %d entries (%s)", p.Entries, cli.Bytes(p.Bytes))
		if p.Lost {
			state = "LOST: behind what gc kept, pins nothing; bootstrap the destination again"
		}
		fmt.Fprintf(g.stdout, "%s: at event %d, %d behind, confirmed %s; %s\n", p.Name, p.Position, p.Lag, p.Updated.Format(time.RFC3339), state)
	}
	return nil
}
