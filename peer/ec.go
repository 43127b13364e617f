package peer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/cmfs-project/cmfs/api/containerpb"
	"github.com/cmfs-project/cmfs/container"
	"github.com/cmfs-project/cmfs/ec"
)

// ECStore is what the EC calls need of the node's store beyond Store;
// *container.Store has it. A Store without it answers them Unimplemented.
type ECStore interface {
	Encode(ctx context.Context, id uint64) (*container.Staged, error)
	Reconstruct(ctx context.Context, spec container.ReconstructSpec) (*container.Staged, error)
	ReadCells(id uint64, first, n int64) ([]byte, int, error)
	ECInfo(id uint64) (container.ECInfo, error)
	LocateBlock(id uint64, b container.BlockID) (off, size int64, err error)
	OpenMeta(id uint64) (io.ReadCloser, int64, error)
	Delete(id uint64) error
}

var _ ECStore = (*container.Store)(nil)

// ErrNoEC is returned by the EC calls of a node whose store has none.
var ErrNoEC = errors.New("this node's store does not do EC")

func (s *Server) ecStore() (ECStore, error) {
	es, ok := s.store.(ECStore)
	if !ok {
		return nil, ErrNoEC
	}
	return es, nil
}

// Endpoint is a node, by address, and the EC index it holds or is to
// hold.
type Endpoint struct {
	Index int
	Addr  string
}

type stagedKey struct {
	id    uint64
	index int
}

// hold makes st's indexes downloadable until the returned func is
// called.
func (s *Server) hold(id uint64, st *container.Staged) (release func()) {
	s.stagedMu.Lock()
	defer s.stagedMu.Unlock()
	if s.staged == nil {
		s.staged = make(map[stagedKey]*container.Staged)
	}
	for _, i := range st.Indexes() {
		s.staged[stagedKey{id, i}] = st
	}
	return func() {
		s.stagedMu.Lock()
		defer s.stagedMu.Unlock()
		for _, i := range st.Indexes() {
			if s.staged[stagedKey{id, i}] == st {
				delete(s.staged, stagedKey{id, i})
			}
		}
	}
}

// exporter returns what Download sends for container id: the container
// of the store (index 0), or the staged EC index.
func (s *Server) exporter(id uint64, index int, comp container.Compression) (container.Descriptor, exportFunc, error) {
	if index == 0 {
		d, err := s.store.Descriptor(id)
		return d, func(ctx context.Context, w io.Writer) error { return s.store.Export(ctx, id, comp, w) }, err
	}
	s.stagedMu.Lock()
	st := s.staged[stagedKey{id, index}]
	s.stagedMu.Unlock()
	if st == nil {
		return container.Descriptor{}, nil, fmt.Errorf("container %d: no EC index %d staged here: %w", id, index, container.ErrNotFound)
	}
	return st.Descriptor(index), func(ctx context.Context, w io.Writer) error { return st.Export(ctx, index, comp, w) }, nil
}

// ship delivers staged index i to target: pushed, or downloaded by the
// target from this node (pull), in either case scanned there before it
// answers; a failure that may pass is tried again.
func (s *Server) ship(ctx context.Context, id uint64, st *container.Staged, t Endpoint, mode Mode) error {
	c, err := s.dial(ctx, t.Addr)
	if err != nil {
		return fmt.Errorf("container %d index %d to %s: %w", id, t.Index, t.Addr, err)
	}
	defer c.Close()
	var d container.Descriptor
	_, err = s.retry(ctx, func() error {
		var r ImportResult
		var err error
		if mode == Pull {
			r, err = c.Fetch(ctx, FetchRequest{Container: id, Sources: []string{s.Addr()}, WaitScan: true, Index: t.Index})
		} else {
			h := PushHeader{Container: id, Size: st.Descriptor(t.Index).Size(), WaitScan: true}
			r, err = s.pushWith(ctx, c, h, func(ctx context.Context, w io.Writer) error {
				return st.Export(ctx, t.Index, container.None, w)
			})
		}
		d = r.Descriptor
		return err
	})
	if err == nil && d.State != container.Closed {
		err = fmt.Errorf("the target's scan found it %s: %s", d.State, d.Reason)
	}
	if err != nil {
		return fmt.Errorf("container %d index %d to %s (%s): %w", id, t.Index, t.Addr, mode, err)
	}
	return nil
}

// shipAll ships every target's index at once and joins the failures.
func (s *Server) shipAll(ctx context.Context, id uint64, st *container.Staged, targets []Endpoint, mode Mode) error {
	errs := make([]error, len(targets))
	var wg sync.WaitGroup
	for k, t := range targets {
		wg.Go(func() { errs[k] = s.ship(ctx, id, st, t, mode) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Encode stripes this node's whole copy of EC container id into the
// indexes targets name and ships each to its node (push, or the target
// downloads it: pull); it returns once every target has the index
// CLOSED, or with what failed. The whole copy stays: the replication
// manager deletes it once every index is confirmed.
func (s *Server) Encode(ctx context.Context, id uint64, targets []Endpoint, mode Mode) error {
	es, err := s.ecStore()
	if err != nil {
		return err
	}
	st, err := es.Encode(ctx, id)
	if err != nil {
		return err
	}
	defer st.Close()
	defer s.hold(id, st)()
	if err := s.shipAll(ctx, id, st, targets, mode); err != nil {
		return fmt.Errorf("encode container %d: %w", id, err)
	}
	return nil
}

// Reconstruct rebuilds the indexes targets name of EC container id from
// the cells the sources hold (this node's own index, if it holds one,
// read locally). A target at this node's address adopts its index into
// the store; the others are pushed, or downloaded by their target
// (pull). It returns once every index is CLOSED at its node; whatever
// failed leaves nothing behind here (staging is removed; an adopted
// index its scan found bad is deleted).
func (s *Server) Reconstruct(ctx context.Context, id uint64, sources, targets []Endpoint, mode Mode) error {
	es, err := s.ecStore()
	if err != nil {
		return err
	}
	src := &cellSource{s: s, es: es, id: id, addrs: map[int]string{}}
	defer src.close()
	var avail []int
	own, err := s.store.Descriptor(id)
	if err == nil && own.ReplicaIndex > 0 && own.State == container.Closed {
		src.local = own.ReplicaIndex
		avail = append(avail, own.ReplicaIndex)
	}
	for _, e := range sources {
		if e.Index == src.local {
			continue
		}
		if _, dup := src.addrs[e.Index]; !dup {
			src.addrs[e.Index] = e.Addr
			avail = append(avail, e.Index)
		}
	}
	desc, meta, err := src.meta(ctx, own, sources)
	if err != nil {
		return fmt.Errorf("reconstruct container %d: %w", id, err)
	}
	defer meta.Close()
	spec := container.ReconstructSpec{ID: id, Descriptor: desc, Meta: meta, Src: src, Avail: avail}
	for _, t := range targets {
		spec.Indexes = append(spec.Indexes, t.Index)
	}
	st, err := es.Reconstruct(ctx, spec)
	if err != nil {
		return fmt.Errorf("reconstruct container %d: %w", id, err)
	}
	defer st.Close()
	defer s.hold(id, st)()
	var remote []Endpoint
	for _, t := range targets {
		if t.Addr != s.Addr() {
			remote = append(remote, t)
			continue
		}
		if err := s.adopt(ctx, es, id, st, t.Index); err != nil {
			return fmt.Errorf("reconstruct container %d: %w", id, err)
		}
	}
	if err := s.shipAll(ctx, id, st, remote, mode); err != nil {
		return fmt.Errorf("reconstruct container %d: %w", id, err)
	}
	return nil
}

// adopt moves a staged index into the store and waits for its scan; one
// the scan finds bad is deleted again.
func (s *Server) adopt(ctx context.Context, es ECStore, id uint64, st *container.Staged, index int) error {
	if _, err := st.Adopt(ctx, index); err != nil {
		return fmt.Errorf("index %d: %w", index, err)
	}
	d, err := s.store.WaitScan(ctx, id)
	if err == nil && d.State != container.Closed {
		err = fmt.Errorf("scan found it %s: %s", d.State, d.Reason)
	}
	if err != nil {
		if derr := es.Delete(id); derr != nil && !errors.Is(derr, container.ErrNotFound) {
			err = errors.Join(err, derr)
		}
		return fmt.Errorf("index %d: %w", index, err)
	}
	return nil
}

// cellSource reads cells for Reconstruct: this node's own index from
// the store, the others from their nodes.
type cellSource struct {
	s     *Server
	es    ECStore
	id    uint64
	local int
	addrs map[int]string

	mu    sync.Mutex
	conns map[string]*Client
}

func (c *cellSource) client(ctx context.Context, addr string) (*Client, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cl := c.conns[addr]; cl != nil {
		return cl, nil
	}
	cl, err := c.s.dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	if c.conns == nil {
		c.conns = make(map[string]*Client)
	}
	c.conns[addr] = cl
	return cl, nil
}

func (c *cellSource) ReadCells(ctx context.Context, index int, first, n int64) ([]byte, error) {
	if index == c.local {
		b, got, err := c.es.ReadCells(c.id, first, n)
		if err == nil && got != index {
			err = fmt.Errorf("container %d holds index %d here, not %d", c.id, got, index)
		}
		return b, err
	}
	addr, ok := c.addrs[index]
	if !ok {
		return nil, fmt.Errorf("container %d: no source for index %d", c.id, index)
	}
	cl, err := c.client(ctx, addr)
	if err != nil {
		return nil, err
	}
	b, got, err := cl.ReadCells(ctx, c.id, first, n)
	if err == nil && got != index {
		err = fmt.Errorf("container %d: %s holds index %d, not %d", c.id, addr, got, index)
	}
	return b, err
}

// meta returns the descriptor and container.db of an index replica: this
// node's own (own, when it holds one), else the first source's that
// delivers.
func (c *cellSource) meta(ctx context.Context, own container.Descriptor, sources []Endpoint) (container.Descriptor, io.ReadCloser, error) {
	if c.local > 0 {
		rc, _, err := c.es.OpenMeta(c.id)
		return own, rc, err
	}
	var errs []error
	for _, e := range sources {
		cl, err := c.client(ctx, e.Addr)
		if err == nil {
			var d container.Descriptor
			var rc io.ReadCloser
			if d, rc, err = cl.ECMeta(ctx, c.id); err == nil {
				return d, rc, nil
			}
		}
		errs = append(errs, fmt.Errorf("%s: %w", e.Addr, err))
	}
	return container.Descriptor{}, nil, fmt.Errorf("no source gave the container's metadata: %w", errors.Join(errs...))
}

func (c *cellSource) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cl := range c.conns {
		cl.Close()
	}
}

var _ ec.CellSource = (*cellSource)(nil)

// The EC calls of the Container service.

func (s *Server) Locate(ctx context.Context, req *containerpb.LocateRequest) (*containerpb.LocateResponse, error) {
	if req.Block == nil {
		return nil, toStatus(fmt.Errorf("locate: no block: %w", ErrInvalid))
	}
	es, err := s.ecStore()
	if err != nil {
		return nil, toStatus(err)
	}
	b := blockFromPB(req.Block)
	resp := &containerpb.LocateResponse{}
	for _, d := range s.store.List() {
		if d.ReplicaIndex == 0 || d.State != container.Closed || !strings.HasPrefix(d.Replication, "ec:") {
			continue
		}
		if off, size, err := es.LocateBlock(d.ID, b); err == nil {
			resp.Locations = append(resp.Locations, &containerpb.BlockLocation{
				ContainerId: d.ID, Replication: d.Replication, Offset: off, Size: size,
			})
		}
	}
	return resp, nil
}

func (s *Server) ECInfo(ctx context.Context, req *containerpb.ECInfoRequest) (*containerpb.ECInfoResponse, error) {
	es, err := s.ecStore()
	if err != nil {
		return nil, toStatus(err)
	}
	info, err := es.ECInfo(req.ContainerId)
	if err != nil {
		return nil, toStatus(err)
	}
	cells, _ := info.Table.MarshalBinary()
	return &containerpb.ECInfoResponse{Container: descToPB(info.Descriptor), Size: info.Layout.Size, Chunks: info.Chunks, Cells: cells}, nil
}

func (s *Server) ReadCells(req *containerpb.ReadCellsRequest, stream containerpb.Container_ReadCellsServer) error {
	es, err := s.ecStore()
	if err != nil {
		return toStatus(err)
	}
	b, index, err := es.ReadCells(req.ContainerId, req.FirstStripe, req.Count)
	if err != nil {
		return toStatus(err)
	}
	g := s.guard(stream.Context(), fmt.Sprintf("read cells of container %d", req.ContainerId))
	defer g.stop()
	g.expect(int64(len(b)))
	for first := true; first || len(b) > 0; first = false {
		n := min(len(b), chunkSize)
		m := &containerpb.CellData{Data: b[:n]}
		if first {
			m.Index = uint32(index)
		}
		if err := g.send(func() error { return stream.Send(m) }); err != nil {
			return toStatus(g.fail(err))
		}
		s.sup.m.sent.Add(float64(n))
		b = b[n:]
	}
	return nil
}

func (s *Server) ECMeta(req *containerpb.ECMetaRequest, stream containerpb.Container_ECMetaServer) error {
	es, err := s.ecStore()
	if err != nil {
		return toStatus(err)
	}
	d, err := s.store.Descriptor(req.ContainerId)
	if err != nil {
		return toStatus(err)
	}
	rc, size, err := es.OpenMeta(req.ContainerId)
	if err != nil {
		return toStatus(err)
	}
	defer rc.Close()
	g := s.guard(stream.Context(), fmt.Sprintf("metadata of container %d", req.ContainerId))
	defer g.stop()
	g.expect(size)
	m := &containerpb.ECMetaChunk{Container: descToPB(d), Size: size}
	for {
		buf := make([]byte, chunkSize)
		n, rerr := io.ReadFull(rc, buf)
		m.Data = buf[:n]
		if n > 0 || m.Container != nil {
			if err := g.send(func() error { return stream.Send(m) }); err != nil {
				return toStatus(g.fail(err))
			}
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			return nil
		}
		if rerr != nil {
			return toStatus(g.fail(fmt.Errorf("metadata of container %d: %w", req.ContainerId, rerr)))
		}
		m = &containerpb.ECMetaChunk{}
	}
}

// The client side.

// Location is where a block sits in an EC container.
type Location struct {
	Container   uint64
	Replication string
	// Offset in the container's logical bytes, and the block's size.
	Offset, Size int64
}

// Locate asks the node which of its EC index replicas hold block b.
func (c *Client) Locate(ctx context.Context, b container.BlockID) ([]Location, error) {
	resp, err := c.rpc.Locate(ctx, &containerpb.LocateRequest{Block: blockToPB(b)})
	if err != nil {
		return nil, fromStatus(err)
	}
	var out []Location
	for _, l := range resp.Locations {
		out = append(out, Location{Container: l.ContainerId, Replication: l.Replication, Offset: l.Offset, Size: l.Size})
	}
	return out, nil
}

// ECInfo returns the node's description of its index replica of
// container id.
func (c *Client) ECInfo(ctx context.Context, id uint64) (container.ECInfo, error) {
	resp, err := c.rpc.ECInfo(ctx, &containerpb.ECInfoRequest{ContainerId: id})
	if err != nil {
		return container.ECInfo{}, fromStatus(err)
	}
	d := descFromPB(resp.Container)
	sc, err := ec.ParseScheme(d.Replication)
	if err != nil {
		return container.ECInfo{}, fmt.Errorf("container %d: %w", id, err)
	}
	l := ec.Layout{Scheme: sc, Size: resp.Size}
	t, err := ec.ParseTable(l, resp.Cells)
	if err != nil {
		return container.ECInfo{}, fmt.Errorf("container %d: %w", id, err)
	}
	return container.ECInfo{Descriptor: d, Layout: l, Table: t, Chunks: resp.Chunks}, nil
}

// maxCells bounds what one ReadCells answer may hold, as the node does.
const maxCells = container.MaxReadCells

// ReadCells returns cells first…first+n-1 of the node's index replica of
// container id, back to back, and the index they are of.
func (c *Client) ReadCells(ctx context.Context, id uint64, first, n int64) ([]byte, int, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.rpc.ReadCells(ctx, &containerpb.ReadCellsRequest{ContainerId: id, FirstStripe: first, Count: n})
	if err != nil {
		return nil, 0, fromStatus(err)
	}
	var out []byte
	index := 0
	for k := 0; ; k++ {
		m, err := stream.Recv()
		if err == io.EOF {
			if k == 0 {
				return nil, 0, fmt.Errorf("read cells of container %d: empty stream: %w", id, io.ErrUnexpectedEOF)
			}
			return out, index, nil
		}
		if err != nil {
			return nil, 0, fromStatus(err)
		}
		if k == 0 {
			index = int(m.Index)
		}
		if len(out)+len(m.Data) > maxCells {
			return nil, 0, fmt.Errorf("read cells of container %d: more than %d bytes: %w", id, maxCells, ErrInvalid)
		}
		out = append(out, m.Data...)
	}
}

// ECMeta returns the descriptor and a reader of the container.db of the
// node's index replica of container id.
func (c *Client) ECMeta(ctx context.Context, id uint64) (container.Descriptor, io.ReadCloser, error) {
	ctx, cancel := context.WithCancel(ctx)
	stream, err := c.rpc.ECMeta(ctx, &containerpb.ECMetaRequest{ContainerId: id})
	if err != nil {
		cancel()
		return container.Descriptor{}, nil, fromStatus(err)
	}
	first, err := stream.Recv()
	if err != nil || first.Container == nil {
		cancel()
		if err == nil || err == io.EOF {
			err = fmt.Errorf("metadata of container %d: no descriptor: %w", id, io.ErrUnexpectedEOF)
		}
		return container.Descriptor{}, nil, fromStatus(err)
	}
	pr, pw := io.Pipe()
	go func() {
		defer cancel()
		n := int64(len(first.Data))
		if _, err := pw.Write(first.Data); err != nil {
			return
		}
		for {
			m, err := stream.Recv()
			if err == io.EOF {
				if n != first.Size {
					err = fmt.Errorf("metadata of container %d: %d of %d bytes: %w", id, n, first.Size, io.ErrUnexpectedEOF)
				} else {
					err = nil
				}
				pw.CloseWithError(err)
				return
			}
			if err != nil {
				pw.CloseWithError(fromStatus(err))
				return
			}
			n += int64(len(m.Data))
			if _, err := pw.Write(m.Data); err != nil {
				return
			}
		}
	}()
	return descFromPB(first.Container), pr, nil
}
