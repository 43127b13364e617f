package integration

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/cmfs-project/cmfs/internal/wait"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/container"
	"github.com/cmfs-project/cmfs/internal/tlsconfig/tlstest"
	"github.com/cmfs-project/cmfs/peer"
)

// tarEntry is one entry of a tarball held in memory.
type tarEntry struct {
	hdr  tar.Header
	data []byte
}

// download returns the entries of container id's uncompressed tarball
// from node n, and the size to push it with.
func download(t testing.TB, n *replNode, id string) ([]tarEntry, int64) {
	t.Helper()
	raw, size := rawTarball(t, n, id)
	var es []tarEntry
	tr := tar.NewReader(bytes.NewReader(raw))
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		es = append(es, tarEntry{*hdr, data})
	}
	return es, size
}

func parseID(t testing.TB, id string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(id, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// packTar writes entries as a tarball.
func packTar(t testing.TB, es []tarEntry) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range es {
		h := e.hdr
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.data))
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(e.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// pushTar pushes a tarball to node n as container id with a raw client.
func pushTar(t testing.TB, n *replNode, id string, size int64, tarball []byte) (peer.ImportResult, error) {
	t.Helper()
	return nodeClient(t, n).PushFrom(context.Background(), peer.PushHeader{Container: parseID(t, id), Size: size, Compression: container.None, WaitScan: true}, bytes.NewReader(tarball))
}

// TestContainerHostileTarballs pushes hand-built tarballs with a raw gRPC
// client: names that climb out (../), absolute names (/etc/...), a
// symlink and a write through it, a hard link, devices. Each is refused,
// and nothing is written outside the target's tmp, nor left there.
func TestContainerHostileTarballs(t *testing.T) {
	a := startNode(t, "a")
	b := startNode(t, "b")
	id := a.fill(t, containerFiles(t, 256<<10)...)
	good, size := download(t, a, id)
	if len(good) < 4 || good[0].hdr.Name != "container.yaml" {
		t.Fatalf("the exported tarball starts %+v", good[0].hdr)
	}
	outside := t.TempDir()
	victim := filepath.Join(outside, "victim")
	writeFile(t, victim, []byte("do not touch"))
	etc := fmt.Sprintf("/etc/cmfs-hostile-%d", time.Now().UnixNano())

	reg := func(name, data string) tarEntry {
		return tarEntry{tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644}, []byte(data)}
	}
	// with inserts extra after the descriptor; replace swaps the entry
	// named like e.
	with := func(extra ...tarEntry) []tarEntry {
		return append(append([]tarEntry{good[0]}, extra...), good[1:]...)
	}
	replace := func(e tarEntry) []tarEntry {
		out := append([]tarEntry(nil), good...)
		for i := range out {
			if strings.TrimSuffix(out[i].hdr.Name, "/") == strings.TrimSuffix(e.hdr.Name, "/") {
				out[i] = e
				return out
			}
		}
		t.Fatalf("no entry %s to replace", e.hdr.Name)
		return nil
	}
	chunk := "chunks/0.data"
	for _, tc := range []struct {
		name    string
		entries []tarEntry
	}{
		{"../x", with(reg("../../../../../../evil-dotdot", "evil"))},
		{"format name with ..", with(reg("chunks/../../../evil-dotdot2", "evil"))},
		{"/etc/x", with(reg(etc, "evil"))},
		{"absolute into a directory of ours", with(reg(filepath.Join(outside, "evil-abs"), "evil"))},
		{"symlink then a write through it", replace(tarEntry{hdr: tar.Header{Name: "chunks", Typeflag: tar.TypeSymlink, Linkname: outside}})},
		{"symlinked file then a write to it", with(tarEntry{hdr: tar.Header{Name: "metadata/container.checksum", Typeflag: tar.TypeSymlink, Linkname: victim}})},
		{"hard link", replace(tarEntry{hdr: tar.Header{Name: chunk, Typeflag: tar.TypeLink, Linkname: victim}})},
		{"character device", replace(tarEntry{hdr: tar.Header{Name: chunk, Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3, Mode: 0o666}})},
		{"block device", replace(tarEntry{hdr: tar.Header{Name: chunk, Typeflag: tar.TypeBlock, Devmajor: 7, Devminor: 0, Mode: 0o666}})},
		{"fifo", replace(tarEntry{hdr: tar.Header{Name: chunk, Typeflag: tar.TypeFifo, Mode: 0o644}})},
		{"a name outside the format", with(reg("metadata/extra", "x"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := pushTar(t, b, id, size, packTar(t, tc.entries))
			if !errors.Is(err, container.ErrHostile) {
				t.Fatalf("push: %v, want ErrHostile", err)
			}
			t.Log(err)
			if _, ok := b.find(t, id); ok {
				t.Error("the target lists the container")
			}
			checkClean(t, b.Volume())
		})
	}
	// Nothing landed anywhere: not next to the volumes, not in /etc, not
	// in our directory, and the victim is as it was.
	for _, root := range []string{filepath.Dir(filepath.Dir(b.Volume())), outside} {
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && strings.HasPrefix(d.Name(), "evil") {
				t.Errorf("a hostile tarball wrote %s", p)
			}
			return nil
		})
	}
	if _, err := os.Lstat(etc); err == nil {
		os.Remove(etc)
		t.Errorf("a hostile tarball wrote %s", etc)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(victim, &st); err != nil || st.Nlink != 1 || string(readFile(t, victim)) != "do not touch" {
		t.Errorf("the victim file changed: links %d, %v", st.Nlink, err)
	}
	if des, _ := os.ReadDir(outside); len(des) != 1 {
		t.Errorf("%s holds %d entries, want the victim only", outside, len(des))
	}
	// The tarball untouched is accepted: the refusals were for the changes.
	res, err := pushTar(t, b, id, size, packTar(t, good))
	if err != nil || res.Descriptor.State != container.Closed {
		t.Fatalf("the untouched tarball: %+v, %v", res, err)
	}
}

// TestContainerConcurrentImports pushes the same container twice at once
// with raw clients: the second is refused while the first streams, the
// first wins, and a third finds it there.
func TestContainerConcurrentImports(t *testing.T) {
	a := startNode(t, "a")
	b := startNode(t, "b")
	id := a.fill(t, randomFile(t, t.TempDir(), "data", 4<<20))
	es, size := download(t, a, id)
	tarball := packTar(t, es)
	ctx := context.Background()
	c, err := dialNode(ctx, b.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	first, err := c.Push(ctx, peer.PushHeader{Container: parseID(t, id), Size: size, Compression: container.None})
	if err != nil {
		t.Fatal(err)
	}
	half := len(tarball) / 2
	if _, err := first.Write(tarball[:half]); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "the first import to start on the target", func() bool {
		des, _ := os.ReadDir(filepath.Join(b.Volume(), "tmp", "container-copy"))
		return len(des) > 0
	})
	if _, err := pushTar(t, b, id, size, tarball); !errors.Is(err, container.ErrImporting) {
		t.Errorf("the second import while the first streams: %v, want ErrImporting", err)
	}
	if _, err := first.Write(tarball[half:]); err != nil {
		t.Fatal(err)
	}
	res, err := first.Finish()
	if err != nil || res.Descriptor.State != container.Recovering {
		t.Fatalf("the first import: %+v, %v", res, err)
	}
	if _, err := pushTar(t, b, id, size, tarball); !errors.Is(err, container.ErrExists) {
		t.Errorf("an import after the first: %v, want ErrExists", err)
	}
	b.waitState(t, id, "CLOSED")
	checkClean(t, b.Volume(), id)

	// Through the CLI: two nodes holding copies of the same container
	// replicate it to a third at once (bandwidth-limited, so that the
	// streams overlap): one copy wins, the other is refused.
	var srcs []*replNode
	for _, name := range []string{"a2", "a3"} {
		n := startNode(t, name, "--replication-bandwidth", "2MiB/s")
		a.must(t, "replicate", id, "--to", n.Addr, "--wait-scan")
		srcs = append(srcs, n)
	}
	target := startNode(t, "c")
	var procs []*proc
	for _, n := range srcs {
		procs = append(procs, startProc(t, replicadPath(t), "container", "replicate", "--server", n.Addr, id, "--to", target.Addr))
	}
	wins := 0
	for i, p := range procs {
		res := p.wait(t, time.Minute)
		if res.Code == 0 {
			wins++
			continue
		}
		expectReplicadRefusal(t, []string{"container", "replicate", "--server", srcs[i].name}, res, "already exists|being imported")
	}
	if wins != 1 {
		t.Errorf("%d of the two concurrent replications succeeded, want 1", wins)
	}
	target.waitState(t, id, "CLOSED")
	checkClean(t, target.Volume(), id)
}

// tlsFlags returns the TLS flags of a node or client with pair p and CA file ca.
func tlsFlags(p tlstest.Pair, ca string) []string {
	return []string{"--tls-cert", p.Cert, "--tls-key", p.Key, "--tls-ca", ca}
}

// TestContainerTLS runs nodes with mutual TLS: an admin with a valid
// certificate replicates in both modes; a client without a certificate,
// or with one from another CA, is refused; a peer with a certificate from
// another CA, or one not on the target's allow-list, cannot replicate to
// it.
func TestContainerTLS(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "cmfs-test-ca")
	rogueCA := tlstest.NewCA(t, "rogue-ca")
	caFile := ca.WriteCert(t, dir)
	rogueFile := rogueCA.WriteCert(t, dir)
	both := filepath.Join(dir, "both.pem")
	writeFile(t, both, append(readFile(t, caFile), readFile(t, rogueFile)...))

	a := startNode(t, "a", tlsFlags(ca.Issue(t, dir, "a"), caFile)...)
	b := startNode(t, "b", append(tlsFlags(ca.Issue(t, dir, "b"), caFile), "--tls-allow", "a,admin")...)
	c := startNode(t, "c", tlsFlags(ca.Issue(t, dir, "c"), caFile)...)
	// The rogue node trusts both CAs (so that it can start and verify the
	// others) but holds a certificate of the rogue CA.
	rogue := startNode(t, "rogue", tlsFlags(rogueCA.Issue(t, dir, "rogue"), both)...)
	for _, n := range []*replNode{a, b, c, rogue} {
		if strings.Contains(n.p.stderrNow(), "no TLS") {
			t.Errorf("node %s says it has no TLS: %s", n.name, n.p.stderrNow())
		}
	}
	admin := tlsFlags(ca.Issue(t, dir, "admin"), both)
	for _, n := range []*replNode{a, b, c, rogue} {
		n.client = admin
	}
	fill := func(n *replNode, files ...string) string {
		t.Helper()
		res := n.must(t, "put", files...)
		id := strings.Fields(res.Stdout)[0]
		n.must(t, "close", id)
		return id
	}

	files := containerFiles(t, 512<<10)
	id := fill(a, files...)
	for _, mode := range []string{"push", "pull"} {
		if mode == "pull" {
			id = fill(a, containerFiles(t, 256<<10)...) // b holds the first
		}
		res := a.must(t, "replicate", id, "--to", b.Addr, "--mode", mode, "--wait-scan")
		if !strings.Contains(res.Stdout, "CLOSED; "+mode) {
			t.Errorf("%s over mTLS: %v", mode, res)
		}
	}
	// Clients: without TLS; with a certificate of another CA; with a valid
	// certificate that b's allow-list does not name.
	list := func(flags ...string) result {
		return replicad(t, append([]string{"container", "list", "--server", b.Addr}, flags...)...)
	}
	expectReplicadRefusal(t, []string{"container", "list", "(no TLS)"}, list(), "cannot reach "+b.Addr, "give --tls-cert")
	expectReplicadRefusal(t, []string{"container", "list", "(certificate of another CA)"}, list(tlsFlags(rogueCA.Issue(t, dir, "intruder"), both)...),
		b.Addr+" refused this certificate", "--tls-ca")
	expectReplicadRefusal(t, []string{"container", "list", "(not on the allow-list)"}, list(tlsFlags(ca.Issue(t, dir, "c-admin"), caFile)...),
		b.Addr+" refused this certificate", "--tls-allow")

	// Peers: the rogue node, and c (valid, but not on b's allow-list).
	for _, src := range []*replNode{rogue, c} {
		id := fill(src, containerFiles(t, 64<<10)...)
		res := src.run(t, "replicate", id, "--to", b.Addr)
		expectReplicadRefusal(t, []string{"container", "replicate", "(from " + src.name + ")"}, res, "replicate container "+id+" to "+b.Addr)
		if _, ok := b.find(t, id); ok {
			t.Errorf("b imported %s from %s", id, src.name)
		}
	}
	var ids []string
	for _, c := range b.list(t) {
		ids = append(ids, c.ID)
	}
	if len(ids) != 2 {
		t.Errorf("b holds %v, want the 2 containers a replicated", ids)
	}
	checkClean(t, b.Volume(), ids...)
}

// TestLoadOverTLS loads a dump from a node that serves the warehouse
// (--state) with mutual TLS: `replicad load --source` with a client
// certificate of the node's CA works; without TLS, or with a certificate
// of another CA, it is refused and the target is left as it was.
func TestLoadOverTLS(t *testing.T) {
	m := mount(t)
	for _, d := range []string{"s.db", "s.db/t", "s.db/t/p=1"} {
		if err := os.Mkdir(m.path(d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		writeFile(t, m.path(fmt.Sprintf("s.db/t/p=1/part-%d", i)), bytes.Repeat([]byte{byte('a' + i)}, 100_000+i))
	}
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "cmfs-test-ca")
	rogueCA := tlstest.NewCA(t, "rogue-ca")
	caFile := ca.WriteCert(t, dir)
	n := startNode(t, "src", append(tlsFlags(ca.Issue(t, dir, "src"), caFile), "--state", m.State)...)
	d := replDump(t, m.State, t.TempDir())
	target := filepath.Join(t.TempDir(), "target")
	load := func(flags ...string) result {
		return replicad(t, append(loadArgs(d.Dump, target, fetchFrom{Addr: n.Addr}), flags...)...)
	}
	expectReplicadRefusal(t, []string{"load", "--source", n.Addr, "(no TLS)"}, load())
	// The intruder trusts both CAs, so that it gets as far as the node.
	both := filepath.Join(dir, "both.pem")
	writeFile(t, both, append(readFile(t, caFile), readFile(t, rogueCA.WriteCert(t, dir))...))
	expectReplicadRefusal(t, []string{"load", "--source", n.Addr, "(certificate of another CA)"},
		load(tlsFlags(rogueCA.Issue(t, dir, "intruder"), both)...))
	if st := statusOf(t, target); st.LastReplID != 0 {
		t.Fatalf("a refused load advanced the target to %d", st.LastReplID)
	}
	if res := load(tlsFlags(ca.Issue(t, dir, "replica"), caFile)...); res.Code != 0 {
		t.Fatalf("load over mTLS: %v", res)
	}
	checkTarget(t, "a load over mutual TLS", target, sourceTree(t, m))
	n.stop(t)
}
