package main

import (
	"github.com/cmfs-project/cmfs/internal/cli"
	"github.com/cmfs-project/cmfs/protect"

	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cmfs-project/cmfs/cmroot"
	"github.com/cmfs-project/cmfs/fusefs"
	"github.com/cmfs-project/cmfs/internal/statedir"
	"github.com/cmfs-project/cmfs/journal"
	"github.com/cmfs-project/cmfs/upkeep"
)

type fsckOptions struct {
	stateOptions
	repair bool
	json   bool
}

func newFsckCmd(g *globalOptions) *cobra.Command {
	var opts fsckOptions
	cmd := &cobra.Command{
		Use:   "fsck [--state DIR | BACKING] [--repair] [--json]",
		Short: "Check cmroot against the journal",
		Long: `Check that every cmroot entry an event references is present and intact,
and list orphans (entries no event references; gc removes them after the
retention). An entry gone although only events older than the retention
reference it is listed as expired (gc removed it), not missing. Runs inside the mount when it is mounted. Exits 1 when an
entry is missing or corrupt (after --repair: when the repair left one).`,
		Example: `  cmfs fsck /data/warehouse
  cmfs fsck --state /var/lib/cmfs --repair --json`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runFsck(cmd.Context(), g, opts, args)
		},
	}
	opts.addFlags(cmd)
	cmd.Flags().BoolVar(&opts.repair, "repair", false, "fix what can be fixed (index records, corrupt entries)")
	cmd.Flags().BoolVar(&opts.json, "json", false, "print the report as JSON")
	return cmd
}

func runFsck(ctx context.Context, g *globalOptions, opts fsckOptions, args []string) error {
	err := fsck(ctx, g, opts, args)
	if errors.Is(err, journal.ErrCorrupt) {
		return &cli.ExitError{Code: 1, Msg: fmt.Sprintf("%v; the journal cannot be repaired in place: "+
			"restore it from a backup, or move it aside and mount again to start an empty journal "+
			"(its events are lost; cmroot keeps the originals until gc)", err)}
	}
	return err
}

func fsck(ctx context.Context, g *globalOptions, opts fsckOptions, args []string) error {
	t, _, err := opts.resolve(args, false)
	if err != nil {
		return err
	}
	var rep upkeep.Report
	if c, _ := live(ctx, t); c != nil {
		defer c.Close()
		if rep, err = c.Fsck(ctx, opts.repair); err != nil {
			return fmt.Errorf("fsck: %w", err)
		}
	} else {
		if opts.repair {
			rec, err := recoverOffline(ctx, t)
			if err != nil {
				return err
			}
			if f := rec.Findings(t.state); f != "" {
				fmt.Fprintf(g.stderr, "cmfs: fsck: %s\n", f)
			}
		}
		off, err := openOffline(t)
		if err != nil {
			return err
		}
		defer off.Close()
		if err := off.j.Verify(); err != nil {
			return err
		}
		if rep, err = upkeep.FsckRetain(off.j, off.store, opts.repair, t.record.Retention(cmroot.DefaultRetain), time.Now()); err != nil {
			return err
		}
	}
	if opts.json {
		b, err := json.Marshal(nonNil(rep))
		if err != nil {
			return err
		}
		fmt.Fprintf(g.stdout, "%s\n", b)
	} else {
		printReport(g, rep)
	}
	if !rep.OK() {
		return &cli.ExitError{Code: 1, Msg: "fsck: " + problems(rep)}
	}
	return nil
}

func nonNil(r upkeep.Report) upkeep.Report {
	for _, l := range []*[]string{&r.Orphans, &r.Missing, &r.Expired, &r.Corrupt, &r.Remaining} {
		if *l == nil {
			*l = []string{}
		}
	}
	return r
}

func printReport(g *globalOptions, r upkeep.Report) {
	w := g.stdout
	fmt.Fprintf(w, "entries:    %d\n", r.Entries)
	fmt.Fprintf(w, "referenced: %d\n", r.Referenced)
	for _, l := range []struct {
		name  string
		names []string
	}{{"orphans", r.Orphans}, {"missing", r.Missing}, {"expired", r.Expired}, {"corrupt", r.Corrupt}} {
		fmt.Fprintf(w, "%-11s %d\n", l.name+":", len(l.names))
		for _, n := range l.names {
			fmt.Fprintf(w, "  %s\n", n)
		}
	}
	if r.Repaired {
		fmt.Fprintf(w, "index fixed: %d\n", r.IndexFixed)
		fmt.Fprintf(w, "remaining:  %d\n", len(r.Remaining))
		for _, n := range r.Remaining {
			fmt.Fprintf(w, "  %s\n", n)
		}
	}
}

// summarize is a one-line account of what fsck found.
func summarize(r upkeep.Report) string {
	var parts []string
	add := func(n int, what string) {
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, what))
		}
	}
	add(len(r.Missing), "missing")
	add(len(r.Corrupt), "corrupt")
	add(len(r.Orphans), "orphans kept until gc")
	add(len(r.Expired), "expired (removed by gc)")
	add(r.IndexFixed, "index records fixed")
	if r.Repaired && len(r.Remaining) > 0 {
		parts = append(parts, fmt.Sprintf("unrepaired: %s", strings.Join(r.Remaining, " ")))
	}
	if len(parts) == 0 {
		return "clean"
	}
	return strings.Join(parts, ", ")
}

// problems says why a report is not OK.
func problems(r upkeep.Report) string {
	if r.Repaired {
		return fmt.Sprintf("%d entries missing or corrupt after repair", len(r.Remaining))
	}
	msg := fmt.Sprintf("%d missing, %d corrupt entries", len(r.Missing), len(r.Corrupt))
	if len(r.Corrupt) > 0 {
		msg += " (cmfs fsck --repair moves corrupt entries aside to CMROOT/.corrupt)"
	}
	return msg
}

// recoverOffline journals the changes a mount that died left without
// their events (fusefs.Recover), with the journal opened for writing: the
// journal's unverified tail judged against the disk, and, when the mount
// did not stop cleanly and the machine has booted since, the tree
// reconciled with the journal. The mount record then says the state
// stopped cleanly.
func recoverOffline(ctx context.Context, t target) (rec protect.Recovery, err error) {
	if t.backing == "" {
		return protect.Recovery{}, nil // never mounted: nothing can be in flight
	}
	cfg := fusefs.Config{Backing: t.backing, State: t.state, CMRoot: t.cmroot()}.WithDefaults()
	jopts := journal.Options{LockTimeout: time.Second}
	var tail *protect.TailReport
	lost := t.record.LostWrites(statedir.BootID())
	if lost { // as a mount does (runMountForeground)
		tail = &protect.TailReport{}
		jopts.CheckTail = cfg.TailCheck(tail)
	}
	j, err := journal.Open(filepath.Join(t.state, statedir.JournalFile), jopts)
	if err != nil {
		return protect.Recovery{}, fmt.Errorf("open the journal for recovery: %w", err)
	}
	defer func() {
		if cerr := j.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close journal: %w", cerr)
		}
		if err == nil && t.record.Backing != "" {
			err = statedir.MarkClean(t.state)
		}
	}()
	store, err := openStore(t)
	if err != nil {
		return protect.Recovery{}, err
	}
	defer func() {
		if cerr := store.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close cmroot: %w", cerr)
		}
	}()
	cfg.Reconcile, cfg.Since, cfg.Tail = lost, t.record.Started, tail
	rec, err = fusefs.Recover(ctx, cfg, j, store)
	if err != nil {
		return rec, fmt.Errorf("recover: %w", err)
	}
	return rec, nil
}
