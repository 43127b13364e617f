package main

import (
	"context"
	"path/filepath"
	"strings"
	"sync"

	"github.com/cmfs-project/cmfs/api/clusterpb"
	"github.com/cmfs-project/cmfs/cluster"
	"github.com/cmfs-project/cmfs/cluster/coord"
	"github.com/cmfs-project/cmfs/cluster/store"
	"github.com/cmfs-project/cmfs/container"
	"github.com/cmfs-project/cmfs/peer"
)

// clusterStoreFile is the coordinator's store in the first volume.
const clusterStoreFile = "cluster.db"

// startCluster starts, on the node's server, the coordinator (with
// --coordinator: its service registered, its loop run under wg) and the
// node's heartbeat agent. It must run before the server serves. It
// returns the words for serve's "listening on" line.
func startCluster(ctx context.Context, g *globalOptions, opts serveOptions, node *peer.Server, cs *container.Store, volume, listen, nodeID string, wg *sync.WaitGroup) (string, error) {
	log := opts.log.Logger(g.stderr).With("self", nodeID)
	var desc []string
	join := opts.join
	if opts.coordinator {
		path := opts.clusterStore
		if path == "" {
			path = filepath.Join(volume, clusterStoreFile)
		}
		st, err := store.Open(path)
		if err != nil {
			return "", err
		}
		leader := node.Config().Addr
		if leader == "" {
			leader = listen
		}
		dcfg := cluster.DefaultConfig()
		dcfg.MaintenanceRemainingRedundancy = opts.maintRedund
		dcfg.Push = opts.push
		dcfg.Timeout = opts.cmdTimeout
		c, err := coord.New(coord.Config{
			Store: st, StaleAfter: opts.staleAfter, DeadAfter: opts.deadAfter, RMInterval: opts.rmInterval,
			Decide: dcfg, Leader: leader, Log: log,
		})
		if err != nil {
			st.Close()
			return "", err
		}
		clusterpb.RegisterCoordinatorServer(node, coord.NewService(c))
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer st.Close()
			c.Run(ctx)
		}()
		desc = append(desc, "coordinator, cluster store "+path)
		if len(join) == 0 {
			join = []string{listen}
		}
	}
	a, err := coord.NewAgent(coord.AgentConfig{
		Coordinators: join, NodeID: nodeID, Rack: opts.rack, Node: node, Containers: cs,
		Interval: opts.heartbeat, Log: log,
	})
	if err != nil {
		return "", err
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		a.Run(ctx)
	}()
	desc = append(desc, "joined "+strings.Join(join, ","))
	return strings.Join(desc, "; "), nil
}
