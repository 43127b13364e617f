package main

import (
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/sys/unix"

	"github.com/cmfs-project/cmfs/internal/cli"
)

// isTerminal reports whether w is a terminal: progress is drawn only there.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// bar draws a load's progress on one terminal line with
// schollz/progressbar: a bar over events (a spinner when their number is
// unknown), with the bytes staged and their rate in the description. It
// implements repl.Progress; redraws are limited to ten a second.
type bar struct {
	pb    *progressbar.ProgressBar
	w     io.Writer
	label string
	start time.Time
	bytes atomic.Int64
}

func newBar(w io.Writer, label string, total uint64) *bar {
	max := int64(total)
	if total == 0 {
		max = -1 // unknown: a spinner
	}
	pb := progressbar.NewOptions64(max,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(label),
		progressbar.OptionSetItsString("events"),
		progressbar.OptionShowCount(),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(100*time.Millisecond),
	)
	return &bar{pb: pb, w: w, label: label, start: time.Now()}
}

// Event implements repl.Progress.
func (b *bar) Event(uint64) { b.pb.Add64(1) }

// Bytes implements repl.Progress: called from the goroutines that fetch.
func (b *bar) Bytes(n int64) {
	total := b.bytes.Add(n)
	desc := b.label + ", " + shortBytes(total)
	if d := time.Since(b.start).Seconds(); d > 0.5 {
		desc += ", " + shortBytes(int64(float64(total)/d)) + "/s"
	}
	b.pb.Describe(desc)
}

// Done ends the line, leaving the last state drawn.
func (b *bar) Done() {
	if !b.pb.IsFinished() {
		b.pb.Exit()
	}
	fmt.Fprintln(b.w)
}

// shortBytes prints a byte count in binary units, for progress lines.
func shortBytes(n int64) string { return cli.ShortBytes(n) }
