package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestContainerCloseFullVolume fills a node's only volume (a small tmpfs)
// with its container still OPEN: a put fails with one plain line, the
// close fails with one line and leaves the container CLOSING with its
// blocks served, a verify meanwhile fails without condemning it, and once
// space is freed a second close makes it CLOSED, without a restart.
func TestContainerCloseFullVolume(t *testing.T) {
	requireFUSE(t) // root, for the tmpfs
	vol := filepath.Join(mountTmpfs(t, "4m"), "vol")
	n := startNode(t, "a", "--volume", vol)

	src := t.TempDir()
	files := []string{randomFile(t, src, "t1", 300<<10), randomFile(t, src, "t2", 200<<10)}
	res := n.must(t, "put", files...)
	var id string
	if _, err := fmt.Sscan(res.Stdout, &id); err != nil {
		t.Fatalf("put: %v\n%v", err, res)
	}

	filler := fillUp(t, vol)
	more := randomFile(t, src, "t6", 100<<10)
	res = n.run(t, "put", more)
	want := fmt.Sprintf("replicad: put %s: put into container %s: write %s: no space left on device\n",
		more, id, filepath.Join(vol, id, "chunks", "0.data"))
	if res.Code == 0 || res.Stderr != want {
		t.Errorf("put on a full volume: exit %d, stderr %q; want a failure with %q", res.Code, res.Stderr, want)
	}

	res = n.run(t, "close", id)
	expectReplicadRefusal(t, []string{"container", "close", id}, res, "close container "+id, "no space left on device")
	if c, _ := n.find(t, id); c.State != "CLOSING" {
		t.Fatalf("after the failed close: %s (%s), want CLOSING", c.State, c.Reason)
	}
	n.checkBlocks(t, files...)

	res = n.run(t, "verify", id)
	expectReplicadRefusal(t, []string{"container", "verify", id}, res, "no space left on device")
	if c, _ := n.find(t, id); c.State != "CLOSING" {
		t.Fatalf("after verify on the full volume: %s (%s), want CLOSING", c.State, c.Reason)
	}
	n.checkBlocks(t, files...)

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	res = n.run(t, "close", id)
	if res.Code != 0 || !strings.Contains(res.Stdout, "container "+id+": CLOSED, 2 blocks") {
		t.Fatalf("close once space is back: %v", res)
	}
	n.checkBlocks(t, files...)
	if res := n.must(t, "verify", id); !strings.Contains(res.Stdout, "container "+id+": CLOSED") {
		t.Errorf("verify once CLOSED: %v", res)
	}

	// The CLOSED state is the durable one: a restart keeps it.
	n.stop(t)
	n.restart(t)
	if c := n.waitState(t, id, "CLOSED"); c.Blocks != 2 {
		t.Errorf("after a restart: %+v, want CLOSED with 2 blocks", c)
	}
	n.checkBlocks(t, files...)
	n.stop(t)              // its process is killed in cleanup anyway, before the unmount
	checkClean(t, vol, id) // the failed writes left no temporary file
}
