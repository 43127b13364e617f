package cli

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// TestLogFlags: the flags parse the four levels and two formats (and
// refuse the rest), Args gives them back, and the logger writes the
// format at the level chosen.
func TestLogFlags(t *testing.T) {
	for _, tt := range []struct {
		args    []string
		wantErr bool
		json    bool
		debug   bool // a debug line gets out
		warn    bool // a warn line gets out
	}{
		{args: nil, warn: true},
		{args: []string{"--log-format", "json"}, json: true, warn: true},
		{args: []string{"--log-level", "debug"}, debug: true, warn: true},
		{args: []string{"--log-level", "ERROR", "--log-format", "json"}, json: true},
		{args: []string{"--log-level", "warn"}, warn: true},
		{args: []string{"--log-format", "xml"}, wantErr: true},
		{args: []string{"--log-level", "info+2"}, wantErr: true},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var l LogFlags
			f := pflag.NewFlagSet("test", pflag.ContinueOnError)
			f.SetOutput(new(bytes.Buffer))
			l.Register(f)
			err := f.Parse(tt.args)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("parse %q: no error", tt.args)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var again LogFlags
			g := pflag.NewFlagSet("again", pflag.ContinueOnError)
			again.Register(g)
			if err := g.Parse(l.Args()); err != nil || again != l {
				t.Errorf("Args %q parse to %+v (%v), want %+v", l.Args(), again, err, l)
			}
			var out bytes.Buffer
			log := l.Logger(&out)
			log.Debug("a debug line", slog.Int("n", 1))
			log.Warn("a warn line", slog.String("source", "s:1"))
			lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
			if out.Len() == 0 {
				lines = nil
			}
			var msgs []string
			for _, line := range lines {
				if !tt.json {
					if !strings.HasPrefix(line, "time=") || !strings.Contains(line, " level=") {
						t.Errorf("text line %q", line)
					}
					_, m, _ := strings.Cut(line, `msg="`)
					m, _, _ = strings.Cut(m, `"`)
					msgs = append(msgs, m)
					continue
				}
				var rec map[string]any
				if err := json.Unmarshal([]byte(line), &rec); err != nil || rec["level"] == nil || rec["time"] == nil {
					t.Errorf("json line %q: %v", line, err)
				}
				m, _ := rec["msg"].(string)
				msgs = append(msgs, m)
			}
			if got := slices.Contains(msgs, "a debug line"); got != tt.debug {
				t.Errorf("debug line out: %v, want %v; %q", got, tt.debug, out.String())
			}
			if got := slices.Contains(msgs, "a warn line"); got != tt.warn {
				t.Errorf("warn line out: %v, want %v; %q", got, tt.warn, out.String())
			}
		})
	}
}
