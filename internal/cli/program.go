package cli

import (
	"context"
	"io"
	"os"

	"github.com/spf13/cobra"
)

// Program is one of the project's commands: its name, which starts each
// of its error lines, and how to build its command tree over the writers
// it prints to. Tests run it in-process over buffers.
type Program struct {
	Name string
	Root func(stdout, stderr io.Writer) *cobra.Command
}

// Run runs the command line args over stdout and stderr and returns the
// exit code, as Run does.
func (p Program) Run(ctx context.Context, stdout, stderr io.Writer, args []string) int {
	return Run(ctx, p.Name, p.Root(stdout, stderr), stderr, args)
}

// Main runs the process's command line, as Main does.
func (p Program) Main() {
	Main(func(ctx context.Context) int { return p.Run(ctx, os.Stdout, os.Stderr, os.Args[1:]) })
}
