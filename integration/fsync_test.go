package integration

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fsyncWrites is how many random 4 KiB writes the fsync tests make, with
// an fsync after every fsyncEvery of them.
const (
	fsyncWrites = 256
	fsyncEvery  = 16
	fsyncSize   = 8 << 20
)

// layOut writes a file of fsyncSize bytes at path (open, write, close:
// journaled) and returns its content.
func layOut(t *testing.T, path string) []byte {
	t.Helper()
	data := bytes.Repeat([]byte("laid out before the random writes\n"), fsyncSize/34+1)[:fsyncSize]
	writeFile(t, path, data)
	return data
}

// randomWritesFsynced opens the file at path, laid out with data, in
// place and writes fsyncWrites random 4 KiB blocks into it, fsyncing
// after every fsyncEvery and after the last. It returns the descriptor,
// still open, and updates data to what the file must hold. No process
// may start while the descriptor is open: its copy's close at exec would
// journal the content (FUSE flushes at every close).
func randomWritesFsynced(t *testing.T, path string, data []byte) *os.File {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(12, 64))
	for i := range fsyncWrites {
		off := rng.Int64N(fsyncSize/4096) * 4096
		block := bytes.Repeat([]byte{byte('a' + i%26)}, 4096)
		copy(data[off:], block)
		if _, err := f.WriteAt(block, off); err != nil {
			t.Fatal(err)
		}
		if (i+1)%fsyncEvery == 0 {
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
		}
	}
	return f
}

// TestFsyncKill: random writes with fsyncs into a file open in place, the
// mount killed with SIGKILL while the descriptor is still open (its close
// never journals the content), then a remount: recovery journals the
// content the file holds (I3), with the original the open kept (I2).
func TestFsyncKill(t *testing.T) {
	requireFUSE(t)
	backing := filepath.Join(t.TempDir(), "backing")
	if err := os.MkdirAll(filepath.Join(backing, "db.db/t/p=1"), 0o755); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(backing, ".cmfs")
	mp := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(mp, 0o755); err != nil {
		t.Fatal(err)
	}
	mount := startForeground(t, backing, mp)
	path := filepath.Join(mp, "db.db/t/p=1/data")
	data := layOut(t, path)
	f := randomWritesFsynced(t, path, data)
	mount.kill()
	mount.wait(t)
	f.Close() // the mount is gone: nothing journals this close

	m := mountAt(t, backing)
	m.unmount(t)
	if got := readFile(t, filepath.Join(backing, "db.db/t/p=1/data")); !bytes.Equal(got, data) {
		t.Fatalf("after kill -9 the file does not hold what was written")
	}
	bad := journalTreeViolations(t, backing, state)
	bad = append(bad, lostOriginals(t, filepath.Join(state, "cmroot"), events(t, state))...)
	if len(bad) > 0 {
		t.Errorf("after fsyncs, kill -9 and a remount:\n  %s", strings.Join(bad, "\n  "))
	}
}

// TestFsyncPowerLoss: the same random writes with fsyncs over a backing
// directory on lazyfs, then kill -9 and a power loss. What the fsyncs made
// durable is in the file, and the remount's recovery journals it: the
// journal describes the tree (I3) although no close journaled the
// content, because the first fsync made the handle's intent durable.
func TestFsyncPowerLoss(t *testing.T) {
	l := mountLazy(t)
	backing := filepath.Join(l.Mountpoint(), "backing")
	if err := os.MkdirAll(filepath.Join(backing, "db.db/t/p=1"), 0o755); err != nil {
		t.Fatal(err)
	}
	m := mountAt(t, backing)
	data := layOut(t, m.path("db.db/t/p=1/data"))
	acked := events(t, m.State) // before the descriptor opens (randomWritesFsynced)
	f := randomWritesFsynced(t, m.path("db.db/t/p=1/data"), data)

	m.kill(t)
	f.Close()
	m.detach(t)
	crashLazy(t, l)

	m2 := mountAt(t, backing)
	if got := readFile(t, filepath.Join(backing, "db.db/t/p=1/data")); !bytes.Equal(got, data) {
		t.Fatalf("after the power loss the file does not hold what the fsyncs made durable")
	}
	after := events(t, m2.State)
	var broken []string
	broken = append(broken, lostEvents(acked, after)...)
	broken = append(broken, lostOriginals(t, m2.CMRoot, after)...)
	for _, v := range journalTreeViolations(t, backing, m2.State) {
		broken = append(broken, "I3 "+v)
	}
	if len(broken) > 0 {
		t.Errorf("after fsyncs, kill -9 and a power loss, %d invariant violations:\n  %s", len(broken), strings.Join(broken, "\n  "))
	}
}
