package cli

import (
	"bytes"
	"context"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

func TestVersionOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		bi   debug.BuildInfo
		want string
	}{
		{"release", debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.3"}}, "v1.2.3 (go1.26.8)"},
		{"checkout", debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs", Value: "git"},
			{Key: "vcs.time", Value: "2026-12-02T05:04:31Z"},
			{Key: "vcs.modified", Value: "true"},
			{Key: "vcs.revision", Value: "4c06eb0a6ba70f873b5e04ba36fb69edf16e7014"},
		}}, "(devel) (revision 4c06eb0a6ba70f873b5e04ba36fb69edf16e7014, 2026-12-02T05:04:31Z, modified, go1.26.8)"},
		{"clean checkout", debug.BuildInfo{GoVersion: "go1.26.8", Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "abc"}, {Key: "vcs.modified", Value: "false"},
		}}, "(devel) (revision abc, go1.26.8)"},
	} {
		if got := versionOf(&tc.bi); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestRootSmallThings: --version and completion on every program, and a
// flag error of the root names the program once.
func TestRootSmallThings(t *testing.T) {
	run := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		root := Root(&cobra.Command{Use: "prog"}, &out, &errb)
		root.AddCommand(&cobra.Command{Use: "sub", RunE: func(*cobra.Command, []string) error { return nil }})
		return Run(context.Background(), "prog", root, &errb, args), out.String(), errb.String()
	}
	if code, out, _ := run("--version"); code != 0 || !strings.HasPrefix(out, "prog version ") || !strings.Contains(out, "go1") {
		t.Errorf("--version: exit %d, %q", code, out)
	}
	for _, shell := range []string{"bash", "zsh", "fish"} {
		if code, out, errs := run("completion", shell); code != 0 || !strings.Contains(out, "prog") || len(out) < 500 {
			t.Errorf("completion %s: exit %d, %d bytes, stderr %q", shell, code, len(out), errs)
		}
	}
	if code, _, errs := run("--bogus"); code == 0 || errs != "prog: unknown flag: --bogus (see 'prog --help')\n" {
		t.Errorf("root flag error: exit %d, stderr %q", code, errs)
	}
	if code, _, errs := run("sub", "--bogus"); code == 0 || errs != "prog: sub: unknown flag: --bogus (see 'prog sub --help')\n" {
		t.Errorf("subcommand flag error: exit %d, stderr %q", code, errs)
	}
}
