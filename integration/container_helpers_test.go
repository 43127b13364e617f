package integration

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"github.com/cmfs-project/cmfs/internal/wait"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/Shopify/toxiproxy/v2/stream"
	"github.com/Shopify/toxiproxy/v2/toxics"
	"github.com/rs/zerolog"

	"github.com/cmfs-project/cmfs/internal/auth"
	"github.com/cmfs-project/cmfs/peer"
)

// The container tests run `replicad serve --volume` nodes as real
// processes on 127.0.0.1 ports they pick themselves (--listen
// 127.0.0.1:0, read back from the "listening on" line), and drive them
// with `replicad container ...`, or with a raw gRPC client where a test
// needs to send what replicad never would.

// replNode is one `replicad serve --volume` process. It can be stopped,
// killed and started again on the same address and volumes.
type replNode struct {
	t       testing.TB
	name    string
	volumes []string
	extra   []string // further serve flags
	client  []string // flags of the container commands run against it (TLS)
	Addr    string   // host:port, known once started
	Metrics string   // the metrics address, with --metrics
	ns      *netns   // the network namespace it runs in; nil: the test's
	p       *proc
}

// startNode starts node name with one fresh volume (unless extra has
// --volume) and the extra serve flags.
func startNode(t testing.TB, name string, extra ...string) *replNode {
	t.Helper()
	return startNodeIn(t, nil, name, extra...)
}

// startNodeIn is startNode in network namespace ns (nil: the test's).
func startNodeIn(t testing.TB, ns *netns, name string, extra ...string) *replNode {
	t.Helper()
	n := &replNode{t: t, name: name, extra: extra, ns: ns}
	if flagValue(extra, "--volume") == "" {
		v := filepath.Join(t.TempDir(), name)
		n.volumes = []string{v}
	}
	n.start(t)
	return n
}

// Volume is the node's first volume.
func (n *replNode) Volume() string {
	if len(n.volumes) > 0 {
		return n.volumes[0]
	}
	return flagValue(n.extra, "--volume")
}

var (
	listeningLine = regexp.MustCompile(`listening on (\S+) \(`)
	metricsAddr   = regexp.MustCompile(`metrics http://(\S+)/metrics`)
)

// start runs serve, on 127.0.0.1:0 the first time and on the same
// address after, and waits for its "listening on" line.
func (n *replNode) start(t testing.TB) {
	t.Helper()
	addr := n.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	args := []string{"serve", "--listen", addr, "--node-id", n.name}
	for _, v := range n.volumes {
		args = append(args, "--volume", v)
	}
	args = append(args, n.extra...)
	var line []string
	p, err := startListening(10*time.Second, func() *proc {
		var p *proc
		if bin := replicadPath(t); n.ns == nil {
			p = startProc(t, bin, args...)
		} else if n.ns.do(t, func() { p = startProc(t, bin, args...) }); p == nil {
			t.FailNow() // startProc said why
		}
		return p
	}, func(p *proc) bool {
		b, _ := os.ReadFile(p.stdout)
		line = listeningLine.FindStringSubmatch(string(b))
		return line != nil
	})
	if err != nil {
		t.Fatal(err)
	}
	n.p, n.Addr = p, line[1]
	b, _ := os.ReadFile(p.stdout)
	if m := metricsAddr.FindStringSubmatch(string(b)); m != nil {
		n.Metrics = m[1]
	}
}

// stop sends SIGTERM and checks the node exits 0.
func (n *replNode) stop(t testing.TB) {
	t.Helper()
	n.p.cmd.Process.Signal(syscall.SIGTERM)
	if res := n.p.wait(t, 20*time.Second); res.Code != 0 {
		t.Fatalf("node %s after SIGTERM: %v", n.name, res)
	}
}

// kill9 kills the node with SIGKILL.
func (n *replNode) kill9(t testing.TB) {
	t.Helper()
	n.p.kill()
}

// restart starts the node again after stop or kill9.
func (n *replNode) restart(t testing.TB) {
	t.Helper()
	n.start(t)
}

// dialNode is a raw client of a node without TLS, with the tests' token.
func dialNode(ctx context.Context, addr string) (*peer.Client, error) {
	tok, err := auth.Read(os.Getenv(tokenEnv))
	if err != nil {
		return nil, err
	}
	return peer.Dial(ctx, addr, peer.WithToken(tok))
}

// nodeClient dials node n with the tests' token, for the test's length.
func nodeClient(t testing.TB, n *replNode) *peer.Client {
	t.Helper()
	c, err := dialNode(context.Background(), n.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// testToken is the token every replicad of the tests serves with.
func testToken(t testing.TB) string {
	t.Helper()
	tok, err := auth.Read(os.Getenv(tokenEnv))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// run runs `replicad container <sub> --server <node> args...`.
func (n *replNode) run(t testing.TB, sub string, args ...string) result {
	t.Helper()
	return replicad(t, append(append([]string{"container", sub, "--server", n.Addr}, n.client...), args...)...)
}

// must is run that must exit 0.
func (n *replNode) must(t testing.TB, sub string, args ...string) result {
	t.Helper()
	res := n.run(t, sub, args...)
	if res.Code != 0 {
		t.Fatalf("replicad container %s --server %s (%s) %s: %v", sub, n.Addr, n.name, strings.Join(args, " "), res)
	}
	return res
}

// containerInfo is a line of `container list --json`.
type containerInfo struct {
	ID                 string `json:"id"`
	State              string `json:"state"`
	Reason             string `json:"reason"`
	Bytes              int64  `json:"bytes"`
	Blocks             int64  `json:"blocks"`
	DescriptorChecksum string `json:"descriptor_checksum"`
	ContainerChecksum  string `json:"container_checksum"`
	Replication        string `json:"replication"`
	ReplicaIndex       int    `json:"replica_index"`
}

// list returns the node's containers.
func (n *replNode) list(t testing.TB) []containerInfo {
	t.Helper()
	res := n.must(t, "list", "--json")
	var out []containerInfo
	for _, line := range strings.Split(strings.TrimSpace(res.Stdout), "\n") {
		if line == "" {
			continue
		}
		var c containerInfo
		if err := json.Unmarshal([]byte(line), &c); err != nil {
			t.Fatalf("container list --json: line %q: %v", line, err)
		}
		out = append(out, c)
	}
	return out
}

// find returns container id on the node, and whether it is there.
func (n *replNode) find(t testing.TB, id string) (containerInfo, bool) {
	t.Helper()
	for _, c := range n.list(t) {
		if c.ID == id {
			return c, true
		}
	}
	return containerInfo{}, false
}

// waitState polls until container id is in state on the node.
func (n *replNode) waitState(t testing.TB, id, state string) containerInfo {
	t.Helper()
	var c containerInfo
	wait.For(t, 30*time.Second, fmt.Sprintf("container %s on %s to be %s", id, n.name, state), func() bool {
		c, _ = n.find(t, id)
		return c.State == state
	})
	return c
}

// putFile is one file of `container put --json`.
type putFile struct {
	File      string `json:"file"`
	Container string `json:"container"`
	XXH64     string `json:"xxh64"`
	Size      int64  `json:"size"`
}

// fill puts files into the node's open container, closes it, and returns
// its id. The files must all go into one container.
func (n *replNode) fill(t testing.TB, files ...string) string {
	t.Helper()
	return n.fillReplication(t, "", files...)
}

// fillReplication is fill into the open container of replication ("":
// the node's default).
func (n *replNode) fillReplication(t testing.TB, replication string, files ...string) string {
	t.Helper()
	args := []string{"--json"}
	if replication != "" {
		args = append(args, "--replication", replication)
	}
	res := n.must(t, "put", append(args, files...)...)
	var out struct {
		Files []putFile `json:"files"`
	}
	if err := json.Unmarshal([]byte(res.Stdout), &out); err != nil || len(out.Files) != len(files) {
		t.Fatalf("container put --json: %v\n%v", err, res)
	}
	id := out.Files[0].Container
	for _, f := range out.Files {
		if f.Container != id {
			t.Fatalf("put: the files went into several containers: %+v", out.Files)
		}
		if want := xxhsum(t, f.File); f.XXH64 != want {
			t.Errorf("put %s: xxh64 %s, xxhsum says %s", f.File, f.XXH64, want)
		}
	}
	if res := n.must(t, "close", id); !strings.Contains(res.Stdout, "CLOSED") {
		t.Fatalf("container close %s: %v", id, res)
	}
	return id
}

// get returns the bytes `container get` reads for the xxh64 from the node.
func (n *replNode) get(t testing.TB, sum string) []byte {
	t.Helper()
	out := filepath.Join(t.TempDir(), "block")
	n.must(t, "get", sum, "-o", out)
	return readFile(t, out)
}

// checkBlocks checks that the node serves each file's bytes by its xxh64.
func (n *replNode) checkBlocks(t testing.TB, files ...string) {
	t.Helper()
	for _, f := range files {
		want := readFile(t, f)
		if got := n.get(t, xxhsum(t, f)); !bytes.Equal(got, want) {
			t.Errorf("node %s: block of %s: %d bytes, not the %d of the file", n.name, f, len(got), len(want))
		}
	}
}

// tmpEntries lists what is in the node's volume tmp directories, and the
// container directories on the volume.
func volumeListing(t testing.TB, vol string) (tmp, containers []string) {
	t.Helper()
	des, err := os.ReadDir(vol)
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range des {
		if _, err := strconv.ParseUint(de.Name(), 10, 64); err == nil {
			containers = append(containers, de.Name())
		}
	}
	filepath.WalkDir(filepath.Join(vol, "tmp"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(vol, p)
			tmp = append(tmp, rel)
		}
		if err == nil && d.IsDir() && strings.Count(strings.TrimPrefix(p, vol), "/") > 2 {
			rel, _ := filepath.Rel(vol, p)
			tmp = append(tmp, rel+"/") // a directory inside a tmp directory
		}
		return nil
	})
	slices.Sort(tmp)
	return tmp, containers
}

// checkClean fails t unless the volume holds exactly the containers want
// and nothing in its tmp directories.
func checkClean(t testing.TB, vol string, want ...string) {
	t.Helper()
	tmp, cs := volumeListing(t, vol)
	slices.Sort(want)
	if len(tmp) > 0 || !slices.Equal(cs, want) {
		t.Errorf("volume %s: tmp holds %v, containers %v; want nothing in tmp and containers %v", vol, tmp, cs, want)
	}
}

// randomFile writes n random bytes into a new file in dir.
func randomFile(t testing.TB, dir, name string, n int) string {
	t.Helper()
	b := make([]byte, n)
	rand.Read(b)
	p := filepath.Join(dir, name)
	writeFile(t, p, b)
	return p
}

// proxy is an in-process toxiproxy in front of a node.
func newProxy(t testing.TB, upstream string) *toxiproxy.Proxy {
	t.Helper()
	api := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	p := toxiproxy.NewProxy(api, "node", "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	return p
}

func init() {
	toxics.Register("cut_once", new(cutOnceToxic))
	toxics.Register("flip", new(flipToxic))
}

// cutOnceToxic closes the first connection that carries Bytes bytes, and
// only that one: the transfer started again after it goes through.
type cutOnceToxic struct {
	Bytes int64 `json:"bytes"`
	done  atomic.Bool
}

// byteCount is a connection's state: the bytes passed so far.
type byteCount struct{ n int64 }

// pipe passes every chunk of stub's connection through edit, which is
// given the bytes passed before the chunk, and closes the connection
// after the chunk edit says is the last.
func pipe(stub *toxics.ToxicStub, edit func(c *stream.StreamChunk, before int64) (out *stream.StreamChunk, last bool)) {
	st := stub.State.(*byteCount)
	for {
		select {
		case <-stub.Interrupt:
			return
		case c := <-stub.Input:
			if c == nil {
				stub.Close()
				return
			}
			c, last := edit(c, st.n)
			st.n += int64(len(c.Data))
			stub.Output <- c
			if last {
				stub.Close()
				return
			}
		}
	}
}

func (t *cutOnceToxic) NewState() any { return new(byteCount) }

func (t *cutOnceToxic) Pipe(stub *toxics.ToxicStub) {
	pipe(stub, func(c *stream.StreamChunk, before int64) (*stream.StreamChunk, bool) {
		if !t.done.Load() && before+int64(len(c.Data)) >= t.Bytes && t.done.CompareAndSwap(false, true) {
			return &stream.StreamChunk{Timestamp: c.Timestamp, Data: c.Data[:t.Bytes-before]}, true
		}
		return c, false
	})
}

// flipToxic inverts the byte at Offset of every connection's stream.
type flipToxic struct {
	Offset int64 `json:"offset"`
	flips  atomic.Int64
}

func (t *flipToxic) NewState() any { return new(byteCount) }

func (t *flipToxic) Pipe(stub *toxics.ToxicStub) {
	pipe(stub, func(c *stream.StreamChunk, before int64) (*stream.StreamChunk, bool) {
		if i := t.Offset - before; i >= 0 && i < int64(len(c.Data)) {
			data := append([]byte(nil), c.Data...)
			data[i] ^= 0xff
			c = &stream.StreamChunk{Timestamp: c.Timestamp, Data: data}
			t.flips.Add(1)
		}
		return c, false
	})
}
