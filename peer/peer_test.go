package peer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cespare/xxhash/v2"
	"github.com/cmfs-project/cmfs/api/containerpb"
	"github.com/cmfs-project/cmfs/container"
	"github.com/cmfs-project/cmfs/internal/checksum"
	"github.com/cmfs-project/cmfs/internal/tlsconfig"
)

// node is a Server on 127.0.0.1 and a client of it.
type node struct {
	store *fakeStore // nil for a real store
	srv   *Server
	addr  string
	c     *Client
}

// startNode serves store on a free loopback port until the test ends;
// the cleanup also checks that no import is left behind.
func startNode(t *testing.T, store *fakeStore, cfg Config, opts ...Option) *node {
	t.Helper()
	return startNodeWith(t, store, cfg, nil, opts...)
}

// startNodeWith is startNode with setup run on the server before it
// serves.
func startNodeWith(t *testing.T, store *fakeStore, cfg Config, setup func(*Server), opts ...Option) *node {
	t.Helper()
	n := serve(t, store, cfg, setup, opts...)
	n.store = store
	t.Cleanup(func() { store.check(t) })
	return n
}

// testToken is the token of the test nodes without TLS.
const testToken = "0123456789abcdef0123456789abcdef"

// serve serves st on a free loopback port until the test ends. A node
// without TLS gets testToken, and the client sends it (harmless with TLS:
// opts can override).
func serve(t testing.TB, st Store, cfg Config, setup func(*Server), opts ...Option) *node {
	t.Helper()
	if !cfg.TLS.Enabled() && cfg.Token == "" {
		cfg.Token = testToken
	}
	opts = append([]Option{WithToken(testToken)}, opts...)
	srv, err := NewServer(st, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if setup != nil {
		setup(srv)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis) }()
	n := &node{srv: srv, addr: lis.Addr().String()}
	if n.c, err = Dial(ctx, n.addr, opts...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		n.c.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve %s: %v", n.addr, err)
		}
	})
	return n
}

// fastRetry is a Config whose retries do not make tests wait.
func fastRetry() Config { return Config{Backoff: 10 * time.Millisecond} }

func TestAdmin(t *testing.T) {
	n := startNode(t, newFakeStore(), Config{})
	ctx := context.Background()
	files := map[string][]byte{"empty": nil, "small": []byte("hello\n"), "big": bytes.Repeat([]byte("0123456789abcdef"), 200_000)}
	var id uint64
	for name, data := range files {
		got, b, err := n.c.Put(ctx, name, bytes.NewReader(data))
		if err != nil {
			t.Fatalf("put %s: %v", name, err)
		}
		if want := (container.BlockID{Sum: checksum.Sum64(data), Size: int64(len(data))}); b != want {
			t.Errorf("put %s: block %v, want %v", name, b, want)
		}
		if id != 0 && got != id {
			t.Errorf("put %s: container %d, the others went to %d", name, got, id)
		}
		id = got
	}
	for name, data := range files {
		for _, b := range []container.BlockID{{Sum: checksum.Sum64(data), Size: int64(len(data))}, {Sum: checksum.Sum64(data), Size: -1}} {
			r, size, err := n.c.Get(ctx, b)
			if err != nil {
				t.Fatalf("get %s: %v", name, err)
			}
			got, err := io.ReadAll(r)
			r.Close()
			if err != nil || size != int64(len(data)) || !bytes.Equal(got, data) {
				t.Errorf("get %s (%v): %d bytes of %d, %v", name, b, len(got), size, err)
			}
		}
	}
	if _, _, err := n.c.Get(ctx, container.BlockID{Sum: 1, Size: 1}); !errors.Is(err, container.ErrBlockNotFound) {
		t.Errorf("get a missing block: %v, want ErrBlockNotFound", err)
	}
	d, err := n.c.CloseContainer(ctx, id)
	if err != nil || d.State != container.Closed || d.ID != id || d.Blocks != 3 {
		t.Errorf("close: %+v, %v", d, err)
	}
	if _, err := n.c.CloseContainer(ctx, 12345); !errors.Is(err, container.ErrNotFound) {
		t.Errorf("close a missing container: %v, want ErrNotFound", err)
	}
	ds, err := n.c.List(ctx)
	if err != nil || len(ds) != 1 || ds[0].ID != id || ds[0].State != container.Closed {
		t.Errorf("list: %+v, %v", ds, err)
	}
	if d, err := n.c.Verify(ctx, id); err != nil || d.State != container.Closed {
		t.Errorf("verify: %+v, %v", d, err)
	}
}

// pushRaw pushes msgs through the generated client and returns the
// status.
func pushRaw(t *testing.T, n *node, msgs []*containerpb.TarChunk) (*containerpb.ImportResponse, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := n.c.rpc.Push(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		if err := stream.Send(m); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	return stream.CloseAndRecv()
}

// chunks cuts data into messages of container id at size, with the end
// marker on the last.
func chunks(id uint64, data []byte, size int) []*containerpb.TarChunk {
	var msgs []*containerpb.TarChunk
	for off := 0; off < len(data) || off == 0; off += size {
		end := min(off+size, len(data))
		msgs = append(msgs, &containerpb.TarChunk{ContainerId: id, Offset: int64(off), Data: data[off:end]})
		if end == len(data) {
			break
		}
	}
	msgs[0].Size = int64(len(data))
	last := msgs[len(msgs)-1]
	last.Eof, last.Xxh64 = true, checksum.Format(xxhash.Sum64(data)) // the stream's own sum is plain xxh64
	return msgs
}

func TestPushStream(t *testing.T) {
	data := bytes.Repeat([]byte("tarball "), 40_000) // 320,000 bytes
	const id = 7
	for _, tc := range []struct {
		name   string
		edit   func([]*containerpb.TarChunk) []*containerpb.TarChunk
		code   codes.Code
		substr string
	}{
		{"contiguous", nil, codes.OK, ""},
		{"gap", func(m []*containerpb.TarChunk) []*containerpb.TarChunk { return append(m[:2:2], m[3:]...) }, codes.InvalidArgument, "(a gap)"},
		{"overlap", func(m []*containerpb.TarChunk) []*containerpb.TarChunk {
			m[2].Offset -= 10
			return m
		}, codes.InvalidArgument, "(an overlap)"},
		{"first not at 0", func(m []*containerpb.TarChunk) []*containerpb.TarChunk { return m[1:] }, codes.InvalidArgument, "first message at offset"},
		{"another container", func(m []*containerpb.TarChunk) []*containerpb.TarChunk {
			m[3].ContainerId = 8
			return m
		}, codes.InvalidArgument, "a message of container 8"},
		{"no end marker", func(m []*containerpb.TarChunk) []*containerpb.TarChunk {
			m[len(m)-1].Eof = false
			return m
		}, codes.Unknown, "without its end marker"},
		{"data after the end marker", func(m []*containerpb.TarChunk) []*containerpb.TarChunk {
			last := m[len(m)-1]
			return append(m, &containerpb.TarChunk{ContainerId: id, Offset: last.Offset + int64(len(last.Data)), Data: []byte("more")})
		}, codes.InvalidArgument, "after its end marker"},
		{"empty message after the end marker", func(m []*containerpb.TarChunk) []*containerpb.TarChunk {
			last := m[len(m)-1]
			return append(m, &containerpb.TarChunk{ContainerId: id, Offset: last.Offset + int64(len(last.Data))})
		}, codes.InvalidArgument, "after its end marker"},
		{"checksum", func(m []*containerpb.TarChunk) []*containerpb.TarChunk {
			m[len(m)-1].Xxh64 = "0123456789abcdef"
			return m
		}, codes.DataLoss, "the sender's is 0123456789abcdef"},
		{"no id", func(m []*containerpb.TarChunk) []*containerpb.TarChunk {
			for _, c := range m {
				c.ContainerId = 0
			}
			return m
		}, codes.InvalidArgument, "no container id"},
		{"bad compression", func(m []*containerpb.TarChunk) []*containerpb.TarChunk {
			m[0].Compression = "rar"
			return m
		}, codes.InvalidArgument, `"rar"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := startNode(t, newFakeStore(), Config{})
			msgs := chunks(id, data, 32<<10)
			if tc.edit != nil {
				msgs = tc.edit(msgs)
			}
			resp, err := pushRaw(t, n, msgs)
			if code := status.Code(err); code != tc.code && !(tc.code == codes.Unknown && code != codes.OK) {
				t.Fatalf("code %v (%v), want %v", code, err, tc.code)
			}
			if tc.code == codes.OK {
				if got := n.store.tarball(id); !bytes.Equal(got, data) {
					t.Fatalf("imported %d bytes, not the %d sent", len(got), len(data))
				}
				if resp.Bytes != int64(len(data)) || resp.Container.State != containerpb.State_RECOVERING {
					t.Errorf("response %v", resp)
				}
				return
			}
			if !strings.Contains(err.Error(), tc.substr) {
				t.Errorf("error %v, want %q in it", err, tc.substr)
			}
			if got := n.store.tarball(id); got != nil {
				t.Errorf("%d bytes imported from a refused stream", len(got))
			}
			if back := fromStatus(err); tc.code == codes.InvalidArgument && !errors.Is(back, ErrInvalid) && !errors.Is(back, container.ErrBadCompression) {
				t.Errorf("the client's error %v wraps no InvalidArgument sentinel", back)
			}
		})
	}
}

func TestReplicate(t *testing.T) {
	ctx := context.Background()
	for _, mode := range []Mode{Push, Pull} {
		for _, wait := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/wait=%v", mode, wait), func(t *testing.T) {
				src := startNode(t, newFakeStore(), Config{NodeID: "a"})
				dst := startNode(t, newFakeStore(), Config{NodeID: "b"})
				data := src.store.add(t, 42, 3<<20+12345)
				res, err := src.c.Replicate(ctx, Task{Container: 42, Target: dst.addr, Mode: mode, Compression: container.Zstd, WaitScan: wait})
				if err != nil {
					t.Fatal(err)
				}
				if got := dst.store.tarball(42); !bytes.Equal(got, data) {
					t.Fatalf("the target holds %d bytes, not the %d exported", len(got), len(data))
				}
				want := container.Recovering
				if wait {
					want = container.Closed
				}
				if res.Descriptor.ID != 42 || res.Descriptor.State != want || res.Bytes != int64(len(data)) || res.Attempts != 1 {
					t.Errorf("result %+v, want container 42 %s, %d bytes, 1 attempt", res, want, len(data))
				}
				// Again: the target has it.
				_, err = src.c.Replicate(ctx, Task{Container: 42, Target: dst.addr, Mode: mode})
				if !errors.Is(err, container.ErrExists) {
					t.Errorf("replicating again: %v, want ErrExists", err)
				}
			})
		}
	}
}

// TestReplicateNodeDefault checks that a request leaving the mode to
// the node replicates in push mode, or in pull mode on a node with
// Config.Pull (serve --push=false): the failure names the mode run.
func TestReplicateNodeDefault(t *testing.T) {
	ctx := context.Background()
	for _, pull := range []bool{false, true} {
		t.Run(fmt.Sprintf("pull=%v", pull), func(t *testing.T) {
			src := startNode(t, newFakeStore(), Config{Pull: pull})
			dst := startNode(t, newFakeStore(), Config{})
			data := src.store.add(t, 7, 100_000)
			res, err := src.c.Replicate(ctx, Task{Container: 7, Target: dst.addr, Mode: NodeDefault})
			if err != nil {
				t.Fatal(err)
			}
			if want := map[bool]Mode{false: Push, true: Pull}[pull]; res.Mode != want {
				t.Errorf("replicated in mode %s, want %s", res.Mode, want)
			}
			if got := dst.store.tarball(7); !bytes.Equal(got, data) {
				t.Fatalf("the target holds %d bytes, not the %d exported", len(got), len(data))
			}
			want := "(push,"
			if pull {
				want = "(pull,"
			}
			_, err = src.c.Replicate(ctx, Task{Container: 8, Target: dst.addr, Mode: NodeDefault})
			if !errors.Is(err, container.ErrNotFound) || !strings.Contains(err.Error(), want) {
				t.Errorf("replicating a missing container: %v, want ErrNotFound and %q", err, want)
			}
		})
	}
}

func TestReplicateRefused(t *testing.T) {
	ctx := context.Background()
	src := startNode(t, newFakeStore(), fastRetry())
	dst := startNode(t, newFakeStore(), Config{})
	src.store.add(t, 1, 1000)
	src.store.mu.Lock()
	src.store.containers[1].d.State = container.Open
	src.store.mu.Unlock()
	for _, tc := range []struct {
		name string
		task Task
		want error
	}{
		{"missing", Task{Container: 2, Target: dst.addr}, container.ErrNotFound},
		{"missing, pull", Task{Container: 2, Target: dst.addr, Mode: Pull}, container.ErrNotFound},
		{"open", Task{Container: 1, Target: dst.addr}, container.ErrNotClosed},
		{"no target", Task{Container: 1}, ErrInvalid},
		{"bad compression", Task{Container: 1, Target: dst.addr, Compression: "rar"}, container.ErrBadCompression},
		{"not loopback", Task{Container: 1, Target: "192.0.2.1:1"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := src.c.Replicate(ctx, tc.task)
			if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			t.Log(err)
		})
	}
	if got := dst.store.tarball(1); got != nil {
		t.Error("an open container was replicated")
	}
}

func TestPushRetriesWhileTargetImports(t *testing.T) {
	ctx := context.Background()
	src := startNode(t, newFakeStore(), fastRetry())
	dst := startNode(t, newFakeStore(), Config{})
	data := src.store.add(t, 5, 2<<20)
	dst.store.importHook = func(n int) error {
		if n < 3 {
			return fmt.Errorf("import 5: %w", container.ErrImporting)
		}
		return nil
	}
	res, err := src.c.Replicate(ctx, Task{Container: 5, Target: dst.addr})
	if err != nil {
		t.Fatal(err)
	}
	if res.Attempts != 3 || !bytes.Equal(dst.store.tarball(5), data) {
		t.Errorf("%d attempts, %d bytes: want 3 and the data", res.Attempts, len(dst.store.tarball(5)))
	}
}

func TestFetchFallsBack(t *testing.T) {
	ctx := context.Background()
	good := startNode(t, newFakeStore(), Config{})
	empty := startNode(t, newFakeStore(), Config{})
	dst := startNode(t, newFakeStore(), Config{})
	data := good.store.add(t, 9, 1<<20+5)
	// A port nobody listens on.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := lis.Addr().String()
	lis.Close()

	res, err := dst.c.Fetch(ctx, FetchRequest{Container: 9, Sources: []string{dead, empty.addr, good.addr}, Compression: container.LZ4})
	if err != nil {
		t.Fatal(err)
	}
	if res.Source != good.addr || !bytes.Equal(dst.store.tarball(9), data) || res.Bytes != int64(len(data)) {
		t.Errorf("fetched %d bytes from %s, want %d from %s", res.Bytes, res.Source, len(data), good.addr)
	}
	// Present now: a failure of the target, no source is tried.
	_, err = dst.c.Fetch(ctx, FetchRequest{Container: 9, Sources: []string{good.addr}})
	if !errors.Is(err, container.ErrExists) {
		t.Errorf("fetch again: %v, want ErrExists", err)
	}
	_, err = dst.c.Fetch(ctx, FetchRequest{Container: 10, Sources: []string{dead, empty.addr}})
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), dead+": ") || !strings.Contains(err.Error(), empty.addr+": ") {
		t.Errorf("fetch from no good source: %v, want ErrUnavailable naming both", err)
	}
	if _, err := dst.c.Fetch(ctx, FetchRequest{Container: 10}); !errors.Is(err, ErrInvalid) {
		t.Errorf("fetch without sources: %v, want ErrInvalid", err)
	}
}

func TestDownload(t *testing.T) {
	ctx := context.Background()
	n := startNode(t, newFakeStore(), Config{})
	data := n.store.add(t, 3, 2<<20+7)
	tb, err := n.c.Download(ctx, 3, container.Gzip)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(tb)
	tb.Close()
	if err != nil || !bytes.Equal(got, data) || tb.Size != int64(len(data)) || tb.Compression != container.Gzip {
		t.Errorf("download: %d bytes, size %d, %s, %v", len(got), tb.Size, tb.Compression, err)
	}
	if _, err := n.c.Download(ctx, 4, container.None); !errors.Is(err, container.ErrNotFound) {
		t.Errorf("download a missing container: %v, want ErrNotFound", err)
	}
}

var _ grpc.ServiceRegistrar = (*Server)(nil)

func TestInsecureRefused(t *testing.T) {
	ctx := context.Background()
	srv, err := NewServer(newFakeStore(), Config{Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	for _, addr := range []string{"0.0.0.0:0", ":0", "192.0.2.1:9870"} {
		if err := srv.ListenAndServe(ctx, addr); !errors.Is(err, tlsconfig.ErrInsecure) {
			t.Errorf("listen on %s: %v, want ErrInsecure", addr, err)
		}
		if _, err := Dial(ctx, addr); !errors.Is(err, tlsconfig.ErrInsecure) {
			t.Errorf("dial %s: %v, want ErrInsecure", addr, err)
		}
	}
}

func TestRetryable(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("push: %w", ErrUnavailable), true},
		{fmt.Errorf("import: %w", container.ErrImporting), true},
		{fmt.Errorf("connection error: desc = \"error reading server preface: remote error: tls: certificate required\": %w", ErrUnavailable), false},
		{fmt.Errorf("connection error: desc = \"transport: authentication handshake failed: tls: failed to verify certificate: x509: certificate signed by unknown authority\": %w", ErrUnavailable), false},
		{fmt.Errorf("remote error: tls: bad certificate: %w", ErrUnavailable), false},
		{fmt.Errorf("handshake: peer certificate x is not on the allow-list: tls: peer not on the allow-list: %w", ErrUnavailable), false},
		{fmt.Errorf("import: %w", container.ErrCorrupt), false},
		{fmt.Errorf("import: %w", container.ErrExists), false},
	} {
		if got := retryable(tc.err); got != tc.want {
			t.Errorf("retryable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// TestPutErrorSaidOnce checks that a failed Put's error is the store's
// (or the reader's) message and nothing more: the caller, which named the
// file, adds which one, and no layer repeats "put <name>".
func TestPutErrorSaidOnce(t *testing.T) {
	const storeMsg = "put into container 7: write /vol/7/chunks/0.data: no space left on device"
	tests := []struct {
		name     string
		storeErr error
		r        io.Reader
		want     string
	}{
		{"store", errors.New(storeMsg), strings.NewReader("block"), storeMsg},
		{"store, no space", fmt.Errorf("put: new container: need 0 bytes: %w", container.ErrNoSpace), strings.NewReader("block"),
			"put: new container: need 0 bytes: " + container.ErrNoSpace.Error()},
		{"reader", nil, io.MultiReader(strings.NewReader("part"), errReader{errors.New("read t6: input/output error")}), "read t6: input/output error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := newFakeStore()
			store.putErr = tt.storeErr
			n := startNode(t, store, fastRetry())
			_, _, err := n.c.Put(context.Background(), "t6", tt.r)
			if err == nil || err.Error() != tt.want {
				t.Fatalf("Put: %v, want exactly %q", err, tt.want)
			}
			if tt.storeErr != nil && errors.Is(tt.storeErr, container.ErrNoSpace) && !errors.Is(err, container.ErrNoSpace) {
				t.Errorf("Put: %v does not wrap ErrNoSpace", err)
			}
		})
	}
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }
