package source

import (
	"crypto/tls"

	"github.com/cmfs-project/cmfs/repl"

	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/experimental"

	"github.com/cmfs-project/cmfs/api/replpb"
	"github.com/cmfs-project/cmfs/control"
	"github.com/cmfs-project/cmfs/internal/auth"
	"github.com/cmfs-project/cmfs/internal/checksum"
	"github.com/cmfs-project/cmfs/internal/window"
	"github.com/cmfs-project/cmfs/journal"
)

// reconnectBackoff paces a client's attempts to reconnect to a source
// it lost: gRPC's default, capped at 10 s.
var reconnectBackoff = func() backoff.Config {
	c := backoff.DefaultConfig
	c.MaxDelay = 10 * time.Second
	return c
}()

// spoolMemory is the largest live file Fetch holds back in memory while
// it waits for the checksum; a larger one goes to a temp file.
const spoolMemory = 32 << 20

// Client is a destination's connection to a Source service. It is safe
// for concurrent use.
type Client struct {
	conn        *grpc.ClientConn
	rpc         replpb.SourceClient
	spoolDir    string
	spoolMemory int64
	streaming   bool
	tls         *tls.Config
	token       string

	bytes   atomic.Int64
	files   atomic.Int64
	retries atomic.Int64
}

// Option tunes Dial.
type Option func(*Client)

// WithSpoolDir sets where Fetch holds back a live file larger than 32 MiB
// until its checksum is known. Default: os.TempDir().
func WithSpoolDir(dir string) Option { return func(c *Client) { c.spoolDir = dir } }

// WithStreaming makes Fetch stream live files through as well, instead of
// holding them back until their checksum is known: for a caller that
// stages the bytes itself, verifies their size and xxh64, and when they
// differ discards them and asks again with f.CM set (cmroot only). It
// saves the copy a large live file otherwise takes, and every hash but the
// caller's: the server sends no checksum and the reader ends with io.EOF,
// so the caller's check is the only one; a mismatch there means the live
// file changed, or a corrupt cmroot entry.
func WithStreaming() Option { return func(c *Client) { c.streaming = true } }

// WithTLS makes Dial connect with TLS (internal/tlsconfig.Client: mutual
// TLS 1.3), to any address, as to a `replicad serve --volume` node with
// --tls-* flags.
func WithTLS(cfg *tls.Config) Option { return func(c *Client) { c.tls = cfg } }

// WithToken makes every call carry token, the server's (internal/auth):
// how a client on the server's host authenticates without TLS.
func WithToken(token string) Option { return func(c *Client) { c.token = token } }

// Dial returns a client for the Source service at addr, which must be a
// loopback address unless WithTLS is given. It does not wait for the
// connection: an unreachable server shows at the first call.
//
// Errors: ErrInsecure (wrapped) for a non-loopback address without TLS.
func Dial(ctx context.Context, addr string, opts ...Option) (*Client, error) {
	c := &Client{spoolMemory: spoolMemory}
	for _, o := range opts {
		o(c)
	}
	creds := insecure.NewCredentials()
	if c.tls != nil {
		creds = credentials.NewTLS(c.tls)
	} else if err := checkLoopback(ctx, "connect to", addr); err != nil {
		return nil, err
	}
	dopts := append(window.Dial(),
		grpc.WithTransportCredentials(creds),
		// A source that vanished without a reset fails the calls and the
		// event stream instead of leaving them waiting.
		window.Keepalive(),
		// Reconnect attempts back off to reconnectMax, not gRPC's 120 s: a
		// follow retrying a source that came back (its own retries cap at
		// 10 s) must not wait two minutes for the channel.
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: reconnectBackoff, MinConnectTimeout: 20 * time.Second}),
		// An event of an rm -r names every file it preserved.
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(math.MaxInt32)),
		experimental.WithBufferPool(buffers),
	)
	if c.token != "" {
		dopts = append(dopts, grpc.WithPerRPCCredentials(auth.Credentials(c.token)))
	}
	if c.tls != nil {
		dopts = append(dopts, grpc.WithUnaryInterceptor(auth.ProbeRefusal(addr, c.tls)))
	}
	conn, err := grpc.NewClient(addr, dopts...)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	c.conn, c.rpc = conn, replpb.NewSourceClient(conn)
	return c, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Stats counts what a Client received.
type Stats struct {
	// Bytes is the file data received, including data discarded because
	// the live file had changed: compare it with the bytes loaded.
	Bytes int64
	// Files counts the Fetch calls.
	Files int64
	// Retries counts live files that turned out changed and were fetched
	// again from cmroot.
	Retries int64
}

// Stats returns the counts since Dial.
func (c *Client) Stats() Stats {
	return Stats{Bytes: c.bytes.Load(), Files: c.files.Load(), Retries: c.retries.Load()}
}

// Fetch returns the content f names (f.Path with f.Size and f.XXH64,
// preserved as f.CM): from the live file while it still matches, else
// from cmroot. Bytes from the live file are held back until their
// checksum is known (in memory, or for a file over 32 MiB in an unlinked
// temp file), and if they turn out different the file is asked for again
// from cmroot; bytes from cmroot, which cannot change, are streamed
// through and checked at the end. The reader returns ErrMismatch (wrapped)
// instead of io.EOF when they are not the content asked for (with
// WithStreaming, the caller checks: see there). A file with
// f.CM set is a preserved original and is read from cmroot only. Close
// the reader to end the transfer early.
//
// Errors: ErrNotFound (neither the path nor cmroot has it), ErrInvalid,
// ErrRefused, ErrUnavailable, all wrapped; ctx's error.
func (c *Client) Fetch(ctx context.Context, f journal.File) (io.ReadCloser, error) {
	c.files.Add(1)
	req := &replpb.ReadFileRequest{Path: f.Path, Size: f.Size, Xxh64: f.XXH64, Cm: f.CM, NoChecksum: c.streaming}
	if id, ok := repl.EventOf(ctx); ok {
		req.AfterEvent = id
	}
	r, err := c.readFile(ctx, req)
	if err != nil {
		return nil, err
	}
	if r.from != fromLive || c.streaming {
		return r, nil
	}
	held, err := c.hold(r, f.Size)
	r.Close()
	if !errors.Is(err, errChanged) {
		return held, err
	}
	c.retries.Add(1)
	req.PreferCmroot = true
	return c.readFile(ctx, req)
}

// readFile starts a ReadFile and reads its first chunk, so that a
// refusal shows as Fetch's error and the reader knows where the bytes
// come from.
func (c *Client) readFile(ctx context.Context, req *replpb.ReadFileRequest) (*fileReader, error) {
	ctx, cancel := context.WithCancel(ctx)
	stream, err := c.rpc.ReadFile(ctx, req)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("fetch %s: %w", req.Path, fromStatus(err))
	}
	r := &fileReader{c: c, cancel: cancel, stream: stream, req: req}
	if !c.streaming {
		r.h = checksum.New()
	}
	r.next()
	if r.err != nil && !errors.Is(r.err, io.EOF) && !errors.Is(r.err, ErrMismatch) && !errors.Is(r.err, errChanged) {
		cancel()
		return nil, r.err
	}
	return r, nil
}

// hold reads r to its end into memory or a temp file and returns a reader
// of what it read, once the checksum is known to match.
func (c *Client) hold(r *fileReader, size int64) (io.ReadCloser, error) {
	// One byte more than asked for shows a server sending too much.
	lr := io.LimitReader(r, size+1)
	tooMuch := func(n int64) error {
		if n <= size {
			return nil
		}
		return fmt.Errorf("fetch %s from %s: more than %d bytes: %w", r.req.Path, r.from, size, errChanged)
	}
	if size <= c.spoolMemory {
		b := bytes.NewBuffer(make([]byte, 0, size+1))
		n, err := b.ReadFrom(lr)
		if err == nil {
			err = tooMuch(n)
		}
		if err != nil {
			return nil, err
		}
		return io.NopCloser(bytes.NewReader(b.Bytes())), nil
	}
	f, err := os.CreateTemp(c.spoolDir, ".cmfs-fetch-*")
	if err != nil {
		return nil, fmt.Errorf("fetch: spool: %w", err)
	}
	// Unlinked at once: nothing is left behind, whatever happens next.
	if err := os.Remove(f.Name()); err != nil {
		f.Close()
		return nil, fmt.Errorf("fetch: spool: %w", err)
	}
	n, err := io.Copy(f, lr)
	if err == nil {
		err = tooMuch(n)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, fmt.Errorf("fetch: spool: %w", err)
	}
	return f, nil
}

// fileReader is a ReadFile stream as an io.ReadCloser that checks the
// xxh64 of what it yielded at the end.
type fileReader struct {
	c      *Client
	cancel context.CancelFunc
	stream grpc.ServerStreamingClient[replpb.Chunk]
	req    *replpb.ReadFileRequest
	from   string
	// h hashes what the reader yields; nil with WithStreaming, where the
	// caller verifies the bytes itself.
	h   *checksum.Digest
	buf []byte
	err error // returned once buf is drained: io.EOF or the failure
}

func (r *fileReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		r.next()
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

// WriteTo writes what is left to w chunk by chunk, as received: io.Copy
// uses it, saving a copy of every byte into the caller's buffer. It
// returns the reader's error at the end, as Read would (nil for io.EOF).
func (r *fileReader) WriteTo(w io.Writer) (int64, error) {
	var n int64
	for {
		for len(r.buf) > 0 {
			m, err := w.Write(r.buf)
			n += int64(m)
			r.buf = r.buf[m:]
			if err != nil {
				return n, err
			}
		}
		if r.err != nil {
			if errors.Is(r.err, io.EOF) {
				return n, nil
			}
			return n, r.err
		}
		r.next()
	}
}

// next receives one chunk into buf, setting err at the end.
func (r *fileReader) next() {
	ch, err := r.stream.Recv()
	if errors.Is(err, io.EOF) {
		r.err = fmt.Errorf("fetch %s: the stream ended before its last chunk: %w", r.req.Path, ErrUnavailable)
		return
	}
	if err != nil {
		r.err = fmt.Errorf("fetch %s: %w", r.req.Path, fromStatus(err))
		return
	}
	if ch.From != "" {
		r.from = ch.From
	}
	r.c.bytes.Add(int64(len(ch.Data)))
	if r.h != nil {
		r.h.Write(ch.Data)
	}
	r.buf = ch.Data
	if !ch.Eof {
		return
	}
	r.cancel()
	if r.h == nil {
		r.err = io.EOF // the caller checks the bytes (WithStreaming)
		return
	}
	// Our own sum, not the server's word for it.
	if got := journal.FormatSum(r.h.Sum64()); got != r.req.Xxh64 {
		sentinel := ErrMismatch
		if r.from == fromLive {
			sentinel = errChanged
		}
		r.err = fmt.Errorf("fetch %s from %s: got xxh64 %s, want %s (size %d): %w", r.req.Path, r.from, got, r.req.Xxh64, r.req.Size, sentinel)
		return
	}
	r.err = io.EOF
}

// Close ends the transfer.
func (r *fileReader) Close() error {
	r.cancel()
	return nil
}

// Status is what a source reports about itself.
type Status struct {
	SourceID    string `json:"source_id"`
	LastEventID uint64 `json:"last_event_id"`
	Backing     string `json:"backing"`
	Mounted     bool   `json:"mounted"`
}

// Status asks the source for its status.
func (c *Client) Status(ctx context.Context) (Status, error) {
	r, err := c.rpc.Status(ctx, &replpb.StatusRequest{})
	if err != nil {
		return Status{}, fmt.Errorf("source status: %w", fromStatus(err))
	}
	return Status{SourceID: r.SourceId, LastEventID: r.LastEventId, Backing: r.Backing, Mounted: r.Mounted}, nil
}

// Last returns the id of the source's newest event (0: none yet).
func (c *Client) Last(ctx context.Context) (uint64, error) {
	st, err := c.Status(ctx)
	return st.LastEventID, err
}

// Range calls fn for every event with from <= id <= to in id order (to 0:
// up to the newest). fn returning an error ends the stream and Range
// returns that error.
//
// Errors: ErrInvalid (to < from), ErrUnavailable, journal.ErrCorrupt,
// all wrapped; fn's error; ctx's error.
func (c *Client) Range(ctx context.Context, from, to uint64, fn func(*journal.Event) error) error {
	return c.events(ctx, from, to, false, fn)
}

// Follow calls fn for every event from id from on, in id order, and keeps
// waiting for new ones until ctx ends, when it returns ctx's error (or fn
// fails, when it returns fn's error).
func (c *Client) Follow(ctx context.Context, from uint64, fn func(*journal.Event) error) error {
	return c.events(ctx, from, 0, true, fn)
}

func (c *Client) events(ctx context.Context, from, to uint64, follow bool, fn func(*journal.Event) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.rpc.Events(ctx, &replpb.EventsRequest{From: from, To: to, Follow: follow})
	if err != nil {
		return fmt.Errorf("source events: %w", fromStatus(err))
	}
	for {
		p, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			if follow && ctx.Err() == nil {
				return fmt.Errorf("source events: the source ended the stream: %w", ErrUnavailable)
			}
			return ctx.Err()
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("source events: %w", fromStatus(err))
		}
		if err := fn(control.EventFromProto(p)); err != nil {
			return err
		}
	}
}
