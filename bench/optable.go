package bench

import (
	"fmt"
	"io"
	"time"
)

// OpTable is the per-operation companion of a Table: for each row whose
// operations were timed one by one, the p50 and p99 of an operation in
// every column (pooled over the runs), and, for the columns in Flushes,
// the device flushes their commit path issued per operation, and, for the
// columns in CPU, the CPU time their server used per operation.
type OpTable struct {
	Impls   []string
	Flushes []string // columns with a commit path to count
	CPU     []string // columns with a server process to read
	Rows    []*Row   // only rows with latencies are shown

	// Costs, when measured (FlushCost where the rows ran), adds the
	// ceilings that one device flush, and one commit of the filesystem's
	// journal, per operation put on the one-thread rows of column
	// Ceiling: an operation that costs what it costs in column
	// CeilingBase, and then waits for the flush or the commit.
	Costs       *FlushCosts
	Ceiling     string // the column held to them (cmfs)
	CeilingBase string // the column the wait is added to (loopback)
}

// ceiling returns the ops/s that an operation of row r followed by a wait
// of d allows, one at a time, and whether there is one.
func (t *OpTable) ceiling(r *Row, d time.Duration) (float64, bool) {
	if r.Threads != 1 || r.Unit != OpsPerSec {
		return 0, false
	}
	base, ok := r.value(t.CeilingBase)
	if !ok {
		return 0, false
	}
	return 1 / (1/base + d.Seconds()), true
}

func (t *OpTable) rows() []*Row {
	var rs []*Row
	for _, r := range t.Rows {
		if len(r.Latencies) > 0 || len(r.Commits) > 0 || len(r.CommitErrs) > 0 {
			rs = append(rs, r)
		}
	}
	return rs
}

func (t *OpTable) header() []string {
	h := []string{"workload"}
	for _, impl := range t.Impls {
		h = append(h, impl+" p50/p99 µs")
	}
	for _, impl := range t.Flushes {
		h = append(h, impl+" flushes/op")
	}
	for _, impl := range t.CPU {
		h = append(h, impl+" CPU µs/op")
	}
	if t.Costs != nil {
		h = append(h, "ceiling ops/s ("+t.CeilingBase+" + 1 flush/op)", t.Ceiling+" ÷ it",
			"ceiling ops/s ("+t.CeilingBase+" + 1 commit/op)", t.Ceiling+" ÷ it")
	}
	return h
}

func (t *OpTable) cells(r *Row) []string {
	c := []string{r.Name}
	for _, impl := range t.Impls {
		l := r.Latencies[impl]
		if _, failed := r.Errs[impl]; failed || l.Count() == 0 {
			c = append(c, "n/a")
			continue
		}
		c = append(c, micros(l.Quantile(0.5))+" / "+micros(l.Quantile(0.99)))
	}
	for _, impl := range t.Flushes {
		if v, ok := r.FlushesPerOp(impl); ok {
			c = append(c, fmt.Sprintf("%.2f", v))
		} else {
			c = append(c, "—")
		}
	}
	for _, impl := range t.CPU {
		if v, ok := r.CPUPerOp(impl); ok {
			c = append(c, micros(v))
		} else {
			c = append(c, "—")
		}
	}
	if t.Costs != nil {
		v, has := r.value(t.Ceiling)
		for _, d := range []time.Duration{t.Costs.Flush, t.Costs.Commit} {
			ceil, ok := t.ceiling(r, d)
			switch {
			case !ok:
				c = append(c, "—", "—")
			case !has:
				c = append(c, fmt.Sprintf("%.0f", ceil), "n/a")
			default:
				c = append(c, fmt.Sprintf("%.0f", ceil), fmt.Sprintf("%.2f", v/ceil))
			}
		}
	}
	return c
}

// micros shows a duration in microseconds, to three significant digits
// below 100.
func micros(d time.Duration) string {
	us := float64(d) / float64(time.Microsecond)
	if us < 100 {
		return fmt.Sprintf("%.3g", us)
	}
	return fmt.Sprintf("%.0f", us)
}

// WriteText writes the table aligned in columns.
func (t *OpTable) WriteText(w io.Writer) error {
	return WriteText(w, t.header(), mapRows(t.rows(), t.cells))
}

// WriteMarkdown writes the table as GitHub markdown.
func (t *OpTable) WriteMarkdown(w io.Writer) error {
	return WriteMarkdown(w, t.header(), mapRows(t.rows(), t.cells), 0)
}

// Legend explains the table.
func (t *OpTable) Legend() string {
	s := "Per operation: p50 / p99 of the time of one operation as the workload's thread saw it " +
		"(clock read before and after each call; all runs of a column pooled), in microseconds."
	if len(t.Flushes) > 0 {
		s += " flushes/op: the device flushes (fsync, fdatasync, syncfs) the commit path issued during the " +
			"workload's runs, from `cmfs status --json` (\"commit\") read before and after each run, ÷ its operations; " +
			"— where the status has no commit object or the column did not run."
	}
	if len(t.CPU) > 0 {
		s += " CPU µs/op: the CPU time, user and system, of all the server process's threads (/proc/PID/stat) " +
			"read before and after each run, ÷ its operations: what the server itself spent, which the host's other " +
			"load changes far less than it changes the times; the kernel's work in the workload's own calls is not in it."
	}
	if t.Costs != nil {
		s += fmt.Sprintf(" ceilings: what a one-thread row allows when each operation takes as long as in %s "+
			"(1 ÷ its ops/s) and then waits for one device flush (%s µs here: 4 KiB pwrite and fdatasync over an "+
			"allocated block) or for one commit of the filesystem's journal (%s µs: a new 4 KiB file's create, "+
			"write, fdatasync and the fsync of its directory), both measured without FUSE on a filesystem made "+
			"like the rows' (FlushCost, medians): 1 ÷ (1/ops/s + wait); %s ÷ it is how near %s's --sync=always comes.",
			t.CeilingBase, micros(t.Costs.Flush), micros(t.Costs.Commit), t.Ceiling, t.Ceiling)
	}
	return s
}

// Notes says, once per column, why its flushes were not counted.
func (t *OpTable) Notes() []string {
	var notes []string
	for _, impl := range t.Flushes {
		for _, r := range t.Rows {
			if e, ok := r.CommitErrs[impl]; ok {
				notes = append(notes, fmt.Sprintf("%s: flushes/op not counted (%s)", impl, e))
				break
			}
		}
	}
	return notes
}

// Reports prints several reports one after the other, a blank line
// between them.
type Reports []Report

func (rs Reports) WriteText(w io.Writer) error {
	return rs.each(w, Report.WriteText)
}

func (rs Reports) WriteMarkdown(w io.Writer) error {
	return rs.each(w, Report.WriteMarkdown)
}

func (rs Reports) each(w io.Writer, write func(Report, io.Writer) error) error {
	for i, r := range rs {
		if i > 0 {
			fmt.Fprintln(w)
		}
		if err := write(r, w); err != nil {
			return err
		}
	}
	return nil
}
