package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cmfs-project/cmfs/control"
	"github.com/cmfs-project/cmfs/journal"
	"github.com/cmfs-project/cmfs/upkeep"
)

type eventsOptions struct {
	stateOptions
	from, to uint64
	follow   bool
	json     bool
}

func newEventsCmd(g *globalOptions) *cobra.Command {
	var opts eventsOptions
	cmd := &cobra.Command{
		Use:   "events [--state DIR | BACKING] [--from N] [--to N] [--follow] [--json]",
		Short: "Print journaled events",
		Long: `Print the events of the journal, from the running mount's control socket
when it is mounted, else from the journal file read-only.

Text output is one line per event: id, time, type, path (-> new path), and
each file as path:size:xxh64[:cmroot name]. With --json each line is a JSON
object with keys id, time, type, path, db, table, partition, files (each
path, size, xxh64, cm) and, where set, new_path and target.`,
		Example: `  cmfs events /data/warehouse
  cmfs events --state /var/lib/cmfs --from 100 --json
  cmfs events /data/warehouse --follow`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runEvents(cmd.Context(), g, opts, args)
		},
	}
	opts.addFlags(cmd)
	f := cmd.Flags()
	f.Uint64Var(&opts.from, "from", 1, "first event id")
	f.Uint64Var(&opts.to, "to", 0, "last event id (0: the newest; with --follow: forever)")
	f.BoolVar(&opts.follow, "follow", false, "keep printing new events as they happen")
	f.BoolVar(&opts.json, "json", false, "one JSON object per line")
	return cmd
}

func runEvents(ctx context.Context, g *globalOptions, opts eventsOptions, args []string) error {
	t, _, err := opts.resolve(args, false)
	if err != nil {
		return err
	}
	if opts.to != 0 && opts.to < opts.from {
		return fmt.Errorf("--to %d is before --from %d", opts.to, opts.from)
	}
	w := bufio.NewWriter(g.stdout)
	defer w.Flush()
	next := max(opts.from, 1)
	print := func(e journal.Event) error {
		if err := writeEvent(w, e, opts.json); err != nil {
			return err
		}
		next = e.ID + 1
		if opts.follow {
			return w.Flush()
		}
		return nil
	}
	err = followEvents(ctx, t, opts.to, opts.follow, print, &next)
	if opts.follow && ctx.Err() != nil {
		return w.Flush() // interrupted: the normal end of --follow
	}
	if err != nil {
		return err
	}
	return w.Flush()
}

// followEvents delivers events from the mount when one answers, else from
// the journal file, advancing *next past every event fn takes. Following
// an unmounted journal polls: it never holds the journal open between
// polls, so a mount can start meanwhile, and the tail then continues from
// its control socket.
func followEvents(ctx context.Context, t target, to uint64, follow bool, fn func(journal.Event) error, next *uint64) error {
	for {
		var err error
		if c, _ := live(ctx, t); c != nil {
			err = c.Events(ctx, *next, to, follow, fn)
			c.Close()
			if follow && errors.Is(err, control.ErrUnavailable) {
				err = nil // the mount went away: continue from the file
			}
		} else {
			err = walkFile(ctx, t, *next, to, fn)
			if follow && errors.Is(err, journal.ErrLocked) {
				err = nil // a mount is starting: its socket will answer
			}
		}
		if err != nil || !follow || (to != 0 && *next > to) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// walkFile delivers events from the unmounted journal file.
func walkFile(ctx context.Context, t target, from, to uint64, fn func(journal.Event) error) error {
	j, err := openJournal(t)
	if err != nil {
		return err
	}
	defer j.Close()
	return upkeep.Walk(ctx, j, from, to, false, func(e *journal.Event) error { return fn(*e) })
}

// writeEvent prints one event as a line of text or JSON.
func writeEvent(w io.Writer, e journal.Event, asJSON bool) error {
	e.Time = e.Time.UTC()
	if e.Files == nil {
		e.Files = []journal.File{}
	}
	if asJSON {
		b, err := json.Marshal(e)
		if err != nil {
			return err
		}
		b = append(b, '\n')
		_, err = w.Write(b)
		return err
	}
	var b strings.Builder
	b.WriteString(strconv.FormatUint(e.ID, 10))
	b.WriteByte(' ')
	b.WriteString(e.Time.Format(time.RFC3339Nano))
	b.WriteByte(' ')
	b.WriteString(string(e.Type))
	b.WriteByte(' ')
	b.WriteString(e.Path)
	if e.NewPath != "" {
		b.WriteString(" -> ")
		b.WriteString(e.NewPath)
	}
	if e.Target != "" {
		b.WriteString(" target=")
		b.WriteString(e.Target)
	}
	for _, f := range e.Files {
		fmt.Fprintf(&b, " %s:%d:%s", f.Path, f.Size, f.XXH64)
		if f.CM != "" {
			b.WriteByte(':')
			b.WriteString(f.CM)
		}
	}
	b.WriteByte('\n')
	_, err := io.WriteString(w, b.String())
	return err
}
