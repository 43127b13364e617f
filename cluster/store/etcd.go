package store

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/cmfs-project/cmfs/cluster"
)

// Keys, under the store's prefix: nodes/<id> → Node;
// containers/<id %016x> → Container; replicas/<node> → the node's
// []Replica, one key so that a report is one write; commands/<id %016x>
// → Command; seq/commands → the last command id given; leader/… the
// election's keys. Values are JSON.
const (
	etcdNodes      = "nodes/"
	etcdContainers = "containers/"
	etcdReplicas   = "replicas/"
	etcdCommands   = "commands/"
	etcdSeq        = "seq/commands"
	etcdLeader     = "leader/"
)

// DefaultEtcdPrefix is where `serve --cluster-store etcd://…` keeps the
// cluster.
const DefaultEtcdPrefix = "/cmfs/cluster/"

// etcdTimeout bounds each call to etcd: Store's calls take no context.
const etcdTimeout = 5 * time.Second

// etcdMaxOps is the most writes one etcd transaction carries (the
// server refuses more than --max-txn-ops, 128 by default).
const etcdMaxOps = 100

// ErrNotLeader is wrapped when a write is refused because the
// coordinator making it no longer leads (Campaign's term ended).
var ErrNotLeader = errors.New("not the leader")

// Etcd is a Store in etcd, for several coordinators of which one leads
// (Campaign); the others stand by.
type Etcd struct {
	cli    *clientv3.Client
	prefix string

	mu    sync.Mutex
	fence []clientv3.Cmp // the current term's: every write carries it
}

var _ Store = (*Etcd)(nil)

// DialEtcd connects to the etcd cluster at endpoints (host:port) and
// keeps the store under DefaultEtcdPrefix.
func DialEtcd(endpoints []string) (*Etcd, error) {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: endpoints, DialTimeout: etcdTimeout, Logger: zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("cluster store etcd %s: %w", strings.Join(endpoints, ","), err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), etcdTimeout)
	defer cancel()
	if _, err := cli.Get(ctx, DefaultEtcdPrefix+etcdSeq); err != nil {
		cli.Close()
		return nil, fmt.Errorf("cluster store etcd %s: %w", strings.Join(endpoints, ","), err)
	}
	return NewEtcd(cli, DefaultEtcdPrefix), nil
}

// NewEtcd keeps the store in cli's etcd under prefix; Close closes cli.
func NewEtcd(cli *clientv3.Client, prefix string) *Etcd {
	return &Etcd{cli: cli, prefix: prefix}
}

// Close closes the etcd client.
func (e *Etcd) Close() error { return e.cli.Close() }

func key16(v uint64) string { return fmt.Sprintf("%016x", v) }

func (e *Etcd) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), etcdTimeout)
}

func (e *Etcd) fenced() []clientv3.Cmp {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.fence
}

// commit writes ops in transactions of at most etcdMaxOps, in order,
// each under the term's fence. Callers order ops so that a crash
// between two transactions leaves nothing a coordinator would misread.
func (e *Etcd) commit(ops []clientv3.Op, more ...clientv3.Cmp) error {
	ctx, cancel := e.ctx()
	defer cancel()
	cmps := append(slices.Clone(e.fenced()), more...)
	for len(ops) > 0 {
		n := min(len(ops), etcdMaxOps)
		resp, err := e.cli.Txn(ctx).If(cmps...).Then(ops[:n]...).Commit()
		if err != nil {
			return err
		}
		if !resp.Succeeded {
			return ErrNotLeader
		}
		ops, cmps = ops[n:], e.fenced()
	}
	return nil
}

func putOp(k string, v any) (clientv3.Op, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return clientv3.Op{}, err
	}
	return clientv3.OpPut(k, string(data)), nil
}

// Load implements Store: one read, at one revision.
func (e *Etcd) Load() (Snapshot, error) {
	ctx, cancel := e.ctx()
	defer cancel()
	resp, err := e.cli.Get(ctx, e.prefix, clientv3.WithPrefix())
	if err != nil {
		return Snapshot{}, fmt.Errorf("load cluster store: %w", err)
	}
	var s Snapshot
	for _, kv := range resp.Kvs {
		k := strings.TrimPrefix(string(kv.Key), e.prefix)
		var err error
		switch {
		case strings.HasPrefix(k, etcdNodes):
			err = decodeAppend(kv.Value, &s.Nodes)
		case strings.HasPrefix(k, etcdContainers):
			err = decodeAppend(kv.Value, &s.Containers)
		case strings.HasPrefix(k, etcdCommands):
			err = decodeAppend(kv.Value, &s.Commands)
		case strings.HasPrefix(k, etcdReplicas):
			var reps []cluster.Replica
			err = json.Unmarshal(kv.Value, &reps)
			s.Replicas = append(s.Replicas, reps...)
		}
		if err != nil {
			return Snapshot{}, fmt.Errorf("load cluster store: key %s: %w", kv.Key, err)
		}
	}
	slices.SortFunc(s.Replicas, func(a, b cluster.Replica) int {
		return cmp.Or(cmp.Compare(a.Container, b.Container), cmp.Compare(a.Node, b.Node))
	})
	return s, nil
}

func decodeAppend[T any](data []byte, out *[]T) error {
	var x T
	if err := json.Unmarshal(data, &x); err != nil {
		return err
	}
	*out = append(*out, x)
	return nil
}

// PutNode implements Store.
func (e *Etcd) PutNode(n Node) error {
	op, err := putOp(e.prefix+etcdNodes+string(n.ID), n)
	if err == nil {
		err = e.commit([]clientv3.Op{op})
	}
	if err != nil {
		return fmt.Errorf("store node %s: %w", n.ID, err)
	}
	return nil
}

// Report implements Store. The containers are written before the node's
// replicas: a crash between leaves a container no replica names yet, as
// a report about to come would.
func (e *Etcd) Report(r Report) error {
	if err := e.report(r); err != nil {
		return fmt.Errorf("store the report of %s: %w", r.Node, err)
	}
	return nil
}

func (e *Etcd) report(r Report) error {
	key := e.prefix + etcdReplicas + string(r.Node)
	held := map[cluster.ContainerID]cluster.Replica{}
	var guard []clientv3.Cmp
	if !r.Full {
		ctx, cancel := e.ctx()
		resp, err := e.cli.Get(ctx, key)
		cancel()
		if err != nil {
			return err
		}
		guard = []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", 0)}
		if len(resp.Kvs) == 1 {
			var reps []cluster.Replica
			if err := json.Unmarshal(resp.Kvs[0].Value, &reps); err != nil {
				return err
			}
			for _, rep := range reps {
				held[rep.Container] = rep
			}
			guard[0] = clientv3.Compare(clientv3.ModRevision(key), "=", resp.Kvs[0].ModRevision)
		}
	}
	for _, id := range r.Removed {
		delete(held, id)
	}
	for _, rep := range r.Replicas {
		held[rep.Container] = rep
	}
	reps := make([]cluster.Replica, 0, len(held))
	for _, rep := range held {
		reps = append(reps, rep)
	}
	slices.SortFunc(reps, func(a, b cluster.Replica) int { return cmp.Compare(a.Container, b.Container) })
	var ops []clientv3.Op
	for _, c := range r.Containers {
		op, err := putOp(e.prefix+etcdContainers+key16(uint64(c.ID)), c)
		if err != nil {
			return err
		}
		ops = append(ops, op)
	}
	if err := e.commit(ops); err != nil {
		return err
	}
	op, err := putOp(key, reps)
	if err != nil {
		return err
	}
	return e.commit([]clientv3.Op{op}, guard...)
}

// AddCommands implements Store: the ids are reserved first, so a crash
// between two transactions loses ids, never reuses one.
func (e *Etcd) AddCommands(cmds []Command) ([]Command, error) {
	out, err := e.addCommands(cmds)
	if err != nil {
		return nil, fmt.Errorf("store %d commands: %w", len(cmds), err)
	}
	return out, nil
}

func (e *Etcd) addCommands(cmds []Command) ([]Command, error) {
	seq := e.prefix + etcdSeq
	ctx, cancel := e.ctx()
	resp, err := e.cli.Get(ctx, seq)
	cancel()
	if err != nil {
		return nil, err
	}
	var last uint64
	var rev int64
	if len(resp.Kvs) == 1 {
		if last, err = strconv.ParseUint(string(resp.Kvs[0].Value), 10, 64); err != nil {
			return nil, fmt.Errorf("key %s: %w", seq, err)
		}
		rev = resp.Kvs[0].ModRevision
	}
	next := last + uint64(len(cmds))
	// Another writer of the sequence is another leader: this one is not.
	reserve := clientv3.OpPut(seq, strconv.FormatUint(next, 10))
	if err := e.commit([]clientv3.Op{reserve}, clientv3.Compare(clientv3.ModRevision(seq), "=", rev)); err != nil {
		return nil, err
	}
	out := slices.Clone(cmds)
	ops := make([]clientv3.Op, len(out))
	for i := range out {
		out[i].ID = last + 1 + uint64(i)
		if ops[i], err = putOp(e.prefix+etcdCommands+key16(out[i].ID), out[i]); err != nil {
			return nil, err
		}
	}
	if err := e.commit(ops); err != nil {
		return nil, err
	}
	return out, nil
}

// RemoveCommands implements Store.
func (e *Etcd) RemoveCommands(ids []uint64) error {
	ops := make([]clientv3.Op, len(ids))
	for i, id := range ids {
		ops[i] = clientv3.OpDelete(e.prefix + etcdCommands + key16(id))
	}
	if err := e.commit(ops); err != nil {
		return fmt.Errorf("remove %d commands: %w", len(ids), err)
	}
	return nil
}

// Term is one coordinator's time as leader: it ends when its lease
// does (the process died, or lost etcd for longer than the lease) or
// at Resign.
type Term struct {
	e        *Etcd
	session  *concurrency.Session
	election *concurrency.Election
}

// Campaign blocks until this coordinator, at addr, leads (or ctx ends),
// on a lease of ttl (whole seconds, at least one) that the client keeps
// alive. From then on every write of e carries the term's fence: once
// another coordinator leads, they fail with ErrNotLeader.
func (e *Etcd) Campaign(ctx context.Context, addr string, ttl time.Duration) (*Term, error) {
	secs := max(int((ttl+time.Second-1)/time.Second), 1)
	s, err := concurrency.NewSession(e.cli, concurrency.WithTTL(secs), concurrency.WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("campaign for coordinator: %w", err)
	}
	el := concurrency.NewElection(s, e.prefix+etcdLeader)
	if err := el.Campaign(ctx, addr); err != nil {
		s.Orphan() // its lease expires; a cancelled campaign leaves no key behind
		return nil, fmt.Errorf("campaign for coordinator: %w", err)
	}
	e.mu.Lock()
	e.fence = []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(el.Key()), "=", el.Rev())}
	e.mu.Unlock()
	return &Term{e: e, session: s, election: el}, nil
}

// Done is closed when the term's lease ended.
func (t *Term) Done() <-chan struct{} { return t.session.Done() }

// Resign ends the term at once, for a standby to take over without
// waiting for the lease.
func (t *Term) Resign(ctx context.Context) error {
	err := t.election.Resign(ctx)
	if cerr := t.session.Close(); err == nil {
		err = cerr
	}
	return err
}

// Leader returns the address of the coordinator that leads, "" if none.
func (e *Etcd) Leader(ctx context.Context) (string, error) {
	resp, err := e.cli.Get(ctx, e.prefix+etcdLeader, clientv3.WithFirstCreate()...)
	if err != nil {
		return "", fmt.Errorf("cluster leader: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return "", nil
	}
	return string(resp.Kvs[0].Value), nil
}
