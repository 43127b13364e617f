package blocks

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/cmfs-project/cmfs/container"
	"github.com/cmfs-project/cmfs/ec"
	"github.com/cmfs-project/cmfs/internal/checksum"
	"github.com/cmfs-project/cmfs/peer"
	"github.com/cmfs-project/cmfs/repl"
)

// errNotEC: no node holds the block in an EC index replica.
var errNotEC = errors.New("in no EC container")

// readPiece is how much of an EC block one read decodes at a time.
const readPiece = 4 << 20

// fetchEC reads block b from an EC container: a node that holds one of
// its indexes says where the block is, every node is asked which index it
// holds, and ec.Reader reads the data cells, decoding from any D good
// indexes when some are missing or corrupt.
func (f *Fetcher) fetchEC(ctx context.Context, nodes []Node, b container.BlockID) (io.ReadCloser, error) {
	var loc *peer.Location
	for _, n := range nodes {
		c, err := f.client(ctx, n.Addr)
		if err != nil {
			continue
		}
		actx, cancel := context.WithTimeout(ctx, f.cfg.AskTimeout)
		locs, err := c.Locate(actx, b)
		cancel()
		if err == nil && len(locs) > 0 {
			loc = &locs[0]
			break
		}
	}
	if loc == nil {
		return nil, errNotEC
	}
	infos := f.ecInfos(ctx, nodes, loc.Container)
	if len(infos) == 0 {
		return nil, fmt.Errorf("EC container %d: no node describes its indexes", loc.Container)
	}
	l, t := infos[0].info.Layout, infos[0].info.Table
	src := &cellSource{f: f, id: loc.Container, addrs: map[int]string{}}
	var avail []int
	for _, x := range infos {
		i := x.info.Descriptor.ReplicaIndex
		if x.info.Layout != l || !x.info.Table.Equal(t) {
			continue // not the same encoding: not a source for this one
		}
		if _, dup := src.addrs[i]; !dup {
			src.addrs[i] = x.addr
			avail = append(avail, i)
		}
	}
	slices.Sort(avail)
	if loc.Offset < 0 || loc.Offset+b.Size > l.Size {
		return nil, fmt.Errorf("EC container %d: block %s at %d lies outside its %d bytes: %w", loc.Container, b, loc.Offset, l.Size, container.ErrCorrupt)
	}
	r := &ecBlockReader{ctx: ctx, r: ec.NewReader(l, t, src, avail), off: loc.Offset, left: b.Size, b: b, h: checksum.New()}
	return r, nil
}

type nodeInfo struct {
	addr string
	info container.ECInfo
}

// ecInfos asks every node at once for its index of container id; the
// nodes that hold a CLOSED one answer.
func (f *Fetcher) ecInfos(ctx context.Context, nodes []Node, id uint64) []nodeInfo {
	var mu sync.Mutex
	var out []nodeInfo
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Go(func() {
			c, err := f.client(ctx, n.Addr)
			if err != nil {
				return
			}
			actx, cancel := context.WithTimeout(ctx, f.cfg.AskTimeout)
			defer cancel()
			info, err := c.ECInfo(actx, id)
			if err != nil || info.Descriptor.State != container.Closed || info.Descriptor.ReplicaIndex == 0 {
				return
			}
			mu.Lock()
			out = append(out, nodeInfo{n.Addr, info})
			mu.Unlock()
		})
	}
	wg.Wait()
	slices.SortFunc(out, func(a, b nodeInfo) int { return a.info.Descriptor.ReplicaIndex - b.info.Descriptor.ReplicaIndex })
	return out
}

// cellSource reads cells from the node that holds each index.
type cellSource struct {
	f     *Fetcher
	id    uint64
	addrs map[int]string
}

func (s *cellSource) ReadCells(ctx context.Context, index int, first, n int64) ([]byte, error) {
	addr, ok := s.addrs[index]
	if !ok {
		return nil, fmt.Errorf("EC container %d: no node holds index %d", s.id, index)
	}
	c, err := s.f.client(ctx, addr)
	if err != nil {
		return nil, err
	}
	actx, cancel := context.WithTimeout(ctx, s.f.cfg.AskTimeout)
	defer cancel()
	b, got, err := c.ReadCells(actx, s.id, first, n)
	if err == nil && got != index {
		err = fmt.Errorf("EC container %d: %s holds index %d, not %d", s.id, addr, got, index)
	}
	return b, err
}

// ecBlockReader streams a block out of an ec.Reader, a piece at a time,
// and checks its xxh64 at the end.
type ecBlockReader struct {
	ctx  context.Context
	r    *ec.Reader
	off  int64
	left int64
	b    container.BlockID
	h    *checksum.Digest
	buf  []byte
	err  error
}

func (r *ecBlockReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		if r.left == 0 {
			r.err = io.EOF
			if r.h.Sum64() != r.b.Sum {
				r.err = fmt.Errorf("block %s decoded from its EC container has xxh64 %016x: %w", r.b, r.h.Sum64(), repl.ErrChecksum)
			}
			continue
		}
		piece := make([]byte, min(r.left, readPiece))
		n, err := r.r.ReadAt(r.ctx, piece, r.off)
		if n < len(piece) {
			if err == nil || err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			r.err = fmt.Errorf("block %s from its EC container: %w", r.b, err)
			continue
		}
		r.h.Write(piece)
		r.buf, r.off, r.left = piece, r.off+int64(n), r.left-int64(n)
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

func (r *ecBlockReader) Close() error { return nil }
