// Command cmfs mounts a warehouse directory through a FUSE filesystem that
// preserves every deleted or overwritten file in a cmroot and journals
// every change, and reads, restores and maintains what it kept.
//
// Each subcommand lives in its own cmd_<name>.go as a thin cobra wrapper
// around a runX(ctx, opts, args) function that tests call directly.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

// globalOptions are the writers every command prints to.
type globalOptions struct {
	stdout io.Writer
	stderr io.Writer
}

func newRootCmd(g *globalOptions) *cobra.Command {
	root := &cobra.Command{
		Use:   "cmfs",
		Short: "A warehouse filesystem that preserves every deleted or overwritten file",
		Long: `cmfs mounts a backing directory through FUSE. Every delete, overwrite,
truncate or in-place write of a file is preceded by moving or copying the
original into a cmroot, and every change is recorded as an event in a
durable journal. The journal, cmroot and control socket live in a state
directory, BACKING/.cmfs by default.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		// No args to the root itself: "cmfs foo" must not print help and exit 0.
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	root.SetOut(g.stdout)
	root.SetErr(g.stderr)
	root.CompletionOptions.DisableDefaultCmd = true
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return fmt.Errorf("%s: %w (see '%s --help')", cmd.Name(), err, cmd.CommandPath())
	})
	root.AddCommand(
		newMountCmd(g),
		newUmountCmd(g),
		newEventsCmd(g),
		newRestoreCmd(g),
		newFsckCmd(g),
		newGCCmd(g),
		newStatusCmd(g),
	)
	return root
}

// exitError carries an exit code for a failure whose message is already
// out (fsck printed its report) or that is not a failure at all.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// run executes the command line and returns the process exit code.
func run(ctx context.Context, g *globalOptions, args []string) int {
	root := newRootCmd(g)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.msg != "" {
			fmt.Fprintf(g.stderr, "cmfs: %s\n", ee.msg)
		}
		return ee.code
	}
	fmt.Fprintf(g.stderr, "cmfs: %v\n", err)
	return 1
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// After the first signal the default action comes back: a second
	// Ctrl-C ends a mount that waits for busy files.
	context.AfterFunc(ctx, stop)
	code := run(ctx, &globalOptions{stdout: os.Stdout, stderr: os.Stderr}, os.Args[1:])
	stop()
	os.Exit(code)
}
