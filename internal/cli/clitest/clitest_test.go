package clitest

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/spf13/cobra"

	"github.com/cmfs-project/cmfs/internal/cli"
)

// fake prints "out" and "err" and fails with its argument, if any.
var fake = cli.Program{Name: "fake", Root: func(stdout, stderr io.Writer) *cobra.Command {
	root := cli.Root(&cobra.Command{Use: "fake"}, stdout, stderr)
	root.AddCommand(&cobra.Command{Use: "do", RunE: func(cmd *cobra.Command, args []string) error {
		fmt.Fprint(stdout, "out")
		if len(args) > 0 {
			return errors.New(args[0])
		}
		return nil
	}})
	return root
}}

func TestRun(t *testing.T) {
	tests := []struct {
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{[]string{"do"}, 0, "out", ""},
		{[]string{"do", "broken"}, 1, "out", "fake: broken\n"},
		{[]string{"frobnicate"}, 1, "", "fake: unknown command \"frobnicate\" for \"fake\"\n"},
	}
	for _, tt := range tests {
		code, stdout, stderr := Run(t, fake, tt.args...)
		if code != tt.code || stdout != tt.stdout || stderr != tt.stderr {
			t.Errorf("Run(%q) = %d, %q, %q; want %d, %q, %q", tt.args, code, stdout, stderr, tt.code, tt.stdout, tt.stderr)
		}
	}
	Refused(t, fake, []string{"do", "broken"}, "broken")
}
