// Command replicad is cmfs's replication sidecar: it turns a cmfs journal
// into dumps, serves a source's files and journal to remote destinations,
// and applies dumps at a destination warehouse so that it passes through
// exactly the states the source passed through.
//
// Each subcommand lives in its own cmd_<name>.go: newXCmd declares its
// flags and help text and passes them to runX(ctx, g, opts, args), which
// does the work. Tests run whole command lines in-process (program, through
// internal/cli/clitest).
package main

import (
	"io"

	"github.com/spf13/cobra"

	"github.com/cmfs-project/cmfs/internal/cli"
)

// globalOptions are the writers every command prints to.
type globalOptions struct {
	stdout io.Writer
	stderr io.Writer
}

func newRootCmd(g *globalOptions) *cobra.Command {
	root := cli.Root(&cobra.Command{
		Use:   "replicad",
		Short: "Dump, serve and load a cmfs warehouse's changes with exact point-in-time state",
		Long: `replicad is the sidecar of a cmfs mount. At the source it turns the cmfs
journal into dumps (metadata only: files are listed, never copied) and
serves the warehouse's files and journal to destinations; at a destination
it applies dumps event by event, fetching every file once from the live
tree or, when it changed since, from cmfs's cmroot. On every node it keeps
containers — the warehouse's data packed as checksummed blocks — and
replicates them to peers ('replicad serve --volume', 'replicad container').`,
	}, g.stdout, g.stderr)
	root.AddCommand(
		newServeCmd(g),
		newDumpCmd(g),
		newLoadCmd(g),
		newStatusCmd(g),
		newFollowCmd(g),
		newSlotsCmd(g),
		newContainerCmd(g),
		newAdminCmd(g),
	)
	for _, c := range extraCommands {
		root.AddCommand(c())
	}
	return root
}

// extraCommands are added by files built only under a build tag: the
// man page generator (man.go, -tags mangen), which never ships.
var extraCommands []func() *cobra.Command

// program is replicad as cli runs it: tests run it in-process.
var program = cli.Program{Name: "replicad", Root: func(stdout, stderr io.Writer) *cobra.Command {
	return newRootCmd(&globalOptions{stdout: stdout, stderr: stderr})
}}

func main() {
	program.Main()
}
