package main

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cmfs-project/cmfs/container"
	"github.com/cmfs-project/cmfs/internal/cli"
	"github.com/cmfs-project/cmfs/internal/tlsconfig"
	"github.com/cmfs-project/cmfs/peer"
)

// containerOptions are the flags every container subcommand shares: the
// node to talk to, and the client's TLS.
type containerOptions struct {
	server string
	creds  credFlags
}

func newContainerCmd(g *globalOptions) *cobra.Command {
	opts := &containerOptions{}
	cmd := &cobra.Command{
		Use:   "container",
		Short: "Put, close, list, replicate, get and verify a node's containers",
		Long: `Talk to the container service of a 'replicad serve --volume' node
(--server ADDR): write files into its open container as blocks, close it,
list its containers, replicate one to another node, read a block back by
its xxh64, verify a container's checksums.

A container is OPEN while it is filled, then CLOSED (immutable, every
checksum written), and only then replicated: the target imports it as
RECOVERING and scans it, then marks it CLOSED or UNHEALTHY. Container ids
are printed in decimal (as JSON strings with --json).

Without --tls-cert, --tls-key and --tls-ca the server must be on a
loopback address, and the command must give --token-file: the file the
node's 'replicad serve' prints, readable by the serving account only.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&opts.server, "server", "", "`ADDR` of the node ('replicad serve --listen')")
	opts.creds.register(pf, "client", "")
	cmd.AddCommand(
		newContainerPutCmd(g, opts),
		newContainerCloseCmd(g, opts),
		newContainerListCmd(g, opts),
		newContainerReplicateCmd(g, opts),
		newContainerGetCmd(g, opts),
		newContainerVerifyCmd(g, opts),
	)
	return cmd
}

// dial connects to the node; the first call shows whether it answers.
func (o *containerOptions) dial(ctx context.Context) (*peer.Client, error) {
	if o.server == "" {
		return nil, errors.New("which node? give --server ADDR")
	}
	cfg, token, err := o.creds.client(ctx, "--server", o.server)
	if err != nil {
		return nil, err
	}
	if cfg != nil {
		return peer.Dial(ctx, o.server, peer.WithTLS(cfg))
	}
	return peer.Dial(ctx, o.server, peer.WithToken(token))
}

// onContainer calls op on the node for the one container ID args name
// and returns the descriptor the node answers with.
func (o *containerOptions) onContainer(ctx context.Context, args []string, op func(*peer.Client, context.Context, uint64) (container.Descriptor, error)) (container.Descriptor, error) {
	id, err := oneID(args)
	if err != nil {
		return container.Descriptor{}, err
	}
	c, err := o.dial(ctx)
	if err != nil {
		return container.Descriptor{}, err
	}
	defer c.Close()
	d, err := op(c, ctx, id)
	if err != nil {
		return container.Descriptor{}, o.nodeError("", err) // the node's message names the container
	}
	return d, nil
}

// nodeError says what failed on the node. A node this client cannot
// reach is said so plainly, and so is a peer the node could not reach,
// instead of in gRPC's words; what is "" for an error whose message names
// the operation already (the node's own).
func (o *containerOptions) nodeError(what string, err error) error {
	msg := grpcDial.ReplaceAllString(err.Error(), "cannot connect: $1")
	msg = grpcConn.ReplaceAllString(msg, "cannot connect: $1")
	// A node's own message (what "") may tell of a peer refusing the
	// node; otherwise the refused certificate is this client's.
	if what != "" && errors.Is(err, peer.ErrUnauthenticated) && o.creds.config().Enabled() && tlsconfig.Refused(err) {
		msg = strings.TrimPrefix(msg, "cannot connect: ")
		msg = fmt.Sprintf("%s: %s refused this certificate: %s (is it signed by the node's --tls-ca, named by its --tls-allow?)", what, o.server, msg)
		return &wrapped{msg: msg, err: err}
	}
	if rest, ok := strings.CutPrefix(msg, "cannot connect: "); ok && errors.Is(err, peer.ErrUnavailable) {
		msg = fmt.Sprintf("cannot reach %s: %s", o.server, rest)
		switch {
		case strings.Contains(rest, "connection refused"):
		case o.creds.config().Enabled():
			// TLS 1.3 lets a refused client certificate show as a broken
			// pipe or an EOF rather than the server's alert.
			msg += " (the node may refuse this certificate: is it signed by the node's --tls-ca, named by its --tls-allow?)"
		default:
			msg += " (if the node serves TLS, give --tls-cert, --tls-key and --tls-ca)"
		}
	} else if msg == err.Error() {
		if what == "" {
			return err
		}
		return fmt.Errorf("%s: %w", what, err)
	}
	if what != "" {
		msg = what + ": " + msg
	}
	return &wrapped{msg: msg, err: err}
}

// grpcDial matches gRPC's words for a connection that could not be made,
// grpcConn a connection that broke as the first call went out.
var (
	grpcDial = regexp.MustCompile(`connection error: desc = "(?:transport: )?(?:Error while dialing:? )?([^"]*)"`)
	grpcConn = regexp.MustCompile(`^(?:write|read) tcp \S+->\S+: (.*)$`)
)

// wrapped is an error with a message of its own.
type wrapped struct {
	msg string
	err error
}

func (w *wrapped) Error() string { return w.msg }
func (w *wrapped) Unwrap() error { return w.err }

// parseContainerID reads a container id as List prints it.
func parseContainerID(s string) (uint64, error) {
	id, err := strconv.ParseUint(s, 10, 64)
	if err != nil || id == 0 {
		return 0, fmt.Errorf("container id %q: want the decimal number 'replicad container list' shows", s)
	}
	return id, nil
}

// oneID checks a subcommand's single container id argument.
func oneID(args []string) (uint64, error) {
	switch len(args) {
	case 0:
		return 0, errors.New("which container? give its ID")
	case 1:
		return parseContainerID(args[0])
	}
	return 0, fmt.Errorf("one container ID, not %d (%s)", len(args), strings.Join(args, " "))
}

// containerJSON is a descriptor as --json prints it.
type containerJSON struct {
	ID                 uint64    `json:"id,string"`
	State              string    `json:"state"`
	Reason             string    `json:"reason,omitempty"`
	ReplicaIndex       int       `json:"replica_index"`
	Replication        string    `json:"replication"`
	Bytes              int64     `json:"bytes"`
	Blocks             int64     `json:"blocks"`
	Chunks             int       `json:"chunks"`
	MaxSize            int64     `json:"max_size"`
	Created            time.Time `json:"created"`
	ContainerChecksum  string    `json:"container_checksum"`
	DescriptorChecksum string    `json:"descriptor_checksum"`
}

func toJSON(d container.Descriptor) containerJSON {
	return containerJSON{
		ID: d.ID, State: string(d.State), Reason: d.Reason, ReplicaIndex: d.ReplicaIndex, Replication: d.Replication,
		Bytes: d.Bytes, Blocks: d.Blocks, Chunks: d.Chunks, MaxSize: d.MaxSize, Created: d.Created,
		ContainerChecksum: d.ContainerChecksum, DescriptorChecksum: d.DescriptorChecksum,
	}
}

// summary is one line about a container: its state and contents.
func summary(d container.Descriptor) string {
	s := fmt.Sprintf("container %d: %s, %d blocks, %s", d.ID, d.State, d.Blocks, cli.Bytes(d.Bytes))
	if d.DescriptorChecksum != "" {
		s += ", descriptor checksum " + d.DescriptorChecksum
	}
	if d.Reason != "" {
		s += " (" + d.Reason + ")"
	}
	return s
}
