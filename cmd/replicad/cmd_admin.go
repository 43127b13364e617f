package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cmfs-project/cmfs/api/clusterpb"
	"github.com/cmfs-project/cmfs/cluster"
	"github.com/cmfs-project/cmfs/cluster/coord"
	"github.com/cmfs-project/cmfs/internal/cli"
	"github.com/cmfs-project/cmfs/statuspage"
)

// adminOptions are the flags every admin subcommand shares.
type adminOptions struct {
	containerOptions // --server and the credentials, as a node's
	json             bool
}

func newAdminCmd(g *globalOptions) *cobra.Command {
	opts := &adminOptions{}
	cmd := &cobra.Command{
		Use:   "admin",
		Short: "Show and change the cluster through its coordinator",
		Long: `Talk to the cluster's coordinator ('replicad serve --coordinator',
--server ADDR): list its nodes and containers, show the replication
manager's status, and decommission a node, put it in maintenance or bring
it back to service. Every subcommand prints one JSON object with --json.

Credentials are a node's: --token-file on one host, --tls-cert, --tls-key
and --tls-ca between hosts.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&opts.server, "server", "", "`ADDR` of the coordinator ('replicad serve --coordinator --listen')")
	pf.BoolVar(&opts.json, "json", false, "print one JSON object")
	opts.creds.register(pf, "client", "")
	cmd.AddCommand(
		&cobra.Command{
			Use: "nodes --server COORD [--json]", Short: "List the nodes: address, rack, health, state, containers, space",
			Args: cobra.NoArgs,
			RunE: func(cmd *cobra.Command, args []string) error { return runAdminNodes(cmd.Context(), g, opts) },
		},
		&cobra.Command{
			Use: "containers --server COORD [--json]", Short: "List the containers: replication, state, class, replicas",
			Args: cobra.NoArgs,
			RunE: func(cmd *cobra.Command, args []string) error { return runAdminContainers(cmd.Context(), g, opts) },
		},
		&cobra.Command{
			Use: "status --server COORD [--json]", Short: "Containers by class, pending commands, the last cycle, the leader",
			Args: cobra.NoArgs,
			RunE: func(cmd *cobra.Command, args []string) error { return runAdminStatus(cmd.Context(), g, opts) },
		},
		newAdminOpStateCmd(g, opts, "decommission", cluster.Decommissioning,
			"Copy every container of NODE elsewhere, then mark it DECOMMISSIONED"),
		newAdminOpStateCmd(g, opts, "maintenance", cluster.EnteringMaintenance,
			"Keep enough copies in service elsewhere, then let NODE go offline (IN_MAINTENANCE) until --end"),
		newAdminOpStateCmd(g, opts, "recommission", cluster.InService,
			"Bring NODE back to service (IN_SERVICE)"),
	)
	return cmd
}

func newAdminOpStateCmd(g *globalOptions, opts *adminOptions, name string, to cluster.OpState, short string) *cobra.Command {
	var end time.Duration
	cmd := &cobra.Command{
		Use:   name + " --server COORD NODE [--json]",
		Short: short,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return fmt.Errorf("%s which node? give one NODE id, not %d arguments", name, len(args))
			}
			if end < 0 {
				return fmt.Errorf("--end %s must not be negative", end)
			}
			return runAdminOpState(cmd.Context(), g, opts, name, args[0], to, end)
		},
	}
	if to == cluster.EnteringMaintenance {
		cmd.Use = name + " --server COORD NODE [--end DUR] [--json]"
		cmd.Flags().DurationVar(&end, "end", 0, "return the node to service after this long (default: when recommissioned)")
	}
	return cmd
}

// coordinator connects to the coordinator.
func (o *adminOptions) coordinator(ctx context.Context) (clusterpb.CoordinatorClient, func(), error) {
	if o.server == "" {
		return nil, nil, errors.New("which coordinator? give --server ADDR")
	}
	c, err := o.dial(ctx)
	if err != nil {
		return nil, nil, err
	}
	return clusterpb.NewCoordinatorClient(c.Conn()), func() { c.Close() }, nil
}

// fail says what failed, in one line: a node that does not serve the
// Coordinator service is told so.
func (o *adminOptions) fail(what string, err error) error {
	err = coord.FromStatus(err)
	if strings.Contains(err.Error(), "unknown service") {
		return fmt.Errorf("%s: %s is not a coordinator (serve --coordinator)", what, o.server)
	}
	return o.nodeError(what, err)
}

func unixNano(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// nodeJSON is a node as `admin nodes --json` prints it: as the status
// page shows it.
type nodeJSON = statuspage.ClusterNode

func nodeFromPB(n *clusterpb.NodeInfo) nodeJSON { return statuspage.NodeOf(n) }

func runAdminNodes(ctx context.Context, g *globalOptions, opts *adminOptions) error {
	c, done, err := opts.coordinator(ctx)
	if err != nil {
		return err
	}
	defer done()
	resp, err := c.Nodes(ctx, &clusterpb.NodesRequest{})
	if err != nil {
		return opts.fail("nodes", err)
	}
	nodes := make([]nodeJSON, 0, len(resp.Nodes))
	for _, n := range resp.Nodes {
		nodes = append(nodes, nodeFromPB(n))
	}
	if opts.json {
		return printJSON(g, struct {
			Nodes []nodeJSON `json:"nodes"`
		}{nodes})
	}
	w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tADDRESS\tRACK\tHEALTH\tOPSTATE\tCONTAINERS\tUSED\tFREE")
	for _, n := range nodes {
		state := n.OpState
		if !n.MaintenanceEnd.IsZero() {
			state += " until " + n.MaintenanceEnd.Format(time.RFC3339)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", n.ID, n.Addr, n.Rack, n.Health, state, n.Containers, cli.Bytes(n.UsedBytes), cli.Bytes(n.FreeBytes))
	}
	return w.Flush()
}

type replicaJSON struct {
	Node  string `json:"node"`
	Index int    `json:"index"`
	State string `json:"state"`
}

type clusterContainerJSON struct {
	ID          uint64        `json:"id,string"`
	Replication string        `json:"replication"`
	State       string        `json:"state"`
	Class       string        `json:"class"`
	Reason      string        `json:"reason,omitempty"`
	Bytes       int64         `json:"bytes"`
	Replicas    []replicaJSON `json:"replicas"`
}

func runAdminContainers(ctx context.Context, g *globalOptions, opts *adminOptions) error {
	c, done, err := opts.coordinator(ctx)
	if err != nil {
		return err
	}
	defer done()
	resp, err := c.Containers(ctx, &clusterpb.ContainersRequest{})
	if err != nil {
		return opts.fail("containers", err)
	}
	out := make([]clusterContainerJSON, 0, len(resp.Containers))
	for _, ct := range resp.Containers {
		j := clusterContainerJSON{ID: ct.Id, Replication: ct.Replication, State: ct.State, Class: ct.Class, Reason: ct.Reason, Bytes: ct.Bytes, Replicas: []replicaJSON{}}
		for _, r := range ct.Replicas {
			j.Replicas = append(j.Replicas, replicaJSON{Node: r.Node, Index: int(r.Index), State: r.State})
		}
		out = append(out, j)
	}
	if opts.json {
		return printJSON(g, struct {
			Containers []clusterContainerJSON `json:"containers"`
		}{out})
	}
	w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tREPLICATION\tSTATE\tCLASS\tREPLICAS")
	for _, ct := range out {
		var reps []string
		for _, r := range ct.Replicas {
			s := r.Node + ":" + r.State
			if r.Index != 0 {
				s = fmt.Sprintf("%s[%d]:%s", r.Node, r.Index, r.State)
			}
			reps = append(reps, s)
		}
		class := ct.Class
		if ct.Reason != "" {
			class += " (" + ct.Reason + ")"
		}
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\n", ct.ID, ct.Replication, ct.State, class, strings.Join(reps, " "))
	}
	return w.Flush()
}

type statusJSON struct {
	Leader            string           `json:"leader"`
	Nodes             int              `json:"nodes"`
	Containers        int              `json:"containers"`
	Classes           map[string]int64 `json:"classes"`
	Pending           int64            `json:"pending_commands"`
	Waiting           int64            `json:"waiting"`
	LastCycle         time.Time        `json:"last_cycle,omitzero"`
	LastCycleDuration time.Duration    `json:"last_cycle_duration_ns"`
}

func runAdminStatus(ctx context.Context, g *globalOptions, opts *adminOptions) error {
	c, done, err := opts.coordinator(ctx)
	if err != nil {
		return err
	}
	defer done()
	resp, err := c.Status(ctx, &clusterpb.StatusRequest{})
	if err != nil {
		return opts.fail("status", err)
	}
	st := statusJSON{
		Leader: resp.Leader, Nodes: int(resp.Nodes), Containers: int(resp.Containers), Classes: map[string]int64{},
		Pending: resp.Pending, Waiting: resp.Waiting, LastCycle: unixNano(resp.LastCycle), LastCycleDuration: time.Duration(resp.LastCycleDuration),
	}
	var classes []string
	for _, cc := range resp.Classes {
		st.Classes[cc.Class] = cc.Count
		classes = append(classes, fmt.Sprintf("%s %d", cc.Class, cc.Count))
	}
	if opts.json {
		return printJSON(g, st)
	}
	last := "none yet"
	if !st.LastCycle.IsZero() {
		last = fmt.Sprintf("%s (took %s)", st.LastCycle.Format(time.RFC3339), st.LastCycleDuration)
	}
	fmt.Fprintf(g.stdout, "leader %s\nnodes %d, containers %d\n%s\npending commands %d, containers waiting %d\nlast cycle %s\n",
		st.Leader, st.Nodes, st.Containers, strings.Join(classes, ", "), st.Pending, st.Waiting, last)
	return nil
}

func runAdminOpState(ctx context.Context, g *globalOptions, opts *adminOptions, verb, node string, to cluster.OpState, end time.Duration) error {
	c, done, err := opts.coordinator(ctx)
	if err != nil {
		return err
	}
	defer done()
	req := &clusterpb.SetOpStateRequest{Node: node, OpState: to.String()}
	if end > 0 {
		req.MaintenanceEnd = time.Now().Add(end).UnixNano()
	}
	resp, err := c.SetOpState(ctx, req)
	if err != nil {
		return opts.fail(verb, err) // the coordinator's message names the node
	}
	n := nodeFromPB(resp)
	if opts.json {
		return printJSON(g, n)
	}
	fmt.Fprintf(g.stdout, "node %s: %s\n", n.ID, n.OpState)
	return nil
}
