package blocks

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cmfs-project/cmfs/api/clusterpb"
	"github.com/cmfs-project/cmfs/cluster"
	"github.com/cmfs-project/cmfs/cluster/coord"
	"github.com/cmfs-project/cmfs/container"
	"github.com/cmfs-project/cmfs/internal/checksum"
	"github.com/cmfs-project/cmfs/journal"
	"github.com/cmfs-project/cmfs/peer"
	"github.com/cmfs-project/cmfs/repl"
)

// Defaults for Config.
const (
	DefaultRefresh    = 10 * time.Second
	DefaultAskTimeout = 10 * time.Second
)

// Config says where a Fetcher finds the cluster.
type Config struct {
	// Coordinators are the coordinator's addresses, asked in turn.
	Coordinators []string
	// Dial connects to a coordinator or a node with this client's
	// credential (peer.Dial with WithTLS or WithToken).
	Dial func(ctx context.Context, addr string) (*peer.Client, error)
	// Refresh is how long a node list is used before the coordinator is
	// asked again; 0 means DefaultRefresh.
	Refresh time.Duration
	// AskTimeout bounds a call to the coordinator and the wait for a
	// node's first bytes; 0 means DefaultAskTimeout.
	AskTimeout time.Duration
	// Now is the clock of Refresh; nil means time.Now.
	Now func() time.Time
}

// Node is a node as the coordinator lists it.
type Node struct {
	ID, Addr string
	Health   cluster.Health
}

// Fetcher reads blocks from the cluster's nodes (see the package doc).
type Fetcher struct {
	cfg Config
	// list and get are the coordinator's Nodes and a node's Get; tests
	// replace them.
	list func(ctx context.Context) ([]Node, error)
	get  func(ctx context.Context, addr string, b container.BlockID) (io.ReadCloser, int64, error)

	mu     sync.Mutex
	conns  map[string]*peer.Client
	nodes  []Node
	listed time.Time
	last   string                // the address that served last
	bad    map[badBlock]struct{} // blocks a node delivered wrong
	closed bool
}

type badBlock struct {
	addr string
	b    container.BlockID
}

var _ repl.Fetcher = (*Fetcher)(nil)

// New returns a Fetcher of the cluster cfg names. It connects to nothing
// yet: the first Fetch asks the coordinator.
func New(cfg Config) (*Fetcher, error) {
	switch {
	case len(cfg.Coordinators) == 0:
		return nil, errors.New("blocks: no coordinator address")
	case cfg.Dial == nil:
		return nil, errors.New("blocks: no Dial")
	case cfg.Refresh < 0 || cfg.AskTimeout < 0:
		return nil, fmt.Errorf("blocks: refresh %s and ask timeout %s must not be negative", cfg.Refresh, cfg.AskTimeout)
	}
	if cfg.Refresh == 0 {
		cfg.Refresh = DefaultRefresh
	}
	if cfg.AskTimeout == 0 {
		cfg.AskTimeout = DefaultAskTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	f := &Fetcher{cfg: cfg, conns: map[string]*peer.Client{}, bad: map[badBlock]struct{}{}}
	f.list, f.get = f.listNodes, f.getBlock
	return f, nil
}

// Close closes the connections to the coordinator and the nodes.
func (f *Fetcher) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	var first error
	for addr, c := range f.conns {
		if err := c.Close(); err != nil && first == nil {
			first = err
		}
		delete(f.conns, addr)
	}
	return first
}

// Fetch implements repl.Fetcher: the block with jf's xxh64 and size, from
// the first node that has it.
//
// Errors: repl.ErrNoCopy (wrapped) when every node asked said it has no
// such block; the coordinator's and the nodes' other errors (first one
// wrapped); ctx's error.
func (f *Fetcher) Fetch(ctx context.Context, jf journal.File) (io.ReadCloser, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if jf.Size < 0 || !checksum.Valid(jf.XXH64) {
		return nil, fmt.Errorf("fetch %s from the cluster: bad size %d or xxh64 %q", jf.Path, jf.Size, jf.XXH64)
	}
	sum, _ := strconv.ParseUint(jf.XXH64, 16, 64) // Valid: 16 hex digits
	b := container.BlockID{Sum: sum, Size: jf.Size}
	if jf.Size == 0 {
		return io.NopCloser(strings.NewReader("")), nil
	}
	nodes, err := f.nodesToAsk(ctx)
	if err != nil {
		return nil, fmt.Errorf("fetch %s from the cluster: %w", jf.Path, err)
	}
	var without []string
	var failed []string
	var firstErr error
	for _, n := range nodes {
		if f.isBad(n.Addr, b) {
			continue
		}
		rc, err := f.ask(ctx, n.Addr, b)
		if err == nil {
			f.served(n.Addr)
			return &reader{f: f, rc: rc, addr: n.Addr, node: n.ID, b: b, path: jf.Path}, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if errors.Is(err, container.ErrBlockNotFound) {
			without = append(without, n.ID)
			continue
		}
		failed = append(failed, n.ID)
		if firstErr == nil {
			firstErr = fmt.Errorf("%s: %w", n.ID, err)
		}
	}
	// Not a whole copy anywhere: an EC container may hold it in cells.
	if rc, err := f.fetchEC(ctx, nodes, b); err == nil {
		return rc, nil
	} else if !errors.Is(err, errNotEC) {
		return nil, fmt.Errorf("fetch %s: %w", jf.Path, err)
	}
	switch {
	case len(without) == 0 && len(failed) == 0:
		return nil, fmt.Errorf("fetch %s: block %s: the coordinator lists no node to ask: %w", jf.Path, b, repl.ErrNoCopy)
	case firstErr == nil:
		return nil, fmt.Errorf("fetch %s: block %s is on none of the cluster's nodes (asked %s): %w", jf.Path, b, strings.Join(without, ", "), repl.ErrNoCopy)
	}
	return nil, fmt.Errorf("fetch %s: block %s is not on %s, and %s could not be asked: %w",
		jf.Path, b, orNone(without), strings.Join(failed, ", "), firstErr)
}

func orNone(ids []string) string {
	if len(ids) == 0 {
		return "any node that answered"
	}
	return strings.Join(ids, ", ")
}

// ask gets b from the node at addr, giving it AskTimeout to start
// sending; the reader's Close ends the call.
func (f *Fetcher) ask(ctx context.Context, addr string, b container.BlockID) (io.ReadCloser, error) {
	ctx, cancel := context.WithCancel(ctx)
	timer := time.AfterFunc(f.cfg.AskTimeout, cancel)
	rc, size, err := f.get(ctx, addr, b)
	if !timer.Stop() {
		if err == nil {
			rc.Close()
		}
		cancel()
		return nil, fmt.Errorf("no answer within %s: %w", f.cfg.AskTimeout, peer.ErrUnavailable)
	}
	if err != nil {
		cancel()
		return nil, err
	}
	if size != b.Size {
		rc.Close()
		cancel()
		return nil, fmt.Errorf("answered with %d bytes for block %s: %w", size, b, container.ErrCorrupt)
	}
	return &cancelCloser{ReadCloser: rc, cancel: cancel}, nil
}

type cancelCloser struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c *cancelCloser) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}

// nodesToAsk returns the nodes in the order to ask them: the last to
// serve first, then HEALTHY, then STALE; never DEAD or without address.
func (f *Fetcher) nodesToAsk(ctx context.Context) ([]Node, error) {
	f.mu.Lock()
	nodes, fresh := f.nodes, f.nodes != nil && f.cfg.Now().Sub(f.listed) < f.cfg.Refresh
	f.mu.Unlock()
	if !fresh {
		listed, err := f.list(ctx)
		switch {
		case err == nil:
			nodes = listed
			f.mu.Lock()
			f.nodes, f.listed = listed, f.cfg.Now()
			f.mu.Unlock()
		case nodes == nil:
			return nil, err
		}
		// A coordinator away for a while: the nodes it last listed are
		// still worth asking.
	}
	f.mu.Lock()
	last := f.last
	f.mu.Unlock()
	var out []Node
	for _, n := range nodes {
		if n.Addr != "" && n.Health != cluster.Dead {
			out = append(out, n)
		}
	}
	rank := func(n Node) int {
		if n.Addr == last {
			return -1
		}
		return int(n.Health)
	}
	slices.SortStableFunc(out, func(a, b Node) int {
		if d := rank(a) - rank(b); d != 0 {
			return d
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, nil
}

func (f *Fetcher) served(addr string) {
	f.mu.Lock()
	f.last = addr
	f.mu.Unlock()
}

func (f *Fetcher) isBad(addr string, b container.BlockID) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.bad[badBlock{addr, b}]
	return ok
}

func (f *Fetcher) markBad(addr string, b container.BlockID) {
	f.mu.Lock()
	f.bad[badBlock{addr, b}] = struct{}{}
	f.mu.Unlock()
}

// client returns the connection to addr, dialed once.
func (f *Fetcher) client(ctx context.Context, addr string) (*peer.Client, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, errors.New("blocks: fetcher closed")
	}
	if c, ok := f.conns[addr]; ok {
		return c, nil
	}
	c, err := f.cfg.Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	f.conns[addr] = c
	return c, nil
}

// listNodes asks the coordinators in turn for the nodes.
func (f *Fetcher) listNodes(ctx context.Context) ([]Node, error) {
	var first error
	var rest []string
	for _, addr := range f.cfg.Coordinators {
		nodes, err := f.listFrom(ctx, addr)
		if err == nil {
			return nodes, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if strings.Contains(err.Error(), "unknown service") {
			err = fmt.Errorf("%s is not a coordinator (serve --coordinator)", addr)
		}
		if first == nil {
			first = err
		} else {
			rest = append(rest, err.Error())
		}
	}
	if len(rest) == 0 {
		return nil, fmt.Errorf("no coordinator answered: %w", first)
	}
	return nil, fmt.Errorf("no coordinator answered: %w; %s", first, strings.Join(rest, "; "))
}

func (f *Fetcher) listFrom(ctx context.Context, addr string) ([]Node, error) {
	c, err := f.client(ctx, addr)
	if err != nil {
		return nil, fmt.Errorf("coordinator %s: %w", addr, err)
	}
	ctx, cancel := context.WithTimeout(ctx, f.cfg.AskTimeout)
	defer cancel()
	resp, err := clusterpb.NewCoordinatorClient(c.Conn()).Nodes(ctx, &clusterpb.NodesRequest{})
	if err != nil {
		return nil, fmt.Errorf("coordinator %s: %w", addr, coord.FromStatus(err))
	}
	nodes := make([]Node, 0, len(resp.Nodes))
	for _, n := range resp.Nodes {
		h, err := parseHealth(n.Health)
		if err != nil {
			return nil, fmt.Errorf("coordinator %s: node %s: %w", addr, n.Id, err)
		}
		nodes = append(nodes, Node{ID: n.Id, Addr: n.Addr, Health: h})
	}
	return nodes, nil
}

func parseHealth(s string) (cluster.Health, error) {
	for h := cluster.Healthy; h <= cluster.Dead; h++ {
		if h.String() == s {
			return h, nil
		}
	}
	return 0, fmt.Errorf("unknown health %q", s)
}

func (f *Fetcher) getBlock(ctx context.Context, addr string, b container.BlockID) (io.ReadCloser, int64, error) {
	c, err := f.client(ctx, addr)
	if err != nil {
		return nil, 0, err
	}
	return c.Get(ctx, b)
}

// reader is a block being read; bytes that are not the block make the
// node bad for it and end in repl.ErrChecksum, so the loader asks again.
type reader struct {
	f          *Fetcher
	rc         io.ReadCloser
	addr, node string
	b          container.BlockID
	path       string
}

func (r *reader) Read(p []byte) (int, error) {
	n, err := r.rc.Read(p)
	if err != nil && err != io.EOF && (errors.Is(err, container.ErrCorrupt) || errors.Is(err, io.ErrUnexpectedEOF)) {
		r.f.markBad(r.addr, r.b)
		err = fmt.Errorf("%s from node %s: %w (%w)", r.path, r.node, repl.ErrChecksum, err)
	}
	return n, err
}

func (r *reader) Close() error { return r.rc.Close() }
