package main

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cmfs-project/cmfs/api/clusterpb"
	"github.com/cmfs-project/cmfs/cluster"
	"github.com/cmfs-project/cmfs/cluster/coord"
	"github.com/cmfs-project/cmfs/cluster/store"
	"github.com/cmfs-project/cmfs/container"
	"github.com/cmfs-project/cmfs/internal/backoff"
	"github.com/cmfs-project/cmfs/peer"
)

// clusterStoreFile is the coordinator's store in the first volume.
const clusterStoreFile = "cluster.db"

// defaultLeaderLease is --leader-lease: a dead leader is replaced within
// about this long.
const defaultLeaderLease = 5 * time.Second

// etcdScheme starts a --cluster-store kept in etcd.
const etcdScheme = "etcd://"

// etcdEndpoints splits --cluster-store etcd://A,B into A and B; ok is
// false for a file.
func etcdEndpoints(s string) (endpoints []string, ok bool) {
	rest, ok := strings.CutPrefix(s, etcdScheme)
	if !ok {
		return nil, false
	}
	for _, e := range strings.Split(rest, ",") {
		if e != "" {
			endpoints = append(endpoints, e)
		}
	}
	return endpoints, true
}

// clusterRole is what startCluster started, for serve's "listening on"
// line and its status page.
type clusterRole struct {
	desc string
	// local is the coordinator this node runs alone (a --cluster-store
	// file); nil for a member, and for an etcd coordinator, which may be
	// standing by: the page asks join instead, itself among them.
	local *coord.Service
	// join are the coordinators the node heartbeats to.
	join []string
}

// startCluster starts, on the node's server, the coordinator (with
// --coordinator: its service registered, its loop run under wg) and the
// node's heartbeat agent. It must run before the server serves. It
// returns what it started, with the words for serve's "listening on"
// line.
func startCluster(ctx context.Context, g *globalOptions, opts serveOptions, node *peer.Server, cs *container.Store, volume, listen, nodeID string, wg *sync.WaitGroup) (clusterRole, error) {
	var role clusterRole
	log := opts.log.Logger(g.stderr).With("self", nodeID)
	var desc []string
	join := opts.join
	if opts.coordinator {
		leader := node.Config().Addr
		if leader == "" {
			leader = listen
		}
		dcfg := cluster.DefaultConfig()
		dcfg.MaintenanceRemainingRedundancy = opts.maintRedund
		dcfg.Push = opts.push
		dcfg.Timeout = opts.cmdTimeout
		cfg := coord.Config{
			StaleAfter: opts.staleAfter, DeadAfter: opts.deadAfter, RMInterval: opts.rmInterval,
			Decide: dcfg, Leader: leader, Log: log,
		}
		if endpoints, ok := etcdEndpoints(opts.clusterStore); ok {
			st, err := store.DialEtcd(endpoints)
			if err != nil {
				return role, err
			}
			svc := coord.NewStandbyService(st.Leader)
			clusterpb.RegisterCoordinatorServer(node, svc)
			if err := node.Supervisor().Register(newClusterCollector(svc, node.Supervisor().Labels())); err != nil {
				st.Close()
				return role, err
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer st.Close()
				lead(ctx, st, svc, cfg, opts.leaderLease)
			}()
			desc = append(desc, "coordinator standing for leader, cluster store "+opts.clusterStore)
			// A standby sends its own node's heartbeats on to the leader.
			if !slices.Contains(join, listen) {
				join = append(slices.Clone(join), listen)
			}
		} else {
			path := opts.clusterStore
			if path == "" {
				path = filepath.Join(volume, clusterStoreFile)
			}
			st, err := store.Open(path)
			if err != nil {
				return role, err
			}
			cfg.Store = st
			c, err := coord.New(cfg)
			if err != nil {
				st.Close()
				return role, err
			}
			role.local = coord.NewService(c)
			clusterpb.RegisterCoordinatorServer(node, role.local)
			if err := node.Supervisor().Register(newClusterCollector(role.local, node.Supervisor().Labels())); err != nil {
				st.Close()
				return role, err
			}
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
	}
	a, err := coord.NewAgent(coord.AgentConfig{
		Coordinators: join, NodeID: nodeID, Rack: opts.rack, Node: node, Containers: cs,
		Interval: opts.heartbeat, Log: log,
	})
	if err != nil {
		return role, err
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		a.Run(ctx)
	}()
	desc = append(desc, "joined "+strings.Join(join, ","))
	role.desc, role.join = strings.Join(desc, "; "), join
	return role, nil
}

// lead campaigns for leadership until ctx ends; each time it wins, it
// serves a coordinator resumed from the store (the commands the last
// leader left pending among what it loads) until its term ends. Ended
// by ctx, it resigns, for a standby to take over at once.
func lead(ctx context.Context, st *store.Etcd, svc *coord.Service, cfg coord.Config, lease time.Duration) {
	log := cfg.Log
	cfg.Store = st
	retry := backoff.Backoff{}
	for ctx.Err() == nil {
		term, err := st.Campaign(ctx, cfg.Leader, lease)
		if err != nil {
			if ctx.Err() == nil {
				log.Error("campaign for coordinator", "err", err)
				backoff.Sleep(ctx, retry.Next())
			}
			continue
		}
		c, err := coord.New(cfg)
		if err != nil {
			log.Error("lead", "err", err)
			resign(term)
			backoff.Sleep(ctx, retry.Next())
			continue
		}
		retry.Reset()
		log.Info("leading", "addr", cfg.Leader)
		tctx, cancel := context.WithCancel(ctx)
		go func() {
			select {
			case <-term.Done():
			case <-tctx.Done():
			}
			cancel()
		}()
		svc.Lead(c)
		c.Run(tctx)
		svc.Lead(nil)
		cancel()
		if ctx.Err() != nil {
			resign(term)
			return
		}
		log.Warn("leadership lost: standing by")
	}
}

// resign ends a term without waiting for its lease.
func resign(t *store.Term) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	t.Resign(ctx) // a term not resigned ends with its lease anyway
}
