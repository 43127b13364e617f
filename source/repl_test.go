package source

import "github.com/cmfs-project/cmfs/repl"

// The client is what repl's load and dump read a remote source through.
var (
	_ repl.Fetcher = (*Client)(nil)
	_ repl.Events  = (*Client)(nil)
)
