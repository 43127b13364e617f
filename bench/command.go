package bench

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Main is the main function of a benchmark command named name: parse reads
// its flags (an error exits 2), run runs it with a context that SIGINT,
// SIGTERM and SIGHUP cancel (an error exits 1). Either error is one line
// "name: error" on stderr.
func Main[O any](name string, parse func(args []string) (O, error), run func(ctx context.Context, stdout, stderr io.Writer, opts O) error) {
	opts, err := parse(os.Args[1:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	err = run(ctx, os.Stdout, os.Stderr, opts)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	}
}

// CanDropCaches tries DropCaches once, before a run that wants cold
// caches. When it fails, it returns the note the table carries: the
// numbers may come from the page cache.
func CanDropCaches() (ok bool, note string) {
	if err := DropCaches(); err != nil {
		return false, fmt.Sprintf("caches not dropped (%v): reads may be served from the page cache", err)
	}
	return true, ""
}

// Settle starts the next timed run from cold caches when cold, and from
// synced ones otherwise, so that no run pays for its predecessor's
// writeback.
func Settle(cold bool, logf func(string, ...any)) {
	if !cold {
		syscall.Sync()
		return
	}
	if err := DropCaches(); err != nil {
		logf("drop caches: %v", err)
	}
}

// WriteHeader prints what opens a benchmark's output: its title and the
// time, then the machine and lines, indented.
func WriteHeader(w io.Writer, title string, m Machine, lines ...string) {
	fmt.Fprintf(w, "%s, %s\n\n", title, time.Now().Format(time.RFC3339))
	for _, l := range append(m.Lines(), lines...) {
		fmt.Fprintln(w, "  "+l)
	}
}

// Report is a table of results as a benchmark prints it.
type Report interface {
	WriteText(io.Writer) error
	WriteMarkdown(io.Writer) error
}

// WriteReport prints what ends a benchmark's output: t as aligned text,
// the legend and the notes, then what docs/bench.md takes: the machine on
// one line, t as markdown and the legend again.
func WriteReport(w io.Writer, t Report, legend string, notes []string, m Machine) error {
	if err := t.WriteText(w); err != nil {
		return err
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, legend)
	if len(notes) > 0 {
		fmt.Fprintln(w, "\nnotes:")
		for _, n := range notes {
			fmt.Fprintln(w, "  - "+n)
		}
	}
	fmt.Fprintf(w, "\nmarkdown:\n\n")
	fmt.Fprintf(w, "Machine: %s.\n\n", strings.Join(m.Lines(), "; "))
	if err := t.WriteMarkdown(w); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\n%s\n", legend)
	return err
}

// Procs are the processes a run starts, their logs in Dir, stopped
// together at its end.
type Procs struct {
	Dir string

	mu    sync.Mutex
	procs []*Proc
}

// Start starts argv as StartProc does and keeps it for Stop.
func (ps *Procs) Start(name string, argv ...string) (*Proc, error) {
	p, err := StartProc(ps.Dir, name, argv...)
	if err != nil {
		return nil, err
	}
	ps.mu.Lock()
	ps.procs = append(ps.procs, p)
	ps.mu.Unlock()
	return p, nil
}

// Stop stops every process started so far, the last started first.
func (ps *Procs) Stop() {
	ps.mu.Lock()
	procs := ps.procs
	ps.procs = nil
	ps.mu.Unlock()
	for i := len(procs) - 1; i >= 0; i-- {
		procs[i].Stop()
	}
}

// ParseFlags parses args with fl, refuses positional arguments, and
// returns the names of the flags args set, which a -quick run keeps
// instead of its own values.
func ParseFlags(fl *flag.FlagSet, args []string) (set map[string]bool, err error) {
	if err := fl.Parse(args); err != nil {
		return nil, err
	}
	if fl.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fl.Arg(0))
	}
	set = map[string]bool{}
	fl.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set, nil
}
