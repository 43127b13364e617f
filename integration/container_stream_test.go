package integration

import (
	"context"
	"github.com/cmfs-project/cmfs/internal/wait"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/cmfs-project/cmfs/api/containerpb"
	"github.com/cmfs-project/cmfs/container"
	"github.com/cmfs-project/cmfs/internal/auth"
)

// rawTarball returns container id's uncompressed tarball from node n (a
// raw client: what a peer would push), and the size to push it with.
func rawTarball(t testing.TB, n *replNode, id string) ([]byte, int64) {
	t.Helper()
	tb, err := nodeClient(t, n).Download(context.Background(), parseID(t, id), container.None)
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	b, err := io.ReadAll(tb)
	if err != nil {
		t.Fatal(err)
	}
	return b, tb.Size
}

// TestContainerStalledPush opens a Push to a node with a raw gRPC client
// that declares 27 MiB, sends the start of a real tarball and then
// nothing, the stream left open. The node's volume is a 64 MiB tmpfs,
// which the push's reservation (2× its size) fills: while it stalls, a
// replicate to the node is refused for want of room. The node cuts the
// stream after --stream-idle-timeout on its own, removes the tarball
// and the extract directory, releases the reservation, and a replicate
// and a put to it then succeed — the stalled client still connected.
func TestContainerStalledPush(t *testing.T) {
	a := startNode(t, "a")
	files := []string{randomFile(t, t.TempDir(), "data", 3<<20)}
	id := a.fill(t, files...)
	other := a.fill(t, randomFile(t, t.TempDir(), "other", 3<<20))
	tarball, _ := rawTarball(t, a, id)
	const idle = 3 * time.Second
	for _, tc := range []struct {
		name string
		send int // bytes of the tarball sent, in messages of 32 KiB
	}{
		{"idle after the first message", 32 << 10},
		{"stopped mid-stream", len(tarball) / 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mnt := smallTmpfs(t, "64m")
			vol := filepath.Join(mnt, "vol")
			b := startNode(t, "b", "--volume", vol, "--stream-idle-timeout", idle.String())
			defer b.stop(t) // before the cleanup unmounts its volume

			conn, err := grpc.NewClient(b.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
				grpc.WithPerRPCCredentials(auth.Credentials(testToken(t))))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			stream, err := containerpb.NewContainerClient(conn).Push(ctx)
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			for off := 0; off < tc.send; off += 32 << 10 {
				m := &containerpb.TarChunk{ContainerId: parseID(t, id), Offset: int64(off), Data: tarball[off:min(off+32<<10, tc.send)]}
				if off == 0 {
					m.Size, m.Compression = 27<<20, "none"
				}
				if err := stream.Send(m); err != nil {
					t.Fatalf("send at %d: %v", off, err)
				}
			}
			wait.For(t, 10*time.Second, "the stalled push's tarball in tmp", func() bool {
				tmp, _ := volumeListing(t, vol)
				return len(tmp) > 0 || time.Since(start) > idle/2
			})
			// Only a check that comes well before the cut could see the
			// reservation in force.
			if res := a.run(t, "replicate", other, "--to", b.Addr); time.Since(start) < idle/2 {
				expectReplicadRefusal(t, []string{"container", "replicate"}, res, "no volume has room")
			}

			// The client neither closes nor cancels the stream: only the
			// node can end it.
			err = stream.RecvMsg(new(containerpb.ImportResponse))
			if ctx.Err() != nil {
				t.Fatalf("the node did not cut the stalled push in %v: %v", time.Since(start).Round(time.Second), err)
			}
			if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "nothing received for "+idle.String()) {
				t.Fatalf("the node ended the stalled push with %v, want Unavailable, nothing received for %v", err, idle)
			}
			t.Logf("cut after %v: %v", time.Since(start).Round(time.Millisecond), err)
			checkClean(t, vol)

			res := a.must(t, "replicate", id, "--to", b.Addr, "--wait-scan")
			if !strings.Contains(res.Stdout, "CLOSED") {
				t.Errorf("replicate after the cut: %v", res)
			}
			b.checkBlocks(t, files...)
			put := b.must(t, "put", randomFile(t, t.TempDir(), "new", 100_000))
			if !strings.Contains(put.Stdout, "new") {
				t.Errorf("put after the cut: %v", put)
			}
			if tmp, _ := volumeListing(t, vol); len(tmp) > 0 {
				t.Errorf("tmp holds %v", tmp)
			}
		})
	}
}

// TestContainerPullAdvertise runs the source node in a network namespace
// of its own, listening on 127.0.0.1:1 there, which the target (in the
// test's namespace) cannot reach: only two forwarders join them, one
// into the source's namespace (how the CLI and the target reach it), one
// out of it (how the source reaches the target). Push works either way;
// pull, where the target downloads from the source, fails with a message
// naming the address and --advertise until the source advertises the
// forwarder's address, and then succeeds through it.
func TestContainerPullAdvertise(t *testing.T) {
	b := startNode(t, "b")
	for _, advertise := range []bool{false, true} {
		name := map[bool]string{false: "listen address", true: "advertised"}[advertise]
		t.Run(name, func(t *testing.T) {
			ns := newNetns(t)
			into, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			const listen = "127.0.0.1:1" // in the source's namespace; nothing listens there outside
			aAddr := forward(t, into, ns.dialer(t, listen))
			toB := forward(t, ns.listen(t), func() (net.Conn, error) { return net.Dial("tcp", b.Addr) })
			extra := []string{"--listen", listen} // after start's own --listen: it wins
			if advertise {
				extra = append(extra, "--advertise", aAddr)
			}
			a := startNodeIn(t, ns, "a", append([]string{"--volume", filepath.Join(t.TempDir(), "a")}, extra...)...)
			if a.Addr != listen {
				t.Fatalf("the source listens on %s, want %s", a.Addr, listen)
			}
			a.Addr = aAddr // the CLI runs outside the namespace
			files := []string{randomFile(t, t.TempDir(), "data", 2<<20+5)}
			pushed := a.fill(t, files...)
			a.must(t, "replicate", pushed, "--to", toB, "--mode", "push")
			pulled := a.fill(t, randomFile(t, t.TempDir(), "more", 1<<20))
			res := a.run(t, "replicate", pulled, "--to", toB, "--mode", "pull", "--wait-scan")
			if !advertise {
				expectReplicadRefusal(t, []string{"container", "replicate", "--mode", "pull"}, res, listen, "--advertise")
				if _, ok := b.find(t, pulled); ok {
					t.Errorf("the target holds container %s", pulled)
				}
				return
			}
			if res.Code != 0 || !strings.Contains(res.Stdout, "CLOSED; pull") {
				t.Fatalf("pull through the advertised %s: %v", aAddr, res)
			}
			b.checkBlocks(t, files...)
		})
	}
}
