package peer

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/internal/checksum"
	"github.com/cmfs-project/cmfs/internal/wait"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cmfs-project/cmfs/api/containerpb"
	"github.com/cmfs-project/cmfs/container"
)

// checkNoImport fails t unless the store reserves nothing and the
// volume's tmp directories hold nothing (no tarball, no extract
// directory, not even an empty one).
func checkNoImport(t *testing.T, st *container.Store, vol string) {
	t.Helper()
	for _, v := range st.Volumes() {
		if v.Reserved != 0 {
			t.Errorf("volume %s: %d bytes still reserved", v.Path, v.Reserved)
		}
	}
	for _, dir := range []string{"container-copy", "container-extract"} {
		des, _ := os.ReadDir(filepath.Join(vol, "tmp", dir))
		for _, de := range des {
			t.Errorf("left in tmp/%s: %s", dir, de.Name())
		}
	}
}

// tightStore is a real store whose one volume says it has free bytes
// free, whatever it holds: an import's reservation shows in what the
// next one may reserve.
func tightStore(t *testing.T, free int64) (*container.Store, string) {
	t.Helper()
	vol := t.TempDir()
	st, err := container.OpenStore([]string{vol}, container.Options{NoSync: true,
		Statfs: func(string) (int64, int64, error) { return 1 << 40, free, nil }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st, vol
}

// TestStalledPushCut opens a Push with a raw client that stalls — idle
// after its first message, idle mid-stream, or trickling below the
// minimum rate — and keeps the stream open: the target cuts it on its
// own, discards the tarball and the extract directory, releases the
// reservation (which, while held, leaves no room for another container),
// and then takes a normal replicate of the same container.
func TestStalledPushCut(t *testing.T) {
	ctx := context.Background()
	srcStore, _ := realStore(t)
	src := serve(t, srcStore, Config{}, nil)
	id, files := fill(t, src, 1<<20, 700<<10, 12345)
	other, _ := fill(t, src, 1<<20, 700<<10, 54321)
	tb, err := src.c.Download(ctx, id, container.None)
	if err != nil {
		t.Fatal(err)
	}
	tarball, err := io.ReadAll(tb)
	tb.Close()
	if err != nil {
		t.Fatal(err)
	}
	size := tb.Size
	// Room for one import of this size, not two.
	need := 2 * (size + 1<<20 + size/64)
	free := need + need/2

	const idle = time.Second
	for _, tc := range []struct {
		name  string
		cfg   Config
		send  []*containerpb.TarChunk
		slow  bool // then one small message every idle/5
		code  codes.Code
		is    error
		words string
	}{
		{"idle after the first message", Config{StreamIdleTimeout: idle}, chunks(id, tarball, 32<<10)[:1],
			false, codes.Unavailable, ErrUnavailable, "nothing received for 1s"},
		{"idle mid-stream", Config{StreamIdleTimeout: idle}, chunks(id, tarball, 32<<10)[:len(tarball)/(2*32<<10)],
			false, codes.Unavailable, ErrUnavailable, "nothing received for 1s"},
		{"below the minimum rate", Config{StreamIdleTimeout: 3 * idle, StreamDeadline: 2 * idle, StreamMinRate: 1 << 30}, chunks(id, tarball, 32<<10)[:1],
			true, codes.DeadlineExceeded, context.DeadlineExceeded, "not done within 2s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dstStore, vol := tightStore(t, free)
			dst := serve(t, dstStore, tc.cfg, nil)
			sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			stream, err := dst.c.rpc.Push(sctx)
			if err != nil {
				t.Fatal(err)
			}
			msgs := tc.send
			msgs[0].Size = size
			start := time.Now()
			for _, m := range msgs {
				if err := stream.Send(m); err != nil {
					t.Fatalf("send: %v", err)
				}
			}
			sent := make(chan struct{})
			if tc.slow {
				go func() {
					defer close(sent)
					off := msgs[len(msgs)-1].Offset + int64(len(msgs[len(msgs)-1].Data))
					for ; off < int64(len(tarball)); off += 1 << 10 {
						select {
						case <-time.After(idle / 5):
						case <-sctx.Done():
							return
						}
						m := &containerpb.TarChunk{ContainerId: id, Offset: off, Data: tarball[off:min(off+1<<10, int64(len(tarball)))]}
						if stream.Send(m) != nil {
							return // the target ended the call
						}
					}
				}()
			} else {
				close(sent)
			}
			// While the stream stalls its reservation leaves no room: seen
			// only if the check comes well before the cut could.
			wait.For(t, 10*time.Second, "the reservation", func() bool { return dstStore.Volumes()[0].Reserved > 0 || time.Since(start) > idle/2 })
			if _, err := src.c.Replicate(ctx, Task{Container: other, Target: dst.addr}); time.Since(start) < idle/2 && !errors.Is(err, container.ErrNoSpace) {
				t.Errorf("replicate beside the stalled push: %v, want ErrNoSpace", err)
			}

			// The client neither closes nor cancels: only the target can end it.
			err = stream.RecvMsg(new(containerpb.ImportResponse))
			took := time.Since(start)
			if sctx.Err() != nil {
				t.Fatalf("the target did not cut the stalled push within %v: %v", took, err)
			}
			if code := status.Code(err); code != tc.code || !strings.Contains(err.Error(), tc.words) {
				t.Fatalf("the target ended the push with %v, want %v and %q", err, tc.code, tc.words)
			}
			if back := fromStatus(err); !errors.Is(back, tc.is) {
				t.Errorf("the client's error %v does not wrap %v", back, tc.is)
			}
			t.Logf("cut after %v: %v", took.Round(time.Millisecond), err)
			<-sent
			wait.For(t, 10*time.Second, "the import to end", func() bool { return dstStore.Volumes()[0].Reserved == 0 })
			checkNoImport(t, dstStore, vol)

			// The stalled stream is still open on the client's side.
			res, err := src.c.Replicate(ctx, Task{Container: id, Target: dst.addr, WaitScan: true})
			if err != nil {
				t.Fatalf("replicate after the cut: %v", err)
			}
			if res.Descriptor.State != container.Closed {
				t.Errorf("replicated as %s, want CLOSED", res.Descriptor.State)
			}
			checkBlocks(t, dst, files)
			checkNoImport(t, dstStore, vol)
		})
	}
}

// TestStalledPutCut opens a Put that sends its first message and stalls,
// which holds the open container for itself: the node cuts it, and the
// next Put goes through.
func TestStalledPutCut(t *testing.T) {
	ctx := context.Background()
	st, _ := realStore(t)
	n := serve(t, st, Config{StreamIdleTimeout: 500 * time.Millisecond}, nil)
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	stream, err := n.c.rpc.Put(sctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&containerpb.PutRequest{Name: "stalled", Data: []byte("the first bytes")}); err != nil {
		t.Fatal(err)
	}
	err = stream.RecvMsg(new(containerpb.PutResponse))
	if sctx.Err() != nil || status.Code(err) != codes.Unavailable {
		t.Fatalf("the stalled put ended with %v, want Unavailable from the node", err)
	}
	pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
	defer pcancel()
	data := []byte("after the cut")
	_, b, err := n.c.Put(pctx, "next", bytes.NewReader(data))
	if err != nil {
		t.Fatalf("put after the cut: %v", err)
	}
	r, _, err := n.c.Get(pctx, b)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	r.Close()
	if err != nil || !bytes.Equal(got, data) {
		t.Errorf("get %v: %q, %v", b, got, err)
	}
	if _, _, err := n.c.Get(pctx, container.BlockID{Sum: checksum.Sum64([]byte("the first bytes")), Size: 15}); !errors.Is(err, container.ErrBlockNotFound) {
		t.Errorf("the stalled put's bytes: %v, want ErrBlockNotFound", err)
	}
}

// TestStalledDownloadCut downloads a container and reads nothing: once
// the node's sends have waited the idle timeout it gives up the export,
// and the reader gets the node's reason instead of the whole tarball.
func TestStalledDownloadCut(t *testing.T) {
	ctx := context.Background()
	exports := make(chan struct{}, 1)
	store := newFakeStore()
	store.exportDone = func() { exports <- struct{}{} }
	n := startNode(t, store, Config{StreamIdleTimeout: 500 * time.Millisecond})
	store.add(t, 3, 32<<20) // more than the flow-control windows hold
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tb, err := n.c.Download(sctx, 3, container.None)
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	select {
	case <-exports:
	case <-sctx.Done():
	}
	if sctx.Err() != nil {
		t.Fatal("the node went on exporting into a download nobody reads")
	}
	got, err := io.ReadAll(tb)
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "could not send for 500ms") {
		t.Fatalf("read %d bytes, %v; want the node's cut (ErrUnavailable)", len(got), err)
	}
}

// TestFetchFromStalledSource has a target fetch from a source whose
// export stops after the first message: the target cuts the download,
// releases the import, and says the source stalled.
func TestFetchFromStalledSource(t *testing.T) {
	ctx := context.Background()
	stall := make(chan struct{})
	t.Cleanup(func() { close(stall) })
	srcStore := newFakeStore()
	srcStore.exportStall = stall
	src := startNode(t, srcStore, Config{StreamIdleTimeout: time.Minute})
	srcStore.add(t, 4, 8<<20)
	dstStore, vol := realStore(t)
	dst := serve(t, dstStore, Config{StreamIdleTimeout: 500 * time.Millisecond}, nil)
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err := dst.c.Fetch(fctx, FetchRequest{Container: 4, Sources: []string{src.addr}})
	if fctx.Err() != nil || !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "nothing received for 500ms") {
		t.Fatalf("fetch from a stalled source: %v, want the target's cut (ErrUnavailable)", err)
	}
	checkNoImport(t, dstStore, vol)
}
