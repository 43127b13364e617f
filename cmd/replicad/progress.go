package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
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

// bar draws a load's progress on one terminal line: a bar over events
// (when their number is known), bytes and rate. It implements
// repl.Progress; redraws are limited to ten a second.
type bar struct {
	w     io.Writer
	label string
	total uint64 // events expected; 0: unknown

	mu     sync.Mutex
	events uint64
	bytes  int64
	start  time.Time
	drawn  time.Time
	width  int // of the last line drawn, to blank it out
}

func newBar(w io.Writer, label string, total uint64) *bar {
	return &bar{w: w, label: label, total: total, start: time.Now()}
}

// Event implements repl.Progress.
func (b *bar) Event(uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.events++
	b.draw(false)
}

// Bytes implements repl.Progress.
func (b *bar) Bytes(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.bytes += n
	b.draw(false)
}

// Done draws the final state and ends the line.
func (b *bar) Done() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.draw(true)
	fmt.Fprintln(b.w)
}

func (b *bar) draw(force bool) {
	now := time.Now()
	if !force && now.Sub(b.drawn) < 100*time.Millisecond {
		return
	}
	b.drawn = now
	var s strings.Builder
	s.WriteString(b.label)
	if b.total > 0 {
		const cells = 30
		n := min(int(b.events*cells/b.total), cells)
		fmt.Fprintf(&s, " [%s%s] %d/%d events", strings.Repeat("=", n), strings.Repeat(" ", cells-n), b.events, b.total)
	} else {
		fmt.Fprintf(&s, " %d events", b.events)
	}
	fmt.Fprintf(&s, ", %s", shortBytes(b.bytes))
	if d := now.Sub(b.start).Seconds(); d > 0.5 {
		fmt.Fprintf(&s, ", %s/s", shortBytes(int64(float64(b.bytes)/d)))
	}
	line := s.String()
	pad := max(b.width-len(line), 0)
	b.width = len(line)
	fmt.Fprintf(b.w, "\r%s%s", line, strings.Repeat(" ", pad))
}

// shortBytes prints a byte count in binary units, for progress lines.
func shortBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
