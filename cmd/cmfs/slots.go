package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/cmfs-project/cmfs/cmroot"
	"github.com/cmfs-project/cmfs/control"
	"github.com/cmfs-project/cmfs/internal/cli"
	"github.com/cmfs-project/cmfs/journal"
	"github.com/cmfs-project/cmfs/slot"
)

// readSlots returns the target's slots with their lag behind last and
// what they pin, reading the events through the mount (c) or the
// unmounted journal (j), and the horizon.
func readSlots(ctx context.Context, t target, c *control.Client, j *journal.Log, last uint64) ([]slot.Report, uint64, error) {
	st, err := slot.Open(t.state).Load()
	if err != nil {
		return nil, 0, err
	}
	events := func(ctx context.Context, from, to uint64, fn func(*journal.Event) error) error {
		if c != nil {
			return c.Events(ctx, from, to, false, func(e journal.Event) error { return fn(&e) })
		}
		return j.Range(from, to, fn)
	}
	dir := t.cmroot()
	present := func(cm string) bool {
		p, err := cmroot.EntryPath(dir, cm)
		if err != nil {
			return false
		}
		_, err = os.Lstat(p)
		return err == nil
	}
	pins, err := slot.Pins(ctx, st, last, events, present)
	if err != nil {
		return nil, 0, err
	}
	out := make([]slot.Report, 0, len(pins))
	for _, p := range pins {
		out = append(out, slot.Report{Name: p.Name, Position: p.Position, Lag: p.Lag, Lost: p.Lost,
			Entries: p.Entries, Bytes: p.Bytes, Created: p.Created, Updated: p.Updated})
	}
	return out, st.Horizon, nil
}

// printSlots prints one line per slot: where its destination is, how far
// behind, what it pins.
func printSlots(w io.Writer, slots []slot.Report, horizon uint64) {
	if len(slots) == 0 {
		fmt.Fprintf(w, "slots:      none\n")
		return
	}
	fmt.Fprintf(w, "slots:      %d (gc horizon: event %d)\n", len(slots), horizon)
	for _, s := range slots {
		state := fmt.Sprintf("pins %d entries (%s)", s.Entries, cli.Bytes(s.Bytes))
		if s.Lost {
			state = "LOST: behind what gc kept, pins nothing; bootstrap the destination again"
		}
		fmt.Fprintf(w, "  %s: at event %d, %d behind, confirmed %s; %s\n", s.Name, s.Position, s.Lag,
			s.Updated.Format(time.RFC3339), state)
	}
}
