package protect

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/cmfs-project/cmfs/internal/at"
	"github.com/cmfs-project/cmfs/internal/checksum"
	"github.com/cmfs-project/cmfs/internal/pagecache"
	"github.com/cmfs-project/cmfs/internal/statedir"
	"github.com/cmfs-project/cmfs/journal"
	"golang.org/x/sys/unix"
)

// abs is the backing path of rel, for tests that look at the tree beside
// the core.
func (c *Core) abs(rel string) string { return filepath.Join(c.backing, rel) }

// openTree opens dir as a backing tree, closed when tb ends.
func openTree(tb testing.TB, dir string) *at.Tree {
	t, err := at.Open(dir)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { t.Close() })
	return t
}

func TestExcluded(t *testing.T) {
	c := &Core{exclude: statedir.DefaultExcludes}
	for _, tc := range []struct {
		rel  string
		want bool
	}{
		{"sales.db/orders/p=1/part-0", false},
		{"sales.db/orders/_temporary/0/part-0", true},
		{"sales.db/orders/.hive-staging_hive_2024/-ext-10000/000000_0", true},
		{"sales.db/orders/.spark-staging-1234/part-0", true},
		{"sales.db/orders/p=1/_SUCCESS", true},
		{"sales.db/orders/_temporaryX/f", false},
		{"", false},
	} {
		if got := c.excluded(tc.rel); got != tc.want {
			t.Errorf("excluded(%q) = %v, want %v", tc.rel, got, tc.want)
		}
	}
}

func TestEventTypes(t *testing.T) {
	for _, tc := range []struct {
		ev   *journal.Event
		want journal.Type
		part string
	}{
		{dirEvent(true, "sales.db"), journal.CreateDatabase, ""},
		{dirEvent(false, "sales.db"), journal.DropDatabase, ""},
		{dirEvent(true, "sales.db/orders"), journal.CreateTable, ""},
		{dirEvent(false, "sales.db/orders"), journal.DropTable, ""},
		{dirEvent(true, "sales.db/orders/dt=1/hr=2"), journal.AddPartition, "dt=1/hr=2"},
		{dirEvent(false, "sales.db/orders/dt=1"), journal.DropPartition, "dt=1"},
		{dirEvent(true, "scratch/x"), journal.Mkdir, ""},
		{dirEvent(false, "sales.db/orders/dt=1/sub"), journal.Rmdir, "dt=1"},
		{fileEvent(journal.Write, "sales.db/orders/dt=1/part-0"), journal.Insert, "dt=1"},
		{fileEvent(journal.Write, "sales.db/orders/part-0"), journal.Insert, ""},
		{fileEvent(journal.Write, "sales.db/loose-file"), journal.Write, ""},
		{fileEvent(journal.Write, "notes.txt"), journal.Write, ""},
		{fileEvent(journal.Delete, "sales.db/orders/k=v"), journal.Delete, ""},
	} {
		if tc.ev.Type != tc.want || tc.ev.Partition != tc.part {
			t.Errorf("%s: got %s partition %q, want %s partition %q", tc.ev.Path, tc.ev.Type, tc.ev.Partition, tc.want, tc.part)
		}
	}
}

func TestRenameEventTypes(t *testing.T) {
	dir := &syscall.Stat_t{Mode: syscall.S_IFDIR}
	reg := &syscall.Stat_t{Mode: syscall.S_IFREG}
	for _, tc := range []struct {
		from, to string
		st       *syscall.Stat_t
		want     journal.Type
	}{
		{"a.db", "b.db", dir, journal.RenameDatabase},
		{"a.db/t", "a.db/u", dir, journal.RenameTable},
		{"a.db/t/p=1", "a.db/t/p=2", dir, journal.RenamePartition},
		{"a.db/t/p=1", "a.db/t/x/p=2", dir, journal.Rename},
		{"a.db/t/p=1/f", "a.db/t/p=1/g", reg, journal.Rename},
		{"a.db/t", "a.db/u", reg, journal.Rename},
	} {
		if got := renameEvent(tc.from, tc.to, tc.st).Type; got != tc.want {
			t.Errorf("rename %s -> %s: got %s, want %s", tc.from, tc.to, got, tc.want)
		}
	}
}

func TestSumCache(t *testing.T) {
	dir := t.TempDir()
	c := &Core{fs: openTree(t, dir)}
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, []byte("hello"), 0644); err != nil {
		t.Fatal(err)
	}
	sum, st, err := c.sumPath("f")
	if err != nil {
		t.Fatal(err)
	}
	if want := "26c7827d889f6da3"; sum != want || st.Size != 5 { // printf hello | xxhsum -H64
		t.Fatalf("sumPath = %s %d, want %s 5", sum, st.Size, want)
	}
	if got, ok := c.sums.get(statState(st)); !ok || got != sum {
		t.Fatalf("cache after sumPath: %q %v", got, ok)
	}
	if err := os.WriteFile(p, []byte("hello, world"), 0644); err != nil {
		t.Fatal(err)
	}
	sum2, st2, err := c.sumPath("f")
	if err != nil {
		t.Fatal(err)
	}
	if sum2 == sum || st2.Size != 12 {
		t.Fatalf("changed content hashed as %s size %d: stale cache", sum2, st2.Size)
	}
	if got := journal.Sum([]byte("hello, world")); sum2 != got {
		t.Fatalf("sumPath = %s, want %s", sum2, got)
	}
}

func TestHashLargeAndTruncated(t *testing.T) {
	p := filepath.Join(t.TempDir(), "big")
	data := make([]byte, mmapMin+12345)
	for i := range data {
		data[i] = byte(i * 7)
	}
	if err := os.WriteFile(p, data, 0644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, blocks, _, err := hashReaderAt(f, int64(len(data)), nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := journal.Sum(data); got != want {
		t.Fatalf("mapped hash = %s, want %s", got, want)
	}
	if len(blocks) != checksum.BlockCount(int64(len(data))) || checksum.Format(checksum.Combine(blocks)) != got {
		t.Fatalf("mapped hash kept %d block sums combining to %016x, want %d combining to %s",
			len(blocks), checksum.Combine(blocks), checksum.BlockCount(int64(len(data))), got)
	}
	for i, b := range blocks {
		if want := checksum.Block(data[i*checksum.BlockSize : min((i+1)*checksum.BlockSize, len(data))]); b != want {
			t.Fatalf("block %d: sum %016x, want %016x", i, b, want)
		}
	}
	// Shrink the file behind the hash's back: the mapped pages past the
	// end fault, and the hash falls back to reading what is left.
	if err := os.Truncate(p, 100); err != nil {
		t.Fatal(err)
	}
	got, _, _, err = hashReaderAt(f, int64(len(data)), nil)
	if err == nil && got == journal.Sum(data) {
		t.Fatalf("hash of a truncated file equals the old content's")
	}
}

// TestChecksumLeavesCacheAsFound: checksumming a file no one had cached
// (a close after random writes, recovery) leaves it uncached.
func TestChecksumLeavesCacheAsFound(t *testing.T) {
	const size = 8 << 20
	dir := t.TempDir()
	p := filepath.Join(dir, "cold")
	if err := os.WriteFile(p, bytes.Repeat([]byte("checksummed once\n"), size/17+1)[:size], 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.Sync()
	unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
	if n, err := pagecache.Resident(f, size); err != nil || n > size/16 {
		t.Skipf("the filesystem keeps %d bytes cached after FADV_DONTNEED (%v)", n, err)
	}
	c := &Core{fs: openTree(t, dir)}
	if _, _, err := c.sumPath("cold"); err != nil {
		t.Fatal(err)
	}
	if n, err := pagecache.Resident(f, size); err != nil || n > size/16 {
		t.Errorf("after the checksum %d bytes of the file are cached (%v), none before", n, err)
	}
}
