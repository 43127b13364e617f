// Package cli holds what the project's commands (cmfs, replicad) share:
// running a cobra command tree with one-line errors and exit codes; every
// flag settable from a YAML config file and an environment variable too
// (config.go, configure.go: flags > environment > file > defaults, every
// value read by the flag's own parser, every error at its line); and the
// small helpers their argument checks and output use.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

// ExitError carries an exit code for a failure whose message is already
// out (fsck printed its report), or that is not a failure at all. An empty
// Msg prints nothing.
type ExitError struct {
	Code int
	Msg  string
}

func (e *ExitError) Error() string { return e.Msg }

// Root sets up a command tree's root the way every command here wants it:
// errors returned, not printed by cobra; no help for a bare stray argument;
// flag errors that name the command.
func Root(root *cobra.Command, stdout, stderr io.Writer) *cobra.Command {
	root.SilenceUsage = true
	root.SilenceErrors = true
	// No args to the root itself: "cmd foo" must not print help and exit 0.
	root.Args = cobra.NoArgs
	root.RunE = func(cmd *cobra.Command, args []string) error { return cmd.Help() }
	root.SetOut(stdout)
	root.SetErr(stderr)
	// --version, and "completion bash|zsh|fish|powershell" (cobra's).
	root.Version = Version()
	root.SetVersionTemplate("{{.Name}} version {{.Version}}\n")
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		if !cmd.HasParent() {
			// Run names the program already.
			return fmt.Errorf("%w (see '%s --help')", err, cmd.CommandPath())
		}
		return fmt.Errorf("%s: %w (see '%s --help')", cmd.Name(), err, cmd.CommandPath())
	})
	return root
}

// Version says which build is running, from what the Go toolchain
// recorded in the binary: the module version (a release tag, or a
// pseudo-version or "(devel)" for a build from a checkout), then the VCS
// revision, its time and "modified" when the work tree had uncommitted
// changes (a build with -buildvcs, which make build asks for), and the Go
// version.
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown (no build information in the binary)"
	}
	return versionOf(bi)
}

func versionOf(bi *debug.BuildInfo) string {
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var extra []string
	for _, s := range bi.Settings {
		switch {
		case s.Key == "vcs.revision":
			extra = append([]string{"revision " + s.Value}, extra...)
		case s.Key == "vcs.modified" && s.Value == "true":
			extra = append(extra, "modified")
		case s.Key == "vcs.time":
			extra = append(extra, s.Value)
		}
	}
	extra = append(extra, bi.GoVersion)
	return v + " (" + strings.Join(extra, ", ") + ")"
}

// Run executes root with args and returns the process exit code: 0, the
// code of an ExitError, 130 when interrupted, 1 for any other error, which
// it prints as one line "name: error" on stderr.
func Run(ctx context.Context, name string, root *cobra.Command, stderr io.Writer, args []string) int {
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		if ee.Msg != "" {
			fmt.Fprintf(stderr, "%s: %s\n", name, ee.Msg)
		}
		return ee.Code
	}
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		fmt.Fprintf(stderr, "%s: interrupted\n", name)
		return 130
	}
	fmt.Fprintf(stderr, "%s: %v\n", name, err)
	return 1
}

// Main runs run with a context that SIGINT and SIGTERM cancel, and exits
// with its code. After the first signal the default action comes back: a
// second Ctrl-C ends a command that is slow to wind down.
func Main(run func(ctx context.Context) int) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	context.AfterFunc(ctx, stop)
	code := run(ctx)
	stop()
	os.Exit(code)
}

// Directory returns the absolute, symlink-free path of an existing
// directory, or an error that names what it is for.
func Directory(what, p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", fmt.Errorf("%s %s: %w", what, p, err)
	}
	fi, err := os.Stat(abs)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("%s %s does not exist", what, p)
	}
	if err != nil {
		return "", fmt.Errorf("%s %s: %w", what, p, UnwrapPath(err))
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("%s %s is not a directory", what, p)
	}
	return filepath.EvalSymlinks(abs)
}

// UnwrapPath drops the *fs.PathError wrapper whose path the caller's
// message already names.
func UnwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// Bytes prints a byte count exactly and, when large, in binary units.
func Bytes(n int64) string {
	if n < 1024 {
		return fmt.Sprintf("%d bytes", n)
	}
	return fmt.Sprintf("%d bytes (%s)", n, ShortBytes(n))
}

// UnwrapOp drops the *net.OpError wrapper whose address the caller's
// message already names.
func UnwrapOp(err error) error {
	var oe *net.OpError
	if errors.As(err, &oe) {
		return oe.Err
	}
	return err
}
