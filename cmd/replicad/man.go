//go:build mangen

package main

import "github.com/cmfs-project/cmfs/internal/cli/manpage"

// Only the generator build (-tags mangen, run by make install) has the
// hidden man-pages command; the shipped binary does not carry it.
func init() { extraCommands = append(extraCommands, manpage.Command) }
