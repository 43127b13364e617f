// Package logtest records what code logs through a *slog.Logger, for
// tests that check what an operator would be told: the level, the
// message and the attributes of each line.
package logtest

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
)

// Line is one logged record: its level, message and attributes (a
// group's as "group.key"), each value as slog prints it.
type Line struct {
	Level slog.Level
	Msg   string
	Attrs map[string]string
}

func (l Line) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %q", l.Level, l.Msg)
	for k, v := range l.Attrs {
		fmt.Fprintf(&b, " %s=%s", k, v)
	}
	return b.String()
}

// Recorder is a slog.Handler that keeps every record at any level;
// goroutines may log while a test reads it.
type Recorder struct {
	mu    *sync.Mutex
	lines *[]Line
	attrs []slog.Attr
	group string
}

// New returns a recorder and a logger that logs into it.
func New() (*Recorder, *slog.Logger) {
	r := &Recorder{mu: new(sync.Mutex), lines: new([]Line)}
	return r, slog.New(r)
}

// Lines returns what was logged so far, at level and above.
func (r *Recorder) Lines(level slog.Level) []Line {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Line
	for _, l := range *r.lines {
		if l.Level >= level {
			out = append(out, l)
		}
	}
	return out
}

// Find returns the lines whose message is msg.
func (r *Recorder) Find(msg string) []Line {
	var out []Line
	for _, l := range r.Lines(slog.LevelDebug) {
		if l.Msg == msg {
			out = append(out, l)
		}
	}
	return out
}

func (r *Recorder) Enabled(context.Context, slog.Level) bool { return true }

func (r *Recorder) Handle(_ context.Context, rec slog.Record) error {
	l := Line{Level: rec.Level, Msg: rec.Message, Attrs: map[string]string{}}
	for _, a := range r.attrs {
		l.Attrs[a.Key] = a.Value.Resolve().String()
	}
	rec.Attrs(func(a slog.Attr) bool {
		l.Attrs[r.key(a.Key)] = a.Value.Resolve().String()
		return true
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	*r.lines = append(*r.lines, l)
	return nil
}

func (r *Recorder) WithAttrs(as []slog.Attr) slog.Handler {
	c := *r
	c.attrs = append([]slog.Attr(nil), r.attrs...)
	for _, a := range as {
		c.attrs = append(c.attrs, slog.Attr{Key: r.key(a.Key), Value: a.Value})
	}
	return &c
}

func (r *Recorder) WithGroup(name string) slog.Handler {
	c := *r
	c.group = r.key(name)
	return &c
}

func (r *Recorder) key(k string) string {
	if r.group == "" {
		return k
	}
	return r.group + "." + k
}
