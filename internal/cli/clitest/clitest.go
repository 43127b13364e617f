// Package clitest runs a cli.Program in-process for the tests of the
// project's commands.
package clitest

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/cmfs-project/cmfs/internal/cli"
)

// Run runs p's command line args in-process and returns its exit code,
// stdout and stderr.
func Run(t testing.TB, p cli.Program, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = p.Run(context.Background(), &out, &errb, args)
	return code, out.String(), errb.String()
}

// Refused runs args, which p must refuse: a non-zero exit and one line on
// stderr, "name: …", that mentions want.
func Refused(t testing.TB, p cli.Program, args []string, want string) {
	t.Helper()
	code, _, stderr := Run(t, p, args...)
	if code == 0 {
		t.Fatalf("exit 0, want failure; stderr %q", stderr)
	}
	lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
	if len(lines) != 1 || !strings.HasPrefix(lines[0], p.Name+": ") {
		t.Errorf("stderr = %q, want one line starting with %q", stderr, p.Name+": ")
	}
	if !strings.Contains(stderr, want) {
		t.Errorf("stderr = %q, want it to mention %q", stderr, want)
	}
}
