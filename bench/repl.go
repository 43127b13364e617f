package bench

import (
	"github.com/cmfs-project/cmfs/internal/durable"

	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/cmfs-project/cmfs/journal"
	"github.com/cmfs-project/cmfs/repl"
)

// The replication benchmark (bench/cmd/replbench) compares replicad's work
// with one baseline per row, each measured in the same run: an incremental
// dump against writing the same directories with a plain loop, a bootstrap
// against a `find` walk of the same tree, a load against `cp -a` of the
// same data, the follow lag against the journal relay's own lag.

// ReplTarget is a goal of a replication row: a minimum of the ratio
// against the row's baseline (oriented so that ≥ 1 is good), or a maximum
// of the measured value itself. Text states it as the issue does.
type ReplTarget struct {
	MinRatio float64 // 0: no ratio goal
	MaxValue float64 // 0: no value goal
	Text     string
}

// ReplRow is one row of the replication table: the median of the runs of
// what is measured and of its baseline, in the row's unit.
type ReplRow struct {
	Name     string
	Unit     string // "events/s", "s", "ms", "B/B"
	Higher   bool   // bigger values are better (throughput)
	Baseline string // what the baseline is; empty: none
	Target   ReplTarget

	Runs, BaseRuns []float64
	Err, BaseErr   string
}

// Add records one run of what the row measures.
func (r *ReplRow) Add(v float64) { r.Runs = append(r.Runs, v) }

// AddBase records one run of the baseline.
func (r *ReplRow) AddBase(v float64) { r.BaseRuns = append(r.BaseRuns, v) }

// Fail records why the row has no value; the first reason stays.
func (r *ReplRow) Fail(err error) {
	if r.Err == "" {
		r.Err = err.Error()
	}
}

// FailBase records why the baseline has no value.
func (r *ReplRow) FailBase(err error) {
	if r.BaseErr == "" {
		r.BaseErr = err.Error()
	}
}

// FailRows records err in every row of a phase that cannot go on, and
// returns them.
func FailRows(rows []*ReplRow, err error) []*ReplRow {
	for _, r := range rows {
		r.Fail(err)
	}
	return rows
}

// Value is the median of the runs; ok is false when there is none.
func (r *ReplRow) Value() (float64, bool) {
	if r.Err != "" || len(r.Runs) == 0 {
		return 0, false
	}
	return median(r.Runs), true
}

// BaseValue is the median of the baseline's runs.
func (r *ReplRow) BaseValue() (float64, bool) {
	if r.Baseline == "" || r.BaseErr != "" || len(r.BaseRuns) == 0 {
		return 0, false
	}
	return median(r.BaseRuns), true
}

// Ratio compares the value with the baseline so that ≥ 1 means at least as
// good as the baseline: value÷baseline for throughput, baseline÷value for
// times.
func (r *ReplRow) Ratio() (float64, bool) {
	v, ok1 := r.Value()
	b, ok2 := r.BaseValue()
	if !ok1 || !ok2 || v <= 0 || b <= 0 {
		return 0, false
	}
	if r.Higher {
		return v / b, true
	}
	return b / v, true
}

// Met reports whether the row meets its target; ok is false when it has
// no target or it cannot be told.
func (r *ReplRow) Met() (met, ok bool) {
	t := r.Target
	if t.MinRatio == 0 && t.MaxValue == 0 {
		return false, false
	}
	met = true
	if t.MinRatio > 0 {
		ratio, ok := r.Ratio()
		if !ok {
			return false, false
		}
		met = met && ratio >= t.MinRatio
	}
	if t.MaxValue > 0 {
		v, ok := r.Value()
		if !ok {
			return false, false
		}
		// A relative slack of 1e-9 keeps 1.0 bytes per byte, computed
		// from two int64 counts, from failing on rounding.
		met = met && v <= t.MaxValue*(1+1e-9)
	}
	return met, true
}

// ReplTable is the replication benchmark's result.
type ReplTable struct {
	Subject string // the column of what is measured ("replicad")
	Rows    []*ReplRow
}

func (t *ReplTable) header() []string {
	return []string{"workload", "unit", t.Subject, "baseline", "baseline value", "ratio", "target"}
}

func (t *ReplTable) cells(r *ReplRow) []string {
	c := []string{r.Name, r.Unit}
	if v, ok := r.Value(); ok {
		c = append(c, formatRepl(r.Unit, v))
	} else {
		c = append(c, "n/a")
	}
	switch b, ok := r.BaseValue(); {
	case r.Baseline == "":
		c = append(c, "—", "—")
	case ok:
		c = append(c, r.Baseline, formatRepl(r.Unit, b))
	default:
		c = append(c, r.Baseline, "n/a")
	}
	if ratio, ok := r.Ratio(); ok {
		c = append(c, formatRatio(ratio))
	} else {
		c = append(c, "—")
	}
	goal := r.Target.Text
	switch met, ok := r.Met(); {
	case goal == "":
		goal = "—"
	case !ok:
		goal += " n/a"
	case met:
		goal += " ok"
	default:
		goal += " MISS"
	}
	return append(c, goal)
}

func formatRepl(unit string, v float64) string {
	switch unit {
	case "s":
		return fmt.Sprintf("%.2f", v)
	case "B/B":
		return fmt.Sprintf("%.4f", v)
	case "ms":
		if v < 10 {
			return fmt.Sprintf("%.1f", v)
		}
	}
	return fmt.Sprintf("%.0f", v)
}

// WriteText writes the table aligned in columns.
func (t *ReplTable) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(t.header(), "\t")+"\t")
	for _, r := range t.Rows {
		fmt.Fprintln(tw, strings.Join(t.cells(r), "\t")+"\t")
	}
	return tw.Flush()
}

// WriteMarkdown writes the table as GitHub markdown.
func (t *ReplTable) WriteMarkdown(w io.Writer) error {
	h := t.header()
	fmt.Fprintf(w, "| %s |\n", strings.Join(h, " | "))
	fmt.Fprintln(w, "|---|---|---:|---|---:|---:|---|")
	for _, r := range t.Rows {
		cells := t.cells(r)
		for i, c := range cells {
			cells[i] = strings.ReplaceAll(c, "|", `\|`) // a shell pipe in a baseline
		}
		if _, err := fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | ")); err != nil {
			return err
		}
	}
	return nil
}

// Legend explains how to read the ratios.
func (t *ReplTable) Legend() string {
	return fmt.Sprintf("Values are medians of the runs. Ratios are oriented so that ≥ 1 means %[1]s is at least as good as "+
		"the baseline: %[1]s÷baseline for throughput (events/s), baseline÷%[1]s for times and lags (s, ms). "+
		"A target on a time is stated as the issue states it and checked on the ratio (≤ 2× find time is a ratio ≥ 0.50).", t.Subject)
}

// Notes lists failures and runs that differ by more than a factor of
// limit (slowest against fastest).
func (t *ReplTable) Notes(limit float64) []string {
	var notes []string
	for _, r := range t.Rows {
		if r.Err != "" {
			notes = append(notes, fmt.Sprintf("%s: %s", r.Name, r.Err))
		}
		if r.BaseErr != "" {
			notes = append(notes, fmt.Sprintf("%s, baseline %s: %s", r.Name, r.Baseline, r.BaseErr))
		}
		for _, s := range []struct {
			who  string
			runs []float64
		}{{t.Subject, r.Runs}, {r.Baseline, r.BaseRuns}} {
			if sp := spread(s.runs); sp > limit {
				notes = append(notes, fmt.Sprintf("%s: runs of %s differ by %.1f×", r.Name, s.who, sp))
			}
		}
	}
	return notes
}

func spread(runs []float64) float64 {
	if len(runs) < 2 {
		return 1
	}
	lo, hi := runs[0], runs[0]
	for _, v := range runs[1:] {
		lo, hi = min(lo, v), max(hi, v)
	}
	if lo <= 0 {
		return 1
	}
	return hi / lo
}

// Percentile returns the p-th percentile (0 < p <= 100) of d by the
// nearest-rank method: the smallest value with at least p% of the values
// at or below it. d need not be sorted; it is not modified.
func Percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	return s[min(max(rank, 1), len(s))-1]
}

// SyntheticEvents returns n INSERT events of one file each, spread over
// 28 partitions, with ids 1..n: what a warehouse that ingests small files
// journals.
func SyntheticEvents(n int) []*journal.Event {
	events := make([]*journal.Event, n)
	for i := range events {
		day := i%28 + 1
		p := fmt.Sprintf("sales.db/orders/dt=2024-01-%02d/part-%07d.parquet", day, i)
		events[i] = &journal.Event{
			Type: journal.Insert, Path: p,
			DB: "sales", Table: "orders", Partition: fmt.Sprintf("dt=2024-01-%02d", day),
			Files: []journal.File{{Path: p, Size: int64(4096 + i%4096), XXH64: journal.FormatSum(uint64(i)*0x9e3779b97f4a7c15 + 1)}},
		}
	}
	return events
}

// FillJournal appends events to l in batches of batch, as one writer does.
func FillJournal(ctx context.Context, l *journal.Log, events []*journal.Event, batch int) error {
	for i := 0; i < len(events); i += batch {
		if err := l.Append(ctx, events[i:min(i+batch, len(events))]...); err != nil {
			return fmt.Errorf("append events %d..: %w", i+1, err)
		}
	}
	return nil
}

// DumpFloor writes, for every event, the directory an INCREMENTAL dump
// writes (a temp directory with _metadata and _files, renamed to the
// event's name) in a plain loop, from bytes encoded before the clock
// starts, then syncs the filesystem once: the file-system work of a dump
// with none of its journal reading, encoding or checkpoints. out must not
// exist. It returns the time of the loop and the sync.
func DumpFloor(out string, events []*journal.Event) (time.Duration, error) {
	type encoded struct {
		name        string
		meta, files []byte
	}
	enc := make([]encoded, len(events))
	for i, e := range events {
		meta, err := json.Marshal(e)
		if err != nil {
			return 0, err
		}
		var files []byte
		for _, f := range e.Files {
			if f.CM == "" {
				files = repl.AppendFile(files, f)
			}
		}
		enc[i] = encoded{repl.EventDirName(e.ID), append(meta, '\n'), files}
	}
	if err := os.Mkdir(out, 0o755); err != nil {
		return 0, err
	}
	start := time.Now()
	for _, e := range enc {
		tmp := filepath.Join(out, ".tmp-"+e.name)
		if err := os.Mkdir(tmp, 0o755); err != nil {
			return 0, err
		}
		if err := os.WriteFile(filepath.Join(tmp, "_metadata"), e.meta, 0o644); err != nil {
			return 0, err
		}
		if err := os.WriteFile(filepath.Join(tmp, "_files"), e.files, 0o644); err != nil {
			return 0, err
		}
		if err := os.Rename(tmp, filepath.Join(out, e.name)); err != nil {
			return 0, err
		}
	}
	if err := durable.SyncFS(out); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// Tree is a warehouse table of small files for the bootstrap benchmark:
// Files files of Size bytes, spread evenly over Partitions partitions
// (<Dir>/sales.db/events/p=NNN/part-NNNNNNN), every file with distinct
// content.
type Tree struct {
	Dir        string
	Files      int
	Partitions int
	Size       int
}

// Path returns the path of file i.
func (t Tree) Path(i int) string {
	return filepath.Join(t.Dir, "sales.db", "events", fmt.Sprintf("p=%03d", i%t.Partitions), fmt.Sprintf("part-%07d", i))
}

// Create writes the tree with workers goroutines.
func (t Tree) Create(ctx context.Context, workers int) error {
	for p := range t.Partitions {
		if err := os.MkdirAll(filepath.Dir(t.Path(p)), 0o755); err != nil {
			return err
		}
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fill := newFiller(t.Size, uint64(w)+1)
			for i := w; i < t.Files; i += workers {
				if ctx.Err() != nil {
					return
				}
				if err := os.WriteFile(t.Path(i), fill.block(0x74726565, uint64(i))[:t.Size], 0o644); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		return errs[0]
	}
	return ctx.Err()
}

// Content returns the distinct bytes of file i of a data set written by
// WriteFiles-style loops: size bytes stamped with tag and i.
func Content(size int, tag uint64, i int) []byte {
	return append([]byte(nil), newFiller(size, tag^uint64(i)).block(tag, uint64(i))...)
}
