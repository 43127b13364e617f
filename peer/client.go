package peer

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/experimental"

	"github.com/cmfs-project/cmfs/api/containerpb"
	"github.com/cmfs-project/cmfs/container"
	"github.com/cmfs-project/cmfs/internal/auth"
	"github.com/cmfs-project/cmfs/internal/checksum"
	"github.com/cmfs-project/cmfs/internal/tlsconfig"
	"github.com/cmfs-project/cmfs/internal/window"
)

// Client is a connection to a node's Container service: for the admin
// commands, and for one node replicating to another. It is safe for
// concurrent use.
type Client struct {
	conn *grpc.ClientConn
	rpc  containerpb.ContainerClient
}

// Option tunes Dial.
type Option func(*dialOptions)

type dialOptions struct {
	tls   *tls.Config
	token string
}

// WithTLS makes Dial use cfg (tlsconfig.Client); nil: no TLS.
func WithTLS(cfg *tls.Config) Option { return func(o *dialOptions) { o.tls = cfg } }

// WithToken makes every call carry token, the node's (internal/auth): how
// a client on the node's host authenticates without TLS.
func WithToken(token string) Option { return func(o *dialOptions) { o.token = token } }

// Dial returns a client of the node at addr. Without WithTLS, addr must be
// a loopback address. It does not wait for the connection: an unreachable
// node shows at the first call (as ErrUnavailable).
//
// Errors: without TLS, *tlsconfig.InsecureError (wrapping
// tlsconfig.ErrInsecure) for an address that is not loopback.
func Dial(ctx context.Context, addr string, opts ...Option) (*Client, error) {
	var o dialOptions
	for _, f := range opts {
		f(&o)
	}
	creds := insecure.NewCredentials()
	if o.tls != nil {
		creds = credentials.NewTLS(o.tls)
	} else if err := tlsconfig.CheckLoopback(ctx, "connect to", addr); err != nil {
		return nil, err
	}
	dopts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		// A peer that vanished without a reset is noticed mid-transfer.
		window.Keepalive(),
		experimental.WithBufferPool(buffers),
	}
	if o.token != "" {
		dopts = append(dopts, grpc.WithPerRPCCredentials(auth.Credentials(o.token)))
	}
	if o.tls != nil {
		dopts = append(dopts, grpc.WithUnaryInterceptor(auth.ProbeRefusal(addr, o.tls)))
	}
	conn, err := grpc.NewClient(addr, dopts...)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	return &Client{conn: conn, rpc: containerpb.NewContainerClient(conn)}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Conn is the client's connection, for another service of the node it
// dialed (the cluster's Coordinator), with the same credential.
func (c *Client) Conn() grpc.ClientConnInterface { return c.conn }

// Put writes what r yields as one block into the node's open container
// of its default replication config; see PutReplication.
func (c *Client) Put(ctx context.Context, name string, r io.Reader) (uint64, container.BlockID, error) {
	return c.PutReplication(ctx, name, "", r)
}

// PutReplication writes what r yields as one block into the node's open
// container of replication ("" means the node's default) and returns the
// container's id and the block's id. name goes to the node with the data;
// the errors do not repeat it (the caller, which chose it, says which
// file failed).
//
// Errors: ErrInvalid for a bad replication config, the store's
// (container.ErrNoSpace, ...), ErrUnavailable, r's.
func (c *Client) PutReplication(ctx context.Context, name, replication string, r io.Reader) (uint64, container.BlockID, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.rpc.Put(ctx)
	if err != nil {
		return 0, container.BlockID{}, fromStatus(err)
	}
	for first := true; ; first = false {
		buf := make([]byte, chunkSize)
		n, rerr := io.ReadFull(r, buf)
		if n > 0 || first {
			m := &containerpb.PutRequest{Data: buf[:n]}
			if first {
				m.Name, m.Replication = name, replication
			}
			if err := stream.Send(m); err == io.EOF {
				break // the server ended the call: its status follows
			} else if err != nil {
				return 0, container.BlockID{}, fromStatus(err)
			}
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			return 0, container.BlockID{}, rerr // a file's error names it
		}
	}
	resp, err := stream.CloseAndRecv()
	if err != nil {
		return 0, container.BlockID{}, fromStatus(err)
	}
	return resp.ContainerId, blockFromPB(resp.Block), nil
}

// CloseContainer closes an open container and returns its descriptor.
func (c *Client) CloseContainer(ctx context.Context, id uint64) (container.Descriptor, error) {
	d, err := c.rpc.Close(ctx, &containerpb.CloseRequest{ContainerId: id})
	if err != nil {
		return container.Descriptor{}, fromStatus(err)
	}
	return descFromPB(d), nil
}

// List describes the node's containers.
func (c *Client) List(ctx context.Context) ([]container.Descriptor, error) {
	resp, err := c.rpc.List(ctx, &containerpb.ListRequest{})
	if err != nil {
		return nil, fromStatus(err)
	}
	ds := make([]container.Descriptor, 0, len(resp.Containers))
	for _, d := range resp.Containers {
		ds = append(ds, descFromPB(d))
	}
	return ds, nil
}

// Verify scans a container on the node and returns its descriptor:
// CLOSED when every block matched, UNHEALTHY otherwise.
func (c *Client) Verify(ctx context.Context, id uint64) (container.Descriptor, error) {
	d, err := c.rpc.Verify(ctx, &containerpb.VerifyRequest{ContainerId: id})
	if err != nil {
		return container.Descriptor{}, fromStatus(err)
	}
	return descFromPB(d), nil
}

// Get returns a reader of block b's bytes and its size. b.Size -1 asks
// for any block with b.Sum. The reader checks the bytes against b and
// returns container.ErrCorrupt (wrapped) instead of io.EOF if they do not
// match, io.ErrUnexpectedEOF if they stop short. Close it to stop early.
//
// Errors: container.ErrBlockNotFound, ErrUnavailable, all wrapped.
func (c *Client) Get(ctx context.Context, b container.BlockID) (io.ReadCloser, int64, error) {
	ctx, cancel := context.WithCancel(ctx)
	stream, err := c.rpc.Get(ctx, &containerpb.GetRequest{Block: blockToPB(b)})
	if err != nil {
		cancel()
		return nil, 0, blockCodes.FromStatus(err)
	}
	first, err := stream.Recv()
	if err != nil {
		cancel()
		if err == io.EOF {
			return nil, 0, fmt.Errorf("get %s: empty answer: %w", b, io.ErrUnexpectedEOF)
		}
		return nil, 0, blockCodes.FromStatus(err)
	}
	r := &blockReader{stream: stream, cancel: cancel, b: b, size: first.Size, data: first.Data, sum: checksum.New()}
	r.sum.Write(first.Data)
	r.got = int64(len(first.Data))
	return r, first.Size, nil
}

// blockReader is Get's reader.
type blockReader struct {
	stream containerpb.Container_GetClient
	cancel context.CancelFunc
	b      container.BlockID
	size   int64
	got    int64
	data   []byte
	sum    *checksum.Digest
	err    error
}

func (r *blockReader) Read(p []byte) (int, error) {
	for len(r.data) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		m, err := r.stream.Recv()
		switch {
		case err == io.EOF:
			r.err = r.end()
		case err != nil:
			r.err = blockCodes.FromStatus(err)
		default:
			r.data = m.Data
			r.sum.Write(m.Data)
			r.got += int64(len(m.Data))
		}
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

// end checks the whole block and returns io.EOF when it is what was
// asked for.
func (r *blockReader) end() error {
	if r.got != r.size {
		return fmt.Errorf("get %s: %d of %d bytes: %w", r.b, r.got, r.size, io.ErrUnexpectedEOF)
	}
	if got := r.sum.Sum64(); got != r.b.Sum || (r.b.Size >= 0 && r.got != r.b.Size) {
		return fmt.Errorf("get %s: received %016x-%d: %w", r.b, got, r.got, container.ErrCorrupt)
	}
	return io.EOF
}

func (r *blockReader) Close() error {
	r.cancel()
	return nil
}

// Replicate asks the node to replicate t.Container to t.Target, through
// its queue, and returns when the target has imported it or failed. Set
// the deadline on ctx (t.Deadline is not sent); the node's TaskTimeout
// applies otherwise.
//
// Errors: the target's (container.ErrExists, container.ErrNoSpace,
// container.ErrHostile, container.ErrCorrupt, ...), ErrUnavailable,
// context.DeadlineExceeded, container.ErrNotFound and
// container.ErrNotClosed from the source, all wrapped.
func (c *Client) Replicate(ctx context.Context, t Task) (Result, error) {
	if _, err := container.ParseCompression(string(t.Compression)); err != nil {
		return Result{}, fmt.Errorf("replicate container %d: %w", t.Container, err)
	}
	mode := modeToPB(t.Mode)
	resp, err := c.rpc.Replicate(ctx, &containerpb.ReplicateRequest{
		ContainerId: t.Container,
		Target:      t.Target,
		Mode:        mode,
		Compression: string(t.Compression),
		Priority:    int32(t.Priority),
		WaitScan:    t.WaitScan,
	})
	if err != nil {
		return Result{}, fromStatus(err)
	}
	return Result{
		Descriptor: descFromPB(resp.Container),
		Bytes:      resp.Bytes,
		Attempts:   int(resp.Attempts),
		Duration:   time.Duration(resp.DurationNano),
		Mode:       modeFromPB(resp.Mode),
	}, nil
}

// ImportResult is what a target says of an import (Push, Fetch).
type ImportResult struct {
	// Descriptor is the container as imported: RECOVERING, or CLOSED or
	// UNHEALTHY when the caller asked to wait for the scan.
	Descriptor container.Descriptor
	// Bytes is the tarball's length as received.
	Bytes int64
	// Source is where a Fetch downloaded from.
	Source string
}

// PushHeader describes the tarball a Push carries.
type PushHeader struct {
	Container uint64
	// Size is the container's size on disk (Descriptor.Size): the target
	// reserves twice that.
	Size        int64
	Compression container.Compression
	// WaitScan: the target answers after its scan.
	WaitScan bool
}

// Push opens an import on the node: write the tarball to the Pusher, then
// Finish, or Abort to have the target discard it.
func (c *Client) Push(ctx context.Context, h PushHeader) (*Pusher, error) {
	if _, err := container.ParseCompression(string(h.Compression)); err != nil {
		return nil, fmt.Errorf("push container %d: %w", h.Container, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	stream, err := c.rpc.Push(ctx)
	if err != nil {
		cancel()
		return nil, fromStatus(err)
	}
	head := &containerpb.TarChunk{Size: h.Size, Compression: string(h.Compression), WaitScan: h.WaitScan}
	p := &Pusher{stream: stream, cancel: cancel}
	p.w = newTarWriter(h.Container, head, stream.Send)
	return p, nil
}

// PushFrom pushes the tarball r yields: Push, copy, Finish.
func (c *Client) PushFrom(ctx context.Context, h PushHeader, r io.Reader) (ImportResult, error) {
	p, err := c.Push(ctx, h)
	if err != nil {
		return ImportResult{}, err
	}
	if _, err := io.Copy(p, r); err != nil {
		p.Abort()
		if perr := p.Err(); perr != nil {
			return ImportResult{}, perr
		}
		return ImportResult{}, err
	}
	return p.Finish()
}

// Pusher is the writing end of a Push: an io.Writer of the tarball, cut
// into messages of 1 MiB, each sent as flow control allows. A write fails
// once the target has refused the import (Err says why). Not safe for
// concurrent use.
type Pusher struct {
	stream containerpb.Container_PushClient
	cancel context.CancelFunc
	w      *tarWriter
	err    error // the target's, once the stream failed
}

func (p *Pusher) Write(b []byte) (int, error) {
	n, err := p.w.Write(b)
	return n, p.fail(err)
}

// ReadFrom reads r into message buffers directly (io.Copy uses it).
func (p *Pusher) ReadFrom(r io.Reader) (int64, error) {
	n, err := p.w.ReadFrom(r)
	if p.w.err != nil {
		return n, p.fail(p.w.err)
	}
	return n, err
}

// Sent returns the bytes sent so far.
func (p *Pusher) Sent() int64 { return p.w.Sent() }

// Err returns why the stream failed, once it has: usually the target's
// refusal (container.ErrExists, ErrNoSpace, ...). nil before.
func (p *Pusher) Err() error { return p.err }

// Finish sends the end of the stream with its checksum and waits for the
// target to import the container.
func (p *Pusher) Finish() (ImportResult, error) {
	defer p.cancel()
	if p.err != nil {
		return ImportResult{}, p.err
	}
	if err := p.w.Close(); err != nil {
		return ImportResult{}, p.fail(err)
	}
	resp, err := p.stream.CloseAndRecv()
	if err != nil {
		p.err = fromStatus(err)
		return ImportResult{}, p.err
	}
	return ImportResult{Descriptor: descFromPB(resp.Container), Bytes: resp.Bytes}, nil
}

// Abort cancels the stream: the target discards what it received.
func (p *Pusher) Abort() { p.cancel() }

// fail records why the stream failed. A Send that returns io.EOF means
// the target ended the call, and its status says why.
func (p *Pusher) fail(err error) error {
	if err == nil || p.err != nil {
		if p.err != nil {
			return p.err
		}
		return nil
	}
	if err == io.EOF {
		_, rerr := p.stream.CloseAndRecv()
		if rerr == nil {
			rerr = fmt.Errorf("push container %d: the target answered before the end of the stream: %w", p.w.id, ErrInvalid)
		}
		err = rerr
	}
	p.err = fromStatus(err)
	return p.err
}

// Tarball is the reading end of a Download: a container's tarball, checked
// as it comes (offsets, and the checksum at the end: Read returns
// container.ErrCorrupt or io.ErrUnexpectedEOF, wrapped, instead of io.EOF
// when it is not whole).
type Tarball struct {
	// Size is the container's size on disk, Compression the tarball's.
	Size        int64
	Compression container.Compression
	r           *tarReader
	cancel      context.CancelFunc
}

func (t *Tarball) Read(p []byte) (int, error) { return t.r.Read(p) }

// Close ends the download.
func (t *Tarball) Close() error {
	t.cancel()
	return nil
}

// Download returns a reader of container id's tarball, compressed with c.
//
// Errors: container.ErrNotFound, container.ErrNotClosed,
// container.ErrBadCompression, ErrUnavailable, all wrapped.
func (c *Client) Download(ctx context.Context, id uint64, comp container.Compression) (*Tarball, error) {
	if _, err := container.ParseCompression(string(comp)); err != nil {
		return nil, fmt.Errorf("download container %d: %w", id, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	stream, err := c.rpc.Download(ctx, &containerpb.DownloadRequest{ContainerId: id, Compression: string(comp)})
	if err != nil {
		cancel()
		return nil, fromStatus(err)
	}
	first, err := stream.Recv()
	if err != nil {
		cancel()
		if err == io.EOF {
			return nil, fmt.Errorf("download container %d: empty stream: %w", id, io.ErrUnexpectedEOF)
		}
		return nil, fromStatus(err)
	}
	if first.ContainerId != id {
		cancel()
		return nil, fmt.Errorf("download container %d: the node sent container %d: %w", id, first.ContainerId, ErrInvalid)
	}
	r := newTarReader(first, func() (*containerpb.TarChunk, error) {
		m, err := stream.Recv()
		if err != nil && err != io.EOF {
			err = fromStatus(err)
		}
		return m, err
	})
	return &Tarball{Size: first.Size, Compression: container.Compression(first.Compression), r: r, cancel: cancel}, nil
}

// FetchRequest asks a node to import a container from other nodes.
type FetchRequest struct {
	Container   uint64
	Compression container.Compression
	// Sources are tried in order until one delivers.
	Sources  []string
	WaitScan bool
	// Index, when set, downloads the EC index the sources hold staged
	// (they encoded or rebuilt it), not a container of their stores.
	Index int
}

// Fetch asks the node to import a container, downloading it from the
// first source that delivers.
//
// Errors: the node's (container.ErrExists, container.ErrNoSpace, ...);
// ErrUnavailable when no source delivered (the message says why each
// failed), all wrapped.
func (c *Client) Fetch(ctx context.Context, req FetchRequest) (ImportResult, error) {
	if _, err := container.ParseCompression(string(req.Compression)); err != nil {
		return ImportResult{}, fmt.Errorf("fetch container %d: %w", req.Container, err)
	}
	resp, err := c.rpc.Fetch(ctx, &containerpb.FetchRequest{
		ContainerId:  req.Container,
		Compression:  string(req.Compression),
		Sources:      req.Sources,
		WaitScan:     req.WaitScan,
		ReplicaIndex: uint32(req.Index),
	})
	if err != nil {
		return ImportResult{}, fromStatus(err)
	}
	return ImportResult{Descriptor: descFromPB(resp.Container), Bytes: resp.Bytes, Source: resp.Source}, nil
}
