package cli

import (
	"context"
	"io"
	"os"

	"github.com/spf13/cobra"
)

// Program is one of the project's commands: its name, which starts each
// of its error lines and its environment variables, and how to build its
// command tree over the writers it prints to. Run adds --config and the
// config command (configure.go). Tests run it in-process over buffers.
type Program struct {
	Name string
	Root func(stdout, stderr io.Writer) *cobra.Command
}

// Run runs the command line args over stdout and stderr, with the flags
// the config file and the environment set, and returns the exit code, as
// Run does.
func (p Program) Run(ctx context.Context, stdout, stderr io.Writer, args []string) int {
	root := p.Root(stdout, stderr)
	p.configure(root)
	return Run(ctx, p.Name, root, stderr, args)
}

// Main runs the process's command line, as Main does.
func (p Program) Main() {
	Main(func(ctx context.Context) int { return p.Run(ctx, os.Stdout, os.Stderr, os.Args[1:]) })
}
