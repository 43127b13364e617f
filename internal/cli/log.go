package cli

import (
	"errors"
	"io"
	"log/slog"
	"strings"

	"github.com/spf13/pflag"
)

// LogFlags are the --log-format and --log-level flags of a command that
// runs as a daemon (cmfs mount, replicad serve and follow): what it
// reports while it runs goes through the *slog.Logger they make, as text
// (the default) or JSON lines, at info and above unless told otherwise.
// A command's one-line error on the way out is not a log line.
type LogFlags struct {
	Format LogFormat
	Level  LogLevel
}

// Register adds the flags to f.
func (l *LogFlags) Register(f *pflag.FlagSet) {
	f.Var(&l.Format, "log-format", "log `FORMAT`: text, or json (one object a line)")
	f.Var(&l.Level, "log-level", "log at this `LEVEL` and above: debug, info, warn or error")
}

// Args returns the flags that make another process log the same way
// (a daemon started again in the background).
func (l *LogFlags) Args() []string {
	return []string{"--log-format", l.Format.String(), "--log-level", l.Level.String()}
}

// Logger returns a logger that writes to w in the chosen format, at the
// chosen level and above.
func (l *LogFlags) Logger(w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: slog.Level(l.Level)}
	if l.Format == JSON {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// LogFormat is the --log-format flag's value (pflag.Value): Text or JSON.
type LogFormat int

// The log formats.
const (
	Text LogFormat = iota
	JSON
)

func (f *LogFormat) String() string {
	if *f == JSON {
		return "json"
	}
	return "text"
}

func (f *LogFormat) Set(s string) error {
	switch s {
	case "text":
		*f = Text
	case "json":
		*f = JSON
	default:
		return errors.New("want text or json")
	}
	return nil
}

func (f *LogFormat) Type() string { return "format" }

// LogLevel is the --log-level flag's value (pflag.Value); the zero value
// is info.
type LogLevel slog.Level

// logLevels are the names --log-level takes, slog's own.
var logLevels = []slog.Level{slog.LevelDebug, slog.LevelInfo, slog.LevelWarn, slog.LevelError}

func (l *LogLevel) String() string { return strings.ToLower(slog.Level(*l).String()) }

func (l *LogLevel) Set(s string) error {
	for _, lv := range logLevels {
		if strings.EqualFold(s, lv.String()) {
			*l = LogLevel(lv)
			return nil
		}
	}
	return errors.New("want debug, info, warn or error")
}

func (l *LogLevel) Type() string { return "level" }
