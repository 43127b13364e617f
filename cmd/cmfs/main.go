// Command cmfs mounts a warehouse directory through a FUSE filesystem that
// preserves every deleted or overwritten file in a cmroot and journals
// every change, and reads, restores and maintains what it kept.
//
// Each subcommand lives in its own cmd_<name>.go: newXCmd declares its
// flags and help text and passes them to runX(ctx, g, opts, args), which
// does the work. Tests run whole command lines in-process (program, through
// internal/cli/clitest).
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/cmfs-project/cmfs/internal/cli"
	"github.com/cmfs-project/cmfs/internal/failpoint"
)

// globalOptions are the writers every command prints to.
type globalOptions struct {
	stdout io.Writer
	stderr io.Writer
}

func newRootCmd(g *globalOptions) *cobra.Command {
	root := cli.Root(&cobra.Command{
		Use:   "cmfs",
		Short: "A warehouse filesystem that preserves every deleted or overwritten file",
		Long: `cmfs mounts a backing directory through FUSE. Every delete, overwrite,
truncate or in-place write of a file is preceded by moving or copying the
original into a cmroot, and every change is recorded as an event in a
durable journal. The journal, cmroot and control socket live in a state
directory, BACKING/.cmfs by default.`,
	}, g.stdout, g.stderr)
	root.AddCommand(
		newMountCmd(g),
		newUmountCmd(g),
		newEventsCmd(g),
		newRestoreCmd(g),
		newFsckCmd(g),
		newGCCmd(g),
		newStatusCmd(g),
		newSlotsCmd(g),
	)
	for _, c := range extraCommands {
		root.AddCommand(c())
	}
	return root
}

// extraCommands are added by files built only under a build tag: the
// man page generator (man.go, -tags mangen), which never ships.
var extraCommands []func() *cobra.Command

// program is cmfs as cli runs it: tests run it in-process.
var program = cli.Program{Name: "cmfs", Root: func(stdout, stderr io.Writer) *cobra.Command {
	return newRootCmd(&globalOptions{stdout: stdout, stderr: stderr})
}}

func main() {
	if mnt, ok := os.LookupEnv(probeEnv); ok {
		// A mount's probe of itself, in a process of its own
		// (answerProbe).
		if err := fuseAnswers(mnt); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	// Tests arm failpoints in a mount they mean to kill mid-change.
	if err := failpoint.FromEnv(); err != nil {
		fmt.Fprintln(os.Stderr, "cmfs:", err)
		os.Exit(1)
	}
	program.Main()
}
