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
	"github.com/cmfs-project/cmfs/internal/checksum"
	"github.com/cmfs-project/cmfs/internal/cli"
	"github.com/cmfs-project/cmfs/journal"
)

type containerGetOptions struct {
	*containerOptions
	out     string
	cluster []string
}

func newContainerGetCmd(g *globalOptions, copts *containerOptions) *cobra.Command {
	opts := containerGetOptions{containerOptions: copts}
	cmd := &cobra.Command{
		Use:   "get (--server ADDR | --cluster COORD) XXH64 [-o FILE]",
		Short: "Read a block's bytes by its xxh64",
		Long: `Read the block whose xxh64 is XXH64 (16 hex digits, as put and cmfs
events print it; XXH64-SIZE to pick one size) from any container on the
node that serves it, and write it to standard output, or to FILE with -o
(written in full and checked, then renamed into place). The bytes are
checked against the xxh64 as they arrive: a mismatch fails the command.

With --cluster COORD (give XXH64-SIZE) the block is read from whichever
node of the cluster holds it: a whole copy, or, for an EC container, the
data cells from the nodes holding its indexes, decoded from any D good
indexes when some are missing or corrupt (a degraded read).`,
		Example: `  replicad container get --server 127.0.0.1:9870 9f86d081884c7d65 > part-0.parquet
  replicad container get --server 127.0.0.1:9870 9f86d081884c7d65-1024 -o part-0.parquet
  replicad container get --cluster 127.0.0.1:9870 9f86d081884c7d65-1024 -o part-0.parquet`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runContainerGet(cmd.Context(), g, opts, args)
		},
	}
	cmd.Flags().StringVarP(&opts.out, "output", "o", "", "write the block to `FILE` instead of standard output")
	cmd.Flags().StringSliceVar(&opts.cluster, "cluster", nil, "read from the cluster whose coordinator is at `COORD` (comma-separated for several) instead of one node")
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
	switch {
	case len(opts.cluster) > 0 && opts.server != "":
		return errors.New("--server and --cluster: give one")
	case len(opts.cluster) > 0 && b.Size < 0:
		return fmt.Errorf("block %s: with --cluster give its size too (XXH64-SIZE)", args[0])
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
	if len(opts.cluster) > 0 {
		err = getFromCluster(ctx, opts, b, w)
	} else {
		err = getFromNode(ctx, opts, b, w)
	}
	if err != nil {
		return err
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

func getFromNode(ctx context.Context, opts containerGetOptions, b container.BlockID, w io.Writer) error {
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
		return opts.nodeError("get block "+b.String(), err)
	}
	defer rc.Close()
	if _, err := io.Copy(w, rc); err != nil {
		return opts.nodeError("get block "+b.String(), err)
	}
	return nil
}

func getFromCluster(ctx context.Context, opts containerGetOptions, b container.BlockID, w io.Writer) error {
	f, err := clusterFetcher(ctx, opts.cluster, opts.creds)
	if err != nil {
		return err
	}
	defer f.Close()
	rc, err := f.Fetch(ctx, journal.File{Path: "block " + b.String(), Size: b.Size, XXH64: checksum.Format(b.Sum)})
	if err != nil {
		return err
	}
	defer rc.Close()
	if _, err := io.Copy(w, rc); err != nil {
		return fmt.Errorf("get block %s from the cluster: %w", b, err)
	}
	return nil
}
