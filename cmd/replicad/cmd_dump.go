package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/cmfs-project/cmfs/repl"
)

type dumpOptions struct {
	state     string
	out       string
	from, to  uint64
	db, table string
	json      bool
	walk      bool
}

func newDumpCmd(g *globalOptions) *cobra.Command {
	var opts dumpOptions
	cmd := &cobra.Command{
		Use:   "dump --state DIR --out DUMPROOT [--from N] [--to M] [--db NAME] [--table NAME] [--json]",
		Short: "Write a dump of a warehouse's events (or its current tree) into DUMPROOT",
		Long: `Write a dump — metadata only, files are listed, never copied — into a new
directory under DUMPROOT. With --from N, an INCREMENTAL dump of events N..M
(M: --to, else the newest event when the dump starts), built from the
events alone. Without --from, a BOOTSTRAP of the tree as of the newest
event: listed from the catalog (STATE/catalog.db), which the first
BOOTSTRAP builds by walking and hashing the tree and every later one
brings up to date from the journal, so that it reads no file and races
no event. --walk lists the tree by walking and hashing it instead, pinned
to the newest event before the walk.

--db and --table keep one database or table: the dump is the warehouse
restricted to it at every event (a file or directory moved in arrives
with its content, one moved out is removed). --db takes NAME or NAME.db;
--table takes TABLE (in every database, or in --db's), DB.TABLE or
DB.db/TABLE. A name the warehouse does not hold and its journal never
named is refused. A filtered INCREMENTAL takes what a moved-in directory
held from the filter's own catalog (STATE/catalog-db=NAME-table=NAME.db),
which only that filter's dumps advance, in step with the events they
write; a filtered BOOTSTRAP, or the chain's first INCREMENTAL, seeds it
from the shared catalog (or empty, for a dump from event 1).

The dump directory is named after what it holds: incremental-N-M or
bootstrap-M, with -db=NAME and -table=NAME appended for a filtered dump.
An interrupted dump is continued when the same command is run again: a
rerun without --to takes up the unfinished dump of the same kind, from
and filter it finds in DUMPROOT.

Prints the dump directory and its last event id; --json prints one object
with keys dump, kind, from, to.`,
		Example: `  replicad dump --state /data/warehouse/.cmfs --out /dumps
  replicad dump --state /data/warehouse/.cmfs --out /dumps --from 101 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("from") && opts.from == 0 {
				return errors.New("--from must be at least 1 (leave it out for a BOOTSTRAP)")
			}
			return runDump(cmd.Context(), g, opts, args)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.state, "state", "", "the mount's state `DIR`")
	f.StringVar(&opts.out, "out", "", "`DUMPROOT`: the directory the dump directory is made in")
	f.Uint64Var(&opts.from, "from", 0, "first event `N` of an INCREMENTAL dump (none: BOOTSTRAP)")
	f.Uint64Var(&opts.to, "to", 0, "last event `M` (default: the newest at the start)")
	f.StringVar(&opts.db, "db", "", "keep only database `NAME` (NAME or NAME.db)")
	f.StringVar(&opts.table, "table", "", "keep only table `NAME` (TABLE, DB.TABLE or DB.db/TABLE)")
	f.BoolVar(&opts.json, "json", false, "print one JSON object")
	f.BoolVar(&opts.walk, "walk", false, "BOOTSTRAP: walk and hash the tree instead of listing the catalog")
	return cmd
}

// checkFilter refuses a filter that names nothing the warehouse holds or
// its journal ever named up to to (0: the newest event): a misspelt name
// would make an empty dump that looks like a good one. A database that
// does not exist yet is refused too; dump it once it does (a target loses
// nothing by waiting: a later dump covers the events before).
func checkFilter(ctx context.Context, events repl.Events, m mount, db, table string, to uint64) error {
	if to == 0 {
		last, err := events.Last(ctx)
		if err != nil {
			return err
		}
		to = last
	}
	seen, err := repl.FilterSeen(ctx, events, m.backing, db, table, to)
	if err != nil || seen {
		return err
	}
	switch {
	case table == "":
		return fmt.Errorf("--db %s: no database %s.db in %s, nor in its journal up to event %d", db, db, m.backing, to)
	case db == "":
		return fmt.Errorf("--table %s: no table %s in any database of %s, nor in its journal up to event %d", table, table, m.backing, to)
	}
	return fmt.Errorf("--table %s.%s: no table %s.db/%s in %s, nor in its journal up to event %d", db, table, db, table, m.backing, to)
}

// filterCatalogAt says whether a filter's own catalog can serve a
// filtered INCREMENTAL from from as it is: built, at or before from-1.
func filterCatalogAt(c *repl.Catalog, from uint64) bool {
	if c == nil || from == 0 {
		return false
	}
	at, built, err := c.At()
	return err == nil && built && at < from
}

// dumpReport is what dump prints with --json.
type dumpReport struct {
	Dump string    `json:"dump"`
	Kind repl.Kind `json:"kind"`
	From uint64    `json:"from"`
	To   uint64    `json:"to"`
}

func runDump(ctx context.Context, g *globalOptions, opts dumpOptions, _ []string) error {
	if opts.state == "" {
		return errors.New("which warehouse? give --state DIR")
	}
	if opts.out == "" {
		return errors.New("where to? give --out DUMPROOT")
	}
	if opts.from == 0 && opts.to != 0 {
		return errors.New("--to needs --from: a BOOTSTRAP is pinned to the newest event when it starts")
	}
	if opts.walk && opts.from != 0 {
		return errors.New("--walk is for a BOOTSTRAP (leave out --from)")
	}
	if opts.to != 0 && opts.to < opts.from {
		return fmt.Errorf("--to %d is before --from %d", opts.to, opts.from)
	}
	db, table, err := repl.ParseFilter(opts.db, opts.table)
	if err != nil {
		return err
	}
	m, err := resolveMount(opts.state, "")
	if err != nil {
		return err
	}
	root, err := makeDirectory("dump root", opts.out)
	if err != nil {
		return err
	}
	events, closeEvents, err := openEvents(ctx, m)
	if err != nil {
		return err
	}
	defer closeEvents()

	if db != "" || table != "" {
		if err := checkFilter(ctx, events, m, db, table, opts.to); err != nil {
			return err
		}
	}
	do := repl.DumpOptions{From: opts.from, To: opts.to, DB: db, Table: table, Source: m.sourceID()}
	if opts.from == 0 {
		do.Tree = m.tree()
	}
	filtered := db != "" || table != ""
	if filtered && !opts.walk {
		// A filtered INCREMENTAL takes what moves into the filter from
		// the filter's own catalog, which it advances in step; a
		// filtered BOOTSTRAP seeds it.
		c, err := repl.OpenCatalog(filepath.Join(m.state, repl.FilterCatalogFile(db, table)))
		if err != nil {
			return err
		}
		defer c.Close()
		do.FilterCatalog = c
	}
	if opts.from == 0 && !opts.walk || filtered && !filterCatalogAt(do.FilterCatalog, opts.from) {
		// The shared catalog: what a BOOTSTRAP lists, and what a filter's
		// own catalog is seeded from (held only when needed: one process
		// holds it at a time).
		c, err := repl.OpenCatalog(filepath.Join(m.state, repl.CatalogFile))
		if err != nil {
			return err
		}
		defer c.Close()
		do.Catalog = c
	}

	dir, err := dumpDir(ctx, root, events, &do)
	if err != nil {
		return err
	}
	res, err := repl.Dump(ctx, events, dir, do)
	if err != nil {
		return err
	}
	if res.Kind == repl.Bootstrap {
		// The dump pins its own to, which may be past the one the name
		// was made from: name the finished dump after what it holds.
		named := filepath.Join(filepath.Dir(res.Dir), dumpName(res.Kind, 0, res.To, do.DB, do.Table))
		if named != res.Dir && os.Rename(res.Dir, named) == nil {
			res.Dir = named
		}
	}
	r := dumpReport{Dump: res.Dir, Kind: res.Kind, From: res.From, To: res.To}
	if opts.json {
		return printJSON(g, r)
	}
	if r.Kind == repl.Bootstrap {
		fmt.Fprintf(g.stdout, "%s\nBOOTSTRAP up to event %d\n", r.Dump, r.To)
	} else {
		fmt.Fprintf(g.stdout, "%s\nINCREMENTAL events %d..%d\n", r.Dump, r.From, r.To)
	}
	return nil
}

// dumpDir picks the directory under root for the dump opts asks for, and
// pins opts.To for an INCREMENTAL dump. A dump of the same kind, from,
// source and filter that was left unfinished in root is taken up again
// (unless --to asks for another end); otherwise the name is made from the
// kind, from and to — the newest event now, for a BOOTSTRAP and an
// INCREMENTAL without --to — so a finished dump rerun with the same
// arguments while no new event arrived is found as it is.
func dumpDir(ctx context.Context, root string, events repl.Events, opts *repl.DumpOptions) (string, error) {
	kind := repl.Incremental
	if opts.From == 0 {
		kind = repl.Bootstrap
	}
	if dir, md, ok := unfinishedDump(root, kind, *opts); ok {
		if kind == repl.Incremental {
			opts.To = md.To
		}
		return dir, nil
	}
	to := opts.To
	if to == 0 {
		last, err := events.Last(ctx)
		if err != nil {
			return "", err
		}
		if kind == repl.Incremental && opts.From > last {
			return "", fmt.Errorf("from %d: the journal ends at %d: %w", opts.From, last, repl.ErrNoEvents)
		}
		to = last
		if kind == repl.Incremental {
			opts.To = to
		}
	}
	return filepath.Join(root, dumpName(kind, opts.From, to, opts.DB, opts.Table)), nil
}

// dumpName is the name of a dump directory.
func dumpName(kind repl.Kind, from, to uint64, db, table string) string {
	name := "bootstrap-" + strconv.FormatUint(to, 10)
	if kind == repl.Incremental {
		name = "incremental-" + strconv.FormatUint(from, 10) + "-" + strconv.FormatUint(to, 10)
	}
	if db != "" {
		name += "-db=" + repl.Escape(db)
	}
	if table != "" {
		name += "-table=" + repl.Escape(table)
	}
	return name
}

// unfinishedDump looks in root for an unfinished dump that a rerun of
// opts should continue: same kind, from, source and filter, and same to
// when opts has one. With several, the one reaching furthest wins.
func unfinishedDump(root string, kind repl.Kind, opts repl.DumpOptions) (string, repl.Metadata, bool) {
	ents, err := os.ReadDir(root)
	if err != nil {
		return "", repl.Metadata{}, false
	}
	var (
		best   string
		bestMD repl.Metadata
	)
	for _, ent := range ents {
		if !ent.IsDir() {
			continue
		}
		dir := filepath.Join(root, ent.Name())
		md, err := repl.ReadMetadata(dir)
		if err != nil || md.Kind != kind || md.Source != opts.Source || md.DB != opts.DB || md.Table != opts.Table {
			continue
		}
		if kind == repl.Incremental && (md.From != opts.From || opts.To != 0 && md.To != opts.To) {
			continue
		}
		if _, err := repl.ReadFinished(dir); !errors.Is(err, repl.ErrIncomplete) {
			continue
		}
		if best == "" || md.To > bestMD.To {
			best, bestMD = dir, md
		}
	}
	return best, bestMD, best != ""
}
