package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cmfs-project/cmfs/container"
	"github.com/cmfs-project/cmfs/internal/cli"
)

type containerGetOptions struct {
	*containerOptions
	out string
}

func newContainerGetCmd(g *globalOptions, copts *containerOptions) *cobra.Command {
	opts := containerGetOptions{containerOptions: copts}
	cmd := &cobra.Command{
		Use:   "get --server ADDR XXH64 [-o FILE]",
		Short: "Read a block's bytes by its xxh64",
		Long: `Read the block whose xxh64 is XXH64 (16 hex digits, as put and cmfs
events print it; XXH64-SIZE to pick one size) from any container on the
node that serves it, and write it to standard output, or to FILE with -o
(written in full and checked, then renamed into place). The bytes are
checked against the xxh64 as they arrive: a mismatch fails the command.`,
		Example: `  replicad container get --server 127.0.0.1:9870 9f86d081884c7d65 > part-0.parquet
  replicad container get --server 127.0.0.1:9870 9f86d081884c7d65-1024 -o part-0.parquet`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runContainerGet(cmd.Context(), g, opts, args)
		},
	}
	cmd.Flags().StringVarP(&opts.out, "output", "o", "", "write the block to `FILE` instead of standard output")
	return cmd
}

func runContainerGet(ctx context.Context, g *globalOptions, opts containerGetOptions, args []string) (err error) {
	switch len(args) {
	case 0:
		return errors.New("which block? give its XXH64")
	case 1:
	default:
		return fmt.Errorf("one block XXH64, not %d (%s)", len(args), strings.Join(args, " "))
	}
	b, err := container.ParseBlockID(args[0])
	if err != nil {
		return err
	}
	var w io.Writer = g.stdout
	var tmp *os.File
	if opts.out != "" {
		dir, err := cli.Directory("directory of -o", filepath.Dir(opts.out))
		if err != nil {
			return err
		}
		if fi, err := os.Stat(opts.out); err == nil && fi.IsDir() {
			return fmt.Errorf("-o %s is a directory", opts.out)
		}
		if tmp, err = os.CreateTemp(dir, "."+filepath.Base(opts.out)+".get-*"); err != nil {
			return fmt.Errorf("-o %s: %w", opts.out, cli.UnwrapPath(err))
		}
		defer func() {
			if tmp != nil {
				tmp.Close()
				os.Remove(tmp.Name())
			}
		}()
		w = tmp
	}
	c, err := opts.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	rc, _, err := c.Get(ctx, b)
	if errors.Is(err, container.ErrBlockNotFound) {
		return fmt.Errorf("no block %s on %s", b, opts.server)
	}
	if err != nil {
		return opts.nodeError("get block "+args[0], err)
	}
	defer rc.Close()
	if _, err := io.Copy(w, rc); err != nil {
		return opts.nodeError("get block "+args[0], err)
	}
	if tmp == nil {
		return nil
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("-o %s: %w", opts.out, err)
	}
	if err := os.Rename(tmp.Name(), opts.out); err != nil {
		return fmt.Errorf("-o %s: %w", opts.out, cli.UnwrapPath(err))
	}
	tmp = nil
	return nil
}
