// Package clitest runs a cli.Program in-process for the tests of the
// project's commands, and checks its config keys.
package clitest

import (
	"bytes"
	"context"
	"os"
	"slices"
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

// CheckKeys checks p's config keys (cli.Keys): no two share an
// environment variable, no flag is named like a subcommand of its command
// (a file could not reach it), no variable is one of reserved (the
// program's other variables), and the document at doc names every
// variable.
func CheckKeys(t testing.TB, p cli.Program, doc string, reserved ...string) {
	t.Helper()
	text, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	keys := cli.Keys(p)
	names := map[string]bool{}
	for _, k := range keys {
		names[k.Name()] = true
	}
	envs := map[string]string{}
	for _, k := range keys {
		if other, ok := envs[k.Env]; ok {
			t.Errorf("keys %s and %s share the variable %s", other, k.Name(), k.Env)
		}
		envs[k.Env] = k.Name()
		if slices.Contains(reserved, k.Env) {
			t.Errorf("key %s: its variable %s is reserved", k.Name(), k.Env)
		}
		for n := range names {
			if strings.HasPrefix(n, k.Name()+".") {
				t.Errorf("key %s is both a flag and a command's section (%s)", k.Name(), n)
				break
			}
		}
		if !bytes.Contains(text, []byte(k.Env)) {
			t.Errorf("%s does not list %s (%s)", doc, k.Name(), k.Env)
		}
	}
}
