package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"github.com/cmfs-project/cmfs/internal/wait"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/journal"
)

// TestIngest runs `replicad serve --state --volume --ingest` next to a
// real cmfs mount. Files written, overwritten, renamed and deleted
// through the mount — before serve starts, and while it runs — end up as
// blocks: both the new contents and the originals cmfs preserved, read
// back byte for byte with `container get`. An idle container closes; a
// restart, clean or kill -9, resumes without storing anything twice.
func TestIngest(t *testing.T) {
	replicadPath(t)
	m := mount(t)
	for _, d := range []string{"s.db", "s.db/t", "s.db/t/p=1", "s.db/u"} {
		if err := os.Mkdir(m.path(d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	content := func(name string, n int) []byte {
		var b bytes.Buffer
		for b.Len() < n {
			fmt.Fprintf(&b, "%s line %d\n", name, b.Len())
		}
		return b.Bytes()
	}
	// want holds every content that must become a block.
	var want [][]byte
	write := func(rel string, data []byte) {
		t.Helper()
		writeFile(t, m.path(rel), data) // O_TRUNC: an overwrite preserves the original
		want = append(want, data)
	}

	// Before serve starts.
	v1 := content("v1", 300_000)
	write("s.db/t/p=1/part-0", v1)
	write("s.db/t/p=1/part-0", content("v2", 200_000)) // v1 preserved in cmroot
	write("s.db/u/part-0", content("u", 50_000))
	if err := os.Remove(m.path("s.db/u/part-0")); err != nil { // preserved; its WRITE event reads cmroot
		t.Fatal(err)
	}
	write("s.db/t/p=1/staged", content("renamed", 10_000))
	if err := os.Rename(m.path("s.db/t/p=1/staged"), m.path("s.db/t/p=1/part-1")); err != nil {
		t.Fatal(err)
	}

	// The idle close must not come between the files written before serve
	// and those written while it runs (one container for both): 3s leaves
	// room for the block checks in between on a loaded machine.
	n := startNode(t, "ingest", "--state", m.State, "--ingest", "--ingest-idle", "3s", "--container-size", "64MiB")
	waitBlocks := func(what string) {
		t.Helper()
		for _, data := range want {
			sum := journal.Sum(data)
			out := filepath.Join(t.TempDir(), "block")
			ok := wait.Until(30*time.Second, func() bool { return n.run(t, "get", sum, "-o", out).Code == 0 })
			if !ok {
				t.Fatalf("%s: block %s (%d bytes) not ingested within 30s; serve stderr: %s", what, sum, len(data), n.p.stderrNow())
			}
			if got := readFile(t, out); !bytes.Equal(got, data) {
				t.Fatalf("%s: block %s holds %d bytes, not the %d written", what, sum, len(got), len(data))
			}
		}
	}
	waitBlocks("written before serve")

	// While it runs.
	write("s.db/t/p=1/part-0", content("v3", 120_000)) // v2 preserved
	write("s.db/t/p=1/part-2", content("new", 70_000))
	if err := os.Remove(m.path("s.db/t/p=1/part-1")); err != nil {
		t.Fatal(err)
	}
	waitBlocks("written while serving")

	cs := n.list(t)
	if len(cs) != 1 {
		t.Fatalf("containers %+v, want one", cs)
	}
	total := int64(0)
	for _, d := range want {
		total += int64(len(d))
	}
	// An overwrite (O_TRUNC, then the write) can journal the empty file
	// it passes through before the new content (issue: one event per
	// close): if the feed reads it while the file is empty, the empty
	// content is a block too, a true state of the file. So one block
	// more is right when the bytes are exactly the contents'.
	blocksOK := func(blocks int64) bool { return blocks == int64(len(want)) || blocks == int64(len(want))+1 }
	if c := n.waitState(t, cs[0].ID, "CLOSED"); !blocksOK(c.Blocks) || c.Bytes != total {
		t.Errorf("the idle container closed with %d blocks, %d bytes; want %d, %d (each content once)", c.Blocks, c.Bytes, len(want), total)
	}
	cursor := func() (c struct{ Last, Durable uint64 }) {
		t.Helper()
		if err := json.Unmarshal(readFile(t, filepath.Join(m.State, "replicad-ingest.json")), &c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	last := lastEventID(t, m.State)
	wait.For(t, 10*time.Second, "the cursor to reach the last event, durably", func() bool {
		c := cursor()
		return c.Last == last && c.Durable == last
	})

	// A clean restart resumes after the last event: nothing is stored again.
	n.stop(t)
	n.restart(t)
	if !strings.Contains(readFile2(n.p.stdout), fmt.Sprintf("ingesting after event %d", last)) {
		t.Errorf("the restarted node says %q, want it to resume after event %d", readFile2(n.p.stdout), last)
	}
	write("s.db/t/p=1/part-3", content("after restart", 30_000))
	waitBlocks("after a restart")
	if cs := n.list(t); len(cs) != 2 {
		t.Errorf("containers after the restart: %+v, want the closed one and a new one", cs)
	}

	// kill -9 with the container open: it is recovered, the events that
	// fed it are read again, found held, and not stored twice.
	n.kill9(t)
	n.restart(t)
	write("s.db/t/p=1/part-4", content("after kill", 20_000))
	waitBlocks("after a kill -9")
	cs = n.list(t)
	var blocks, size int64
	for _, c := range cs {
		blocks, size = blocks+c.Blocks, size+c.Bytes
	}
	total = 0
	for _, d := range want {
		total += int64(len(d))
	}
	if !blocksOK(blocks) || size != total {
		t.Errorf("containers after the kill: %+v, %d blocks, %d bytes in all, want %d (or one empty more), %d (each content once)", cs, blocks, size, len(want), total)
	}
	if s := n.p.stderrNow(); strings.Contains(s, "skipped") {
		t.Errorf("serve skipped content: %s", s)
	}

	// The same listener serves the warehouse's files and journal.
	d := replDump(t, m.State, t.TempDir())
	target := filepath.Join(t.TempDir(), "target")
	replLoad(t, d.Dump, target, fetchFrom{Addr: n.Addr})
	checkTarget(t, "a load through the node's listener", target, sourceTree(t, m))
	n.stop(t)
}

func readFile2(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}
