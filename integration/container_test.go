package integration

import (
	"bytes"
	"fmt"
	"github.com/cmfs-project/cmfs/internal/wait"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/container"
)

// containerFiles writes a container's worth of files into a fresh
// directory: random bytes (size), JSON-like lines that compress well, and
// a tiny file.
func containerFiles(t testing.TB, size int) []string {
	t.Helper()
	dir := t.TempDir()
	var lines bytes.Buffer
	for i := 0; lines.Len() < size/2; i++ {
		fmt.Fprintf(&lines, `{"id":%d,"name":"row %d","amount":%d.%02d}`+"\n", i, i, i*37%1000, i%100)
	}
	text := filepath.Join(dir, "rows.json")
	writeFile(t, text, lines.Bytes())
	tiny := filepath.Join(dir, "tiny")
	writeFile(t, tiny, []byte("tiny\n"))
	return []string{randomFile(t, dir, "random.bin", size), text, tiny}
}

// TestContainerReplicate replicates containers between two nodes in push
// and pull mode (asked for with --mode, and by a node serving with
// --push=false) with every compression; the target scans each copy to
// CLOSED and serves every block byte for byte.
func TestContainerReplicate(t *testing.T) {
	a := startNode(t, "a", "--metrics", "127.0.0.1:0")
	p := startNode(t, "p", "--push=false")
	b := startNode(t, "b")
	var placed []string
	for _, comp := range container.Compressions {
		for _, how := range []struct {
			name string
			src  *replNode
			mode []string
			want string
		}{
			{"push", a, []string{"--mode", "push"}, "push"},
			{"pull", a, []string{"--mode", "pull"}, "pull"},
			{"push=false", p, nil, "pull"},
		} {
			t.Run(fmt.Sprintf("%s/%s", comp, how.name), func(t *testing.T) {
				files := containerFiles(t, 1<<20)
				id := how.src.fill(t, files...)
				src, _ := how.src.find(t, id)
				args := append([]string{id, "--to", b.Addr, "--compression", string(comp), "--wait-scan"}, how.mode...)
				res := how.src.must(t, "replicate", args...)
				if want := fmt.Sprintf("container %s on %s: CLOSED; %s, %s, ", id, b.Addr, how.want, comp); !strings.HasPrefix(res.Stdout, want) {
					t.Errorf("replicate printed %q, want it to start %q", res.Stdout, want)
				}
				placed = append(placed, id)
				got, ok := b.find(t, id)
				if !ok || got.State != "CLOSED" || got.DescriptorChecksum != src.DescriptorChecksum ||
					got.ContainerChecksum != src.ContainerChecksum || got.Bytes != src.Bytes || got.Blocks != 3 {
					t.Errorf("on the target: %+v (found %v), on the source: %+v", got, ok, src)
				}
				b.checkBlocks(t, files...)
			})
		}
	}
	checkClean(t, b.Volume(), placed...)
	// The source's metrics count what it sent.
	resp, err := http.Get("http://" + a.Metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `replicad_replication_success_total{node="a"} 10`) {
		t.Errorf("metrics of a lack 10 successes:\n%s", grepLines(string(body), "replicad_replication_"))
	}
	a.stop(t)
	b.stop(t)
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestContainerKillTarget kills the target with SIGKILL while a push is
// streaming into it (the source's bandwidth limit makes the stream last),
// then restarts it: no container, nothing in tmp; the replication run
// again succeeds.
func TestContainerKillTarget(t *testing.T) {
	a := startNode(t, "a", "--replication-bandwidth", "4MiB/s")
	b := startNode(t, "b")
	files := []string{randomFile(t, t.TempDir(), "big", 12<<20)}
	id := a.fill(t, files...)

	repl := startProc(t, replicadPath(t), "container", "replicate", "--server", a.Addr, id, "--to", b.Addr)
	copyDir := filepath.Join(b.Volume(), "tmp", "container-copy")
	wait.For(t, 20*time.Second, "the tarball to grow in the target's tmp", func() bool {
		des, _ := os.ReadDir(copyDir)
		for _, de := range des {
			if fi, err := de.Info(); err == nil && fi.Size() > 1<<20 {
				return true
			}
		}
		return false
	})
	b.kill9(t)
	tmp, cs := volumeListing(t, b.Volume())
	t.Logf("the target killed mid-stream left %v in tmp", tmp)
	if len(tmp) == 0 || len(cs) != 0 {
		t.Fatalf("after the kill: tmp %v, containers %v; want a partial tarball and no container", tmp, cs)
	}
	// Stop the source too, so that its retries do not race the checks.
	a.stop(t)
	if res := repl.wait(t, 30*time.Second); res.Code == 0 {
		t.Fatalf("replicate ended well although its target was killed: %v", res)
	}
	b.restart(t)
	if cs := b.list(t); len(cs) != 0 {
		t.Errorf("the restarted target lists %+v, want nothing", cs)
	}
	checkClean(t, b.Volume())

	a.extra = nil // without the bandwidth limit
	a.restart(t)
	res := a.must(t, "replicate", id, "--to", b.Addr, "--wait-scan")
	if !strings.Contains(res.Stdout, "CLOSED") {
		t.Errorf("the retry: %v", res)
	}
	b.checkBlocks(t, files...)
	checkClean(t, b.Volume(), id)
}

// flipByte inverts one byte of a file.
func flipByte(t testing.TB, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// TestContainerCorruptOnDisk flips one byte of a closed container's chunk
// file: verify says UNHEALTHY (and exits 1), the block is no longer
// served, and a copy of it is UNHEALTHY on the target too, never CLOSED.
func TestContainerCorruptOnDisk(t *testing.T) {
	a := startNode(t, "a")
	b := startNode(t, "b")
	files := containerFiles(t, 1<<20)
	id := a.fill(t, files...)
	if res := a.must(t, "verify", id); !strings.Contains(res.Stdout, "container "+id+": CLOSED") {
		t.Fatalf("verify of a good container: %v", res)
	}
	flipByte(t, filepath.Join(a.Volume(), id, "chunks", "0.data"), 1000) // in the random file
	res := a.run(t, "verify", id)
	if res.Code != 1 || !strings.Contains(res.Stdout, "UNHEALTHY") {
		t.Fatalf("verify after a flipped byte: %v, want UNHEALTHY and exit 1", res)
	}
	expectReplicadRefusal(t, []string{"container", "verify", id}, res, "container "+id+" is UNHEALTHY")
	if c, _ := a.find(t, id); c.State != "UNHEALTHY" || c.Reason == "" {
		t.Errorf("list: %+v, want UNHEALTHY with a reason", c)
	}
	get := a.run(t, "get", xxhsum(t, files[0]))
	expectReplicadRefusal(t, []string{"container", "get"}, get, "no block")
	// The other blocks are intact, but an UNHEALTHY container serves none.
	expectReplicadRefusal(t, []string{"container", "get"}, a.run(t, "get", xxhsum(t, files[2])), "no block")
	// An UNHEALTHY container may be copied; the copy is UNHEALTHY.
	rep := a.run(t, "replicate", id, "--to", b.Addr, "--wait-scan")
	expectReplicadRefusal(t, []string{"container", "replicate"}, rep, "UNHEALTHY")
	if c, _ := b.find(t, id); c.State != "UNHEALTHY" {
		t.Errorf("the copy on the target: %+v, want UNHEALTHY", c)
	}
	// Verified again: still UNHEALTHY, on both.
	for _, n := range []*replNode{a, b} {
		if res := n.run(t, "verify", id); res.Code == 0 || !strings.Contains(res.Stdout, "UNHEALTHY") {
			t.Errorf("verify on %s: %v", n.name, res)
		}
	}
}

// TestContainerCorruptCopy flips a byte of a copy on the target's disk
// after the import and before anything reads it: verify makes it
// UNHEALTHY.
func TestContainerCorruptCopy(t *testing.T) {
	a := startNode(t, "a")
	b := startNode(t, "b")
	files := containerFiles(t, 1<<20)
	id := a.fill(t, files...)
	a.must(t, "replicate", id, "--to", b.Addr, "--wait-scan")
	flipByte(t, filepath.Join(b.Volume(), id, "chunks", "0.data"), 5)
	if res := b.run(t, "verify", id); res.Code != 1 || !strings.Contains(res.Stdout, "UNHEALTHY") {
		t.Errorf("verify of the flipped copy: %v", res)
	}
	// Restarted, the node keeps the verdict.
	b.stop(t)
	b.restart(t)
	if c, _ := b.find(t, id); c.State != "UNHEALTHY" {
		t.Errorf("after a restart: %+v, want UNHEALTHY", c)
	}
}

// TestContainerCorruptStream pushes through a proxy that inverts one byte
// of every connection's stream, 2 MiB in: the target refuses the import
// (or would mark it UNHEALTHY), it never becomes CLOSED, and nothing is
// left in its tmp.
func TestContainerCorruptStream(t *testing.T) {
	a := startNode(t, "a")
	b := startNode(t, "b")
	files := []string{randomFile(t, t.TempDir(), "data", 6<<20)}
	id := a.fill(t, files...)
	proxy := newProxy(t, b.Addr)
	w, err := proxy.Toxics.AddToxicJson(strings.NewReader(`{"name": "flip", "type": "flip", "stream": "upstream", "attributes": {"offset": 2109876}}`))
	if err != nil {
		t.Fatal(err)
	}
	res := a.run(t, "replicate", id, "--to", proxy.Listen, "--wait-scan")
	if flips := w.Toxic.(*flipToxic).flips.Load(); flips == 0 {
		t.Fatalf("the proxy flipped nothing: %v", res)
	}
	if res.Code == 0 {
		if !strings.Contains(res.Stdout, "UNHEALTHY") {
			t.Fatalf("a stream with a flipped byte was imported: %v", res)
		}
	} else {
		expectReplicadRefusal(t, []string{"container", "replicate"}, res, "checksum|corrupt|malformed|unavailable|refused|reset|closed")
	}
	if c, ok := b.find(t, id); ok && c.State != "UNHEALTHY" {
		t.Errorf("the target holds %+v, want nothing or UNHEALTHY", c)
	}
	if _, ok := b.find(t, id); !ok {
		checkClean(t, b.Volume())
	}
}

// TestContainerTargetTooSmall replicates into a node whose only volume is
// an 8 MiB tmpfs: refused for want of room before a byte is written.
func TestContainerTargetTooSmall(t *testing.T) {
	mnt := smallTmpfs(t, "8m")
	a := startNode(t, "a")
	vol := filepath.Join(mnt, "vol")
	b := startNode(t, "b", "--volume", vol)
	id := a.fill(t, randomFile(t, t.TempDir(), "data", 5<<20))
	before := usedBytes(t, mnt)
	for _, mode := range []string{"push", "pull"} {
		res := a.run(t, "replicate", id, "--to", b.Addr, "--mode", mode)
		expectReplicadRefusal(t, []string{"container", "replicate", "--mode", mode}, res, "no volume has room")
		if after := usedBytes(t, mnt); after != before {
			t.Errorf("%s: the tmpfs went from %d to %d bytes used", mode, before, after)
		}
		checkClean(t, vol)
	}
	b.stop(t) // before the cleanup unmounts its volume
}

// smallTmpfs mounts a tmpfs of size ("8m") for a node's volume, unmounted
// when the test ends (stop the node before). It needs root.
func smallTmpfs(t testing.TB, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skipf("not root: the test mounts a tmpfs of %s as a node's volume", size)
	}
	mnt := filepath.Join(t.TempDir(), "small")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Fatalf("mount -t tmpfs -o size=%s: %v: %s", size, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", mnt, err, out)
		}
	})
	return mnt
}

// usedBytes is what a filesystem has in use.
func usedBytes(t testing.TB, dir string) int64 {
	t.Helper()
	capacity, free, err := container.Statfs(dir)
	if err != nil {
		t.Fatal(err)
	}
	return capacity - free
}

// TestContainerPushResetRetried cuts the push's connection 3 MiB in
// (toxiproxy in-process, between the nodes); the source starts the
// transfer again, and the target ends up with identical bytes.
func TestContainerPushResetRetried(t *testing.T) {
	a := startNode(t, "a")
	b := startNode(t, "b")
	files := []string{randomFile(t, t.TempDir(), "data", 8<<20), randomFile(t, t.TempDir(), "more", 100_000)}
	id := a.fill(t, files...)
	proxy := newProxy(t, b.Addr)
	w, err := proxy.Toxics.AddToxicJson(strings.NewReader(`{"name": "cut", "type": "cut_once", "stream": "upstream", "attributes": {"bytes": 3145728}}`))
	if err != nil {
		t.Fatal(err)
	}
	res := a.must(t, "replicate", id, "--to", proxy.Listen, "--wait-scan")
	if !w.Toxic.(*cutOnceToxic).done.Load() {
		t.Fatalf("the proxy cut nothing: %v", res)
	}
	n := regexpInt(t, res.Stdout, `(\d+) attempts`)
	if n < 2 || !strings.Contains(res.Stdout, "CLOSED; push") {
		t.Errorf("replicate printed %q, want CLOSED after 2 or more attempts", res.Stdout)
	}
	b.checkBlocks(t, files...)
	checkClean(t, b.Volume(), id)
}

// regexpInt returns the number the first group of re matches in s, 0 if
// none.
func regexpInt(t testing.TB, s, re string) int {
	t.Helper()
	m := regexp.MustCompile(re).FindStringSubmatch(s)
	if m == nil {
		return 0
	}
	n, err := strconv.Atoi(m[1])
	if err != nil {
		t.Fatal(err)
	}
	return n
}
