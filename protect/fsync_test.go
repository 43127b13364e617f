package protect

import (
	"bytes"
	"math/rand/v2"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/journal"
)

// fsyncFile is the size of the file the fsync tests write: above mmapMin,
// so that it is checksummed as the mount checksums large files.
const fsyncFile = 8 << 20

// openInPlace opens rel for writing without O_TRUNC through the core, as
// an open(O_RDWR) through the mount does.
func openInPlace(t *testing.T, h *harness, rel string) *Handle {
	t.Helper()
	p := h.core.Prepare(rel, false)
	hd, err := h.core.Open(ctx, rel, uint32(os.O_RDWR), Use{}, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	return hd
}

// TestFsyncRandomWrites: random writes into an existing file with an fsync
// after each, as a database does, checksum the file at most once across
// all the fsyncs, not once per fsync; the first fsync makes the handle's
// intent durable, and no later one flushes the in-flight table again; the
// close journals the content as it is.
func TestFsyncRandomWrites(t *testing.T) {
	h := openHarness(t, t.TempDir())
	defer h.close(t)
	const rel = "db.db/t/p=1/data"
	if err := os.MkdirAll(h.core.abs("db.db/t/p=1"), 0o755); err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("0123456789abcdef"), fsyncFile/16)
	if err := h.write(rel, os.O_CREATE|os.O_WRONLY, string(data)); err != nil {
		t.Fatal(err)
	}
	hd := openInPlace(t, h, rel)
	defer hd.File().Close()
	hashed, syncs := h.core.hashed.Load(), h.core.inflight.syncs.Load()
	const rounds = 16
	rng := rand.New(rand.NewPCG(1, 2))
	for range rounds {
		off := rng.Int64N(fsyncFile/4096) * 4096
		block := bytes.Repeat([]byte{byte(rng.Uint32())}, 4096)
		copy(data[off:], block)
		if _, err := hd.File().WriteAt(block, off); err != nil {
			t.Fatal(err)
		}
		if err := hd.Fsync(hd.File().Sync); err != nil {
			t.Fatal(err)
		}
	}
	if got := h.core.hashed.Load() - hashed; got > fsyncFile {
		t.Errorf("%d fsyncs after random writes checksummed %d bytes (%.1f× the file), want at most the file once", rounds, got, float64(got)/fsyncFile)
	}
	if got := h.core.inflight.syncs.Load() - syncs; got != 1 {
		t.Errorf("%d fsyncs flushed the in-flight table %d times, want once: the first makes the handle's intent durable", rounds, got)
	}
	if err := hd.Flush(ctx, rel, true); err != nil {
		t.Fatal(err)
	}
	hd.Release()
	evs := h.events(t)
	last := evs[len(evs)-1]
	if want := journal.Sum(data); last.Path != rel || len(last.Files) == 0 || last.Files[0].XXH64 != want || last.Files[0].Size != fsyncFile {
		t.Errorf("the close journaled %+v, want %s with %d bytes of xxh64 %s", last, rel, fsyncFile, want)
	}
}

// TestFsyncThenClose: a file written through, fsynced and closed is
// checksummed once, during the fsync, and the close finds the checksum
// made: the close adds no read of the file to the fsync's wait.
func TestFsyncThenClose(t *testing.T) {
	h := openHarness(t, t.TempDir())
	defer h.close(t)
	const rel = "new-file"
	hd, err := h.core.Create(ctx, rel, uint32(os.O_WRONLY), 0o644, Caller{})
	if err != nil {
		t.Fatal(err)
	}
	defer hd.File().Close()
	data := bytes.Repeat([]byte("written once, then fsynced\n"), fsyncFile/27)
	if _, err := hd.File().WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	hashed := h.core.hashed.Load()
	// An fsync that lasts until the checksum is made, as a long fsync of
	// freshly written data does (bounded: a checksum that never comes
	// fails below).
	slowSync := func() error {
		deadline := time.Now().Add(10 * time.Second)
		for h.core.hashed.Load()-hashed < int64(len(data)) && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		return hd.File().Sync()
	}
	if err := hd.Fsync(slowSync); err != nil {
		t.Fatal(err)
	}
	if err := hd.Flush(ctx, rel, true); err != nil {
		t.Fatal(err)
	}
	hd.Release()
	if got := h.core.hashed.Load() - hashed; got != int64(len(data)) {
		t.Errorf("write, fsync, close checksummed %d bytes, want the file once (%d): during the fsync, found cached by the close", got, len(data))
	}
	var st syscall.Stat_t
	if err := syscall.Stat(h.core.abs(rel), &st); err != nil || st.Size != int64(len(data)) {
		t.Fatalf("stat: %v, size %d", err, st.Size)
	}
	evs := h.events(t)
	if last := evs[len(evs)-1]; last.Path != rel || last.Files[0].XXH64 != journal.Sum(data) {
		t.Errorf("the close journaled %+v, want %s with xxh64 %s", last, rel, journal.Sum(data))
	}
}
