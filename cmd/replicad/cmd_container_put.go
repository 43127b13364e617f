package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/cmfs-project/cmfs/container"
	"github.com/cmfs-project/cmfs/internal/cli"
)

type containerPutOptions struct {
	*containerOptions
	json        bool
	replication string
}

func newContainerPutCmd(g *globalOptions, copts *containerOptions) *cobra.Command {
	opts := containerPutOptions{containerOptions: copts}
	cmd := &cobra.Command{
		Use:   "put --server ADDR [--replication replica:N] FILE... [--json]",
		Short: "Write files as blocks into a node's open container",
		Long: `Write each FILE as one block into the node's open container (one is
opened when there is none; a container that reaches the node's
--container-size closes and the next file opens a new one). For each file
it prints the container it went into, its xxh64, its size and its name:

  <container id>  <xxh64>  <size>  <file>

--json prints one object: {"files": [{"file", "container", "xxh64",
"size"}, ...]}, the container id as a string. The same bytes twice in one
container are stored once. Every file is checked to be a readable regular
file before the first is sent.

--replication (default: the node's, replica:3) is the replication config
of the container the files go into: each config has its own open
container, and the cluster keeps that many copies of it.`,
		Example: `  replicad container put --server 127.0.0.1:9870 part-0.parquet part-1.parquet
  replicad container put --server 127.0.0.1:9870 --json data/*
  replicad container put --server 127.0.0.1:9870 --replication replica:2 scratch.parquet`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runContainerPut(cmd.Context(), g, opts, args)
		},
	}
	cmd.Flags().BoolVar(&opts.json, "json", false, "print one JSON object")
	cmd.Flags().StringVar(&opts.replication, "replication", "", "the `replica:N` of the container the files go into (default: the node's)")
	return cmd
}

// putJSON is one file of put --json.
type putJSON struct {
	File      string `json:"file"`
	Container uint64 `json:"container,string"`
	XXH64     string `json:"xxh64"`
	Size      int64  `json:"size"`
}

func runContainerPut(ctx context.Context, g *globalOptions, opts containerPutOptions, args []string) error {
	if len(args) == 0 {
		return errors.New("put what? give FILE...")
	}
	if opts.replication != "" {
		if err := container.ValidateReplication(opts.replication); err != nil {
			return fmt.Errorf("put: --%w", err)
		}
	}
	for _, name := range args {
		fi, err := os.Stat(name)
		switch {
		case err != nil:
			return fmt.Errorf("put %s: %w", name, cli.UnwrapPath(err))
		case !fi.Mode().IsRegular():
			return fmt.Errorf("put %s: not a regular file", name)
		}
	}
	c, err := opts.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	var out []putJSON
	for i, name := range args {
		f, err := os.Open(name)
		if err != nil {
			return fmt.Errorf("put %s: %w", name, cli.UnwrapPath(err))
		}
		id, b, err := c.PutReplication(ctx, name, opts.replication, f)
		f.Close()
		if err != nil {
			err = opts.nodeError("put "+name, err)
			if i > 0 {
				err = fmt.Errorf("%w (the %d files before it are in)", err, i)
			}
			return err
		}
		p := putJSON{File: name, Container: id, XXH64: fmt.Sprintf("%016x", b.Sum), Size: b.Size}
		if opts.json {
			out = append(out, p)
			continue
		}
		fmt.Fprintf(g.stdout, "%d  %s  %d  %s\n", p.Container, p.XXH64, p.Size, p.File)
	}
	if opts.json {
		return printJSON(g, struct {
			Files []putJSON `json:"files"`
		}{out})
	}
	return nil
}
