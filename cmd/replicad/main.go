// Command replicad is cmfs's replication sidecar: it turns a cmfs journal
// into dumps, serves a source's files and journal to remote destinations,
// and applies dumps at a destination warehouse so that it passes through
// exactly the states the source passed through.
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
		Use:   "replicad",
		Short: "Dump, serve and load a cmfs warehouse's changes with exact point-in-time state",
		Long: `replicad is the sidecar of a cmfs mount. At the source it turns the cmfs
journal into dumps (metadata only: files are listed, never copied) and
serves the warehouse's files and journal to destinations; at a destination
it applies dumps event by event, fetching every file once from the live
tree or, when it changed since, from cmfs's cmroot.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		// No args to the root itself: "replicad foo" must not print help and exit 0.
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
		newServeCmd(g),
		newDumpCmd(g),
		newLoadCmd(g),
		newStatusCmd(g),
		newFollowCmd(g),
	)
	return root
}

// run executes the command line and returns the process exit code.
func run(ctx context.Context, g *globalOptions, args []string) int {
	root := newRootCmd(g)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		fmt.Fprintf(g.stderr, "replicad: interrupted\n")
		return 130
	}
	fmt.Fprintf(g.stderr, "replicad: %v\n", err)
	return 1
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// After the first signal the default action comes back: a second
	// Ctrl-C ends a command that is slow to wind down.
	context.AfterFunc(ctx, stop)
	code := run(ctx, &globalOptions{stdout: os.Stdout, stderr: os.Stderr}, os.Args[1:])
	stop()
	os.Exit(code)
}
