package bench

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// Unit is how a row's values are computed, shown and compared.
type Unit int

const (
	MBps         Unit = iota // 10^6 bytes per second; higher is better
	OpsPerSec                // operations per second; higher is better
	Seconds                  // elapsed time; lower is better
	Millis                   // elapsed time shown in milliseconds; lower is better
	EventsPerSec             // journal events per second; higher is better
)

func (u Unit) String() string {
	return [...]string{"MB/s", "ops/s", "s", "ms", "events/s"}[u]
}

// HigherIsBetter reports whether bigger values are better.
func (u Unit) HigherIsBetter() bool { return u != Seconds && u != Millis }

// Value turns a measurement into the row's unit (times in seconds).
func (u Unit) Value(m Measurement) float64 {
	s := m.Elapsed.Seconds()
	switch u {
	case MBps:
		return float64(m.Bytes) / 1e6 / s
	case OpsPerSec, EventsPerSec:
		return float64(m.Ops) / s
	default:
		return s
	}
}

// Format shows a value of this unit.
func (u Unit) Format(v float64) string {
	switch u {
	case MBps:
		return fmt.Sprintf("%.0f", v)
	case OpsPerSec, EventsPerSec:
		return fmt.Sprintf("%.0f", v)
	case Seconds:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.2f", v*1e3)
	}
}

// Target is one goal for the subject's column: either a ratio against a
// baseline column (Base), in the ">= 1 is good" orientation of Ratio, or,
// with Base empty, an absolute minimum of the subject's value. Subject,
// when set, names another column the goal is for (cmfs interval), instead
// of the table's subject.
type Target struct {
	Base    string
	Min     float64
	Subject string
}

func (t Target) String() string {
	var who string
	if t.Subject != "" {
		who = t.Subject + " "
	}
	if t.Base == "" {
		return fmt.Sprintf("%s≥ %s", who, compact(t.Min))
	}
	return fmt.Sprintf("%s≥ %.2f× %s", who, t.Min, t.Base)
}

func compact(v float64) string {
	if v >= 1000 && v == float64(int64(v/1000))*1000 {
		return fmt.Sprintf("%.0fk", v/1000)
	}
	return fmt.Sprintf("%g", v)
}

// Row is one workload's results: the median of its runs per
// implementation, or why there is none.
type Row struct {
	Name    string
	Unit    Unit
	Targets []Target
	Values  map[string]float64
	Runs    map[string][]float64
	Errs    map[string]string
	// Only names the one implementation the row applies to; empty means
	// all of them.
	Only string
	// Best makes Values the best run (highest throughput, shortest time)
	// instead of the median.
	Best bool
	// Threads is the workload's (Workload.Threads).
	Threads int
	// Latencies pools the time of every single operation over all runs
	// of an implementation, for workloads that time each one.
	Latencies map[string]*Latencies
	// Commits sums, per implementation, what its commit path did over
	// the runs where it was read before and after (Run with PerOp);
	// CommitErrs says why it was not.
	Commits    map[string]*CommitCount
	CommitErrs map[string]string
	// CPU sums, per implementation, the CPU time its server process used
	// over the runs where it was read before and after (Run with PerOp),
	// and the operations of those runs.
	CPU map[string]*CPUCount
}

// CPUCount is the CPU time a server used during some runs of a workload.
type CPUCount struct {
	Ops int
	CPU time.Duration
}

// AddCPU records the CPU time impl's server used in a run of ops
// operations.
func (r *Row) AddCPU(impl string, used time.Duration, ops int) {
	if r.CPU == nil {
		r.CPU = map[string]*CPUCount{}
	}
	c := r.CPU[impl]
	if c == nil {
		c = &CPUCount{}
		r.CPU[impl] = c
	}
	c.Ops += ops
	c.CPU += used
}

// CPUPerOp returns the CPU time impl's server used per operation, if
// counted.
func (r *Row) CPUPerOp(impl string) (time.Duration, bool) {
	c, ok := r.CPU[impl]
	if !ok || c.Ops == 0 {
		return 0, false
	}
	return c.CPU / time.Duration(c.Ops), true
}

// CommitCount is what a commit path did during some runs of a workload.
type CommitCount struct {
	Ops                     int // the workload's operations
	Groups, Events, Flushes uint64
}

// AddLatencies pools the op times of one run of impl.
func (r *Row) AddLatencies(impl string, l *Latencies) {
	if r.Latencies == nil {
		r.Latencies = map[string]*Latencies{}
	}
	if r.Latencies[impl] == nil {
		r.Latencies[impl] = &Latencies{}
	}
	r.Latencies[impl].Merge(l)
}

// AddCommit records what impl's commit path did in a run of ops
// operations: the difference of the readings before and after it. A reading
// that failed, or that has no commit object, is recorded as why there is no
// count.
func (r *Row) AddCommit(impl string, before, after *Commit, err error, ops int) {
	if err == nil && (before == nil || after == nil) {
		err = errors.New(`status --json has no "commit" object`)
	}
	if err != nil {
		if r.CommitErrs == nil {
			r.CommitErrs = map[string]string{}
		}
		if _, ok := r.CommitErrs[impl]; !ok {
			r.CommitErrs[impl] = err.Error()
		}
		return
	}
	if r.Commits == nil {
		r.Commits = map[string]*CommitCount{}
	}
	c := r.Commits[impl]
	if c == nil {
		c = &CommitCount{}
		r.Commits[impl] = c
	}
	c.Ops += ops
	c.Groups += after.Groups - before.Groups
	c.Events += after.Events - before.Events
	c.Flushes += after.Flushes - before.Flushes
}

// FlushesPerOp returns impl's device flushes per operation, if counted.
func (r *Row) FlushesPerOp(impl string) (float64, bool) {
	c, ok := r.Commits[impl]
	if !ok || c.Ops == 0 {
		return 0, false
	}
	return float64(c.Flushes) / float64(c.Ops), true
}

// Add records one run of impl.
func (r *Row) Add(impl string, v float64) {
	if r.Runs == nil {
		r.Runs = map[string][]float64{}
	}
	if r.Values == nil {
		r.Values = map[string]float64{}
	}
	r.Runs[impl] = append(r.Runs[impl], v)
	if r.Best {
		r.Values[impl] = best(r.Runs[impl], r.Unit)
	} else {
		r.Values[impl] = median(r.Runs[impl])
	}
}

// Fail records why impl has no value.
func (r *Row) Fail(impl string, err error) {
	if r.Errs == nil {
		r.Errs = map[string]string{}
	}
	if _, ok := r.Errs[impl]; !ok {
		r.Errs[impl] = err.Error()
	}
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func best(v []float64, u Unit) float64 {
	b := v[0]
	for _, x := range v[1:] {
		if (u.HigherIsBetter() && x > b) || (!u.HigherIsBetter() && x < b) {
			b = x
		}
	}
	return b
}

// value returns impl's median, if impl has one and did not fail.
func (r *Row) value(impl string) (float64, bool) {
	if _, failed := r.Errs[impl]; failed {
		return 0, false
	}
	v, ok := r.Values[impl]
	return v, ok && v > 0
}

// Ratio compares subject with base so that ">= 1" always means the subject
// is at least as good: subject÷base for throughput, base÷subject for time.
func (r *Row) Ratio(subject, base string) (float64, bool) {
	s, ok1 := r.value(subject)
	b, ok2 := r.value(base)
	if !ok1 || !ok2 {
		return 0, false
	}
	if r.Unit.HigherIsBetter() {
		return s / b, true
	}
	return b / s, true
}

// Met reports whether subject (or t.Subject, when t names one) meets t; ok
// is false when it cannot be told.
func (r *Row) Met(subject string, t Target) (met, ok bool) {
	if t.Subject != "" {
		subject = t.Subject
	}
	if t.Base == "" {
		v, ok := r.value(subject)
		return ok && v >= t.Min, ok
	}
	ratio, ok := r.Ratio(subject, t.Base)
	return ok && ratio >= t.Min, ok
}

// Table is the benchmark's result: rows of workloads, columns of
// implementations, ratios of Subject against every other column.
type Table struct {
	Impls   []string
	Subject string
	Rows    []*Row
	Best    bool // the rows show the best run, not the median
	// Before names the column, if any, of Subject built at an earlier
	// revision. Its ratio column is what the changes since cost; no
	// target refers to it.
	Before string
	// Extra are ratio columns of other subjects (cmfs interval against
	// loopback), after Subject's own. A column that is the subject of one
	// is not among the bases of Subject's ratios.
	Extra []RatioColumn
}

// RatioColumn is a column of Subject÷Base ratios.
type RatioColumn struct{ Subject, Base string }

func (t *Table) header() []string {
	h := []string{"workload", "unit"}
	h = append(h, t.Impls...)
	for _, b := range t.bases() {
		h = append(h, t.Subject+"/"+b)
	}
	for _, x := range t.extra() {
		h = append(h, x.Subject+"/"+x.Base)
	}
	return append(h, "target ("+t.Subject+")")
}

func (t *Table) bases() []string {
	var b []string
	for _, i := range t.Impls {
		if i != t.Subject && !slices.ContainsFunc(t.Extra, func(x RatioColumn) bool { return x.Subject == i }) {
			b = append(b, i)
		}
	}
	return b
}

// extra returns the Extra columns whose subject and base are both columns.
func (t *Table) extra() []RatioColumn {
	var x []RatioColumn
	for _, c := range t.Extra {
		if slices.Contains(t.Impls, c.Subject) && slices.Contains(t.Impls, c.Base) {
			x = append(x, c)
		}
	}
	return x
}

func (t *Table) cells(r *Row) []string {
	c := []string{r.Name, r.Unit.String()}
	for _, impl := range t.Impls {
		if v, ok := r.value(impl); ok {
			c = append(c, r.Unit.Format(v))
		} else if r.Only != "" && r.Only != impl {
			c = append(c, "—")
		} else {
			c = append(c, "n/a")
		}
	}
	for _, b := range t.bases() {
		if ratio, ok := r.Ratio(t.Subject, b); ok {
			c = append(c, formatRatio(ratio))
		} else {
			c = append(c, "—")
		}
	}
	for _, x := range t.extra() {
		if ratio, ok := r.Ratio(x.Subject, x.Base); ok {
			c = append(c, formatRatio(ratio))
		} else {
			c = append(c, "—")
		}
	}
	var goals []string
	for _, tg := range r.Targets {
		met, ok := r.Met(t.Subject, tg)
		switch {
		case !ok:
			goals = append(goals, tg.String()+" n/a")
		case met:
			goals = append(goals, tg.String()+" ok")
		default:
			goals = append(goals, tg.String()+" MISS")
		}
	}
	if len(goals) == 0 {
		goals = []string{"—"}
	}
	return append(c, strings.Join(goals, "; "))
}

// formatRatio keeps two significant digits where two decimals would
// show a thousandfold slowdown as 0.00.
func formatRatio(r float64) string {
	if r < 0.01 {
		return fmt.Sprintf("%.2g", r)
	}
	return fmt.Sprintf("%.2f", r)
}

// Legend explains how to read the ratios.
func (t *Table) Legend() string {
	stat := "medians of the runs"
	if t.Best {
		stat = "the best run of each (highest throughput, shortest time)"
	}
	s := fmt.Sprintf("Values are %[2]s. Ratios are oriented so that ≥ 1 means %[1]s is at least as good: "+
		"%[1]s÷other for throughput (MB/s, ops/s, events/s), other_time÷%[1]s_time for times (s, ms). "+
		"Targets are stated in the same orientation (a time ≤ 1.1× native is a ratio ≥ 0.91).", t.Subject, stat)
	if t.Before != "" && slices.Contains(t.Impls, t.Before) {
		s += fmt.Sprintf(" %[1]s/%[2]s compares %[1]s with itself built at an earlier revision, run alongside: "+
			"what the changes since cost (below 1: slower now); a report, with no target.", t.Subject, t.Before)
	}
	for _, x := range t.extra() {
		s += fmt.Sprintf(" %[1]s/%[2]s is the ratio of %[1]s, in the same orientation; a target that names %[1]s is checked on it.", x.Subject, x.Base)
	}
	return s
}

// WriteText writes the table aligned in columns.
func (t *Table) WriteText(w io.Writer) error {
	return WriteText(w, t.header(), mapRows(t.Rows, t.cells))
}

// WriteMarkdown writes the table as GitHub markdown.
func (t *Table) WriteMarkdown(w io.Writer) error {
	h := t.header()
	return WriteMarkdown(w, h, mapRows(t.Rows, t.cells), 0, len(h)-1)
}

// WriteText writes header and rows of cells aligned in columns, numbers
// to the right: the text form of every table the benchmarks print.
func WriteText(w io.Writer, header []string, rows [][]string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, strings.Join(header, "\t")+"\t")
	for _, cells := range rows {
		fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
	}
	return tw.Flush()
}

// WriteMarkdown writes header and rows as GitHub markdown, columns aligned
// right except those listed in left.
func WriteMarkdown(w io.Writer, header []string, rows [][]string, left ...int) error {
	fmt.Fprintf(w, "| %s |\n", strings.Join(header, " | "))
	sep := make([]string, len(header))
	for i := range sep {
		sep[i] = "---:"
	}
	for _, i := range left {
		sep[i] = "---"
	}
	fmt.Fprintf(w, "|%s|\n", strings.Join(sep, "|"))
	for _, cells := range rows {
		if _, err := fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | ")); err != nil {
			return err
		}
	}
	return nil
}

// mapRows turns each row into its cells.
func mapRows[R any](rows []R, cells func(R) []string) [][]string {
	out := make([][]string, len(rows))
	for i, r := range rows {
		out[i] = cells(r)
	}
	return out
}

// Spread lists, one line per row, the implementations whose runs differ by
// more than a factor of limit (slowest against fastest), so that a reader
// knows which ratios are within the noise.
func (t *Table) Spread(limit float64) []string {
	var lines []string
	for _, r := range t.Rows {
		var noisy []string
		for _, impl := range t.Impls {
			runs := r.Runs[impl]
			if len(runs) < 2 {
				continue
			}
			lo, hi := runs[0], runs[0]
			for _, v := range runs[1:] {
				lo, hi = min(lo, v), max(hi, v)
			}
			if lo > 0 && hi/lo > limit {
				noisy = append(noisy, fmt.Sprintf("%s %.1f×", impl, hi/lo))
			}
		}
		if len(noisy) > 0 {
			lines = append(lines, fmt.Sprintf("%s: %s", r.Name, strings.Join(noisy, ", ")))
		}
	}
	return lines
}

// Notes lists every failure recorded in the rows, one line each.
func (t *Table) Notes() []string {
	var notes []string
	for _, r := range t.Rows {
		for _, impl := range t.Impls {
			if e, ok := r.Errs[impl]; ok {
				notes = append(notes, fmt.Sprintf("%s, %s: %s", r.Name, impl, e))
			}
		}
	}
	return notes
}
