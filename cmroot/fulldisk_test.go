package cmroot

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// fill writes to path until the file system it is on has no room left,
// and returns a func that removes it.
func fill(t *testing.T, path string) (free func()) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, n := range []int{1 << 20, 4 << 10, 512} {
		buf := make([]byte, n)
		for {
			if _, err := f.Write(buf); err != nil {
				if !errors.Is(err, syscall.ENOSPC) {
					t.Fatal(err)
				}
				break
			}
		}
	}
	return func() {
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
	}
}

// preserveMany preserves n small files of distinct content, tagged tag,
// by rename from src, and returns their names.
func preserveMany(t *testing.T, s *Store, src, tag string, n int) []string {
	t.Helper()
	paths := make([]string, n)
	sums := make([]string, n)
	for i := range n {
		paths[i], sums[i] = writeFile(t, src, fmt.Sprintf("%s-%d", tag, i), []byte(fmt.Sprintf("%s %d", tag, i)))
	}
	return preserveFiles(t, s, paths, sums)
}

func preserveFiles(t *testing.T, s *Store, paths, sums []string) []string {
	t.Helper()
	names := make([]string, len(paths))
	for i, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if names[i], _, err = s.Preserve(p, sums[i], fi.Size(), true); err != nil {
			t.Fatalf("preserve %d of %d: %v", i+1, len(paths), err)
		}
	}
	return names
}

// TestIndexOnFullDisk: the index is a cache of the directory, and a full
// file system must stop neither Open nor the index. The store keeps it in
// memory until Close finds room to write it back.
func TestIndexOnFullDisk(t *testing.T) {
	mnt := mountTmpfs(t, "128m")
	dir, src := filepath.Join(mnt, "cmroot"), filepath.Join(mnt, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	clk := &clock{now: time.Unix(3_000_000, 0)}
	at := func(o *sysOps) { o.now = clk.Now }
	lookAll := func(s *Store, names []string, want time.Time) {
		t.Helper()
		for _, name := range names {
			e, err := s.Lookup(name)
			if err != nil {
				t.Fatalf("lookup %s: %v", name, err)
			}
			if !want.IsZero() && !e.Preserved.Equal(want) {
				t.Fatalf("%s preserved %v, want %v: the record's time was lost", name, e.Preserved, want)
			}
		}
	}

	// An unclean stop, then the disk fills: Open cannot write a rebuilt
	// index, and must still open, with the old records' times.
	s := openTestStore(t, dir, at)
	before := preserveMany(t, s, src, "before", 3000)
	if err := s.flush(); err != nil {
		t.Fatal(err)
	}
	s.crash()
	later := make([]string, 1000)
	laterSums := make([]string, 1000)
	for i := range later {
		later[i], laterSums[i] = writeFile(t, src, fmt.Sprintf("later-%d", i), []byte(fmt.Sprintf("later %d", i)))
	}
	free := fill(t, filepath.Join(mnt, "filler"))

	clk.set(time.Unix(4_000_000, 0))
	s = openTestStore(t, dir, at)
	if !s.IndexInMemory() {
		t.Fatal("Open on a full file system rebuilt the index on disk")
	}
	lookAll(s, before, time.Unix(3_000_000, 0))
	// Deletes go on: a rename needs no room, and neither does the index.
	added := preserveFiles(t, s, later, laterSums)
	if err := s.flush(); err != nil {
		t.Fatalf("flush of an index in memory: %v", err)
	}
	lookAll(s, added, time.Unix(4_000_000, 0))
	checkStore(t, s)
	if n, _ := s.Stats(); n != 4000 {
		t.Errorf("%d entries, want 4000", n)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close with no room to write the index back: %v", err)
	}

	// Room again: Open rebuilds on disk (Close could not write it back).
	free()
	s = openTestStore(t, dir, at)
	if s.IndexInMemory() {
		t.Fatal("index still in memory with room on disk")
	}
	lookAll(s, before, time.Unix(3_000_000, 0))
	lookAll(s, added, time.Time{}) // from the files' ctimes now

	// The disk fills while the store is open: the commit that cannot grow
	// the file moves the index to memory, and deletes go on.
	full := make([]string, 4000)
	fullSums := make([]string, len(full))
	for i := range full {
		full[i], fullSums[i] = writeFile(t, src, fmt.Sprintf("full-%d", i), []byte(fmt.Sprintf("full %d", i)))
	}
	free = fill(t, filepath.Join(mnt, "filler"))
	clk.set(time.Unix(5_000_000, 0))
	more := preserveFiles(t, s, full, fullSums)
	if err := s.flush(); err != nil {
		t.Fatalf("flush on a full file system: %v", err)
	}
	if !s.IndexInMemory() {
		t.Fatal("4000 records committed on a full file system without moving the index to memory: the test did not fill it")
	}
	lookAll(s, more, time.Unix(5_000_000, 0))
	checkStore(t, s)

	// Room again before Close: it writes the index back, clean, so the
	// next Open trusts it instead of rebuilding (the times say which).
	free()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTestStore(t, dir, at)
	if s.IndexInMemory() {
		t.Fatal("index in memory after a clean Close with room")
	}
	lookAll(s, more, time.Unix(5_000_000, 0))
	lookAll(s, before, time.Unix(3_000_000, 0))
	if n, _ := s.Stats(); n != 8000 {
		t.Errorf("%d entries, want 8000", n)
	}
}

// TestCloseOnFullDisk: a store whose index is on disk is closed after the
// file system filled, with nothing pending. Close must succeed and lose
// nothing. (Its marker's commit usually finds room in the pages the last
// commit freed; when it does not, Close leaves the index unclean for the
// next Open to rebuild. This test cannot force that case.)
func TestCloseOnFullDisk(t *testing.T) {
	mnt := mountTmpfs(t, "64m")
	dir, src := filepath.Join(mnt, "cmroot"), filepath.Join(mnt, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	s := openTestStore(t, dir)
	names := preserveMany(t, s, src, "closed", 2000)
	if err := s.flush(); err != nil {
		t.Fatal(err)
	}
	if s.IndexInMemory() {
		t.Fatal("index in memory with room on disk")
	}
	free := fill(t, filepath.Join(mnt, "filler"))
	if err := s.Close(); err != nil {
		t.Fatalf("Close on a full file system: %v", err)
	}
	free()
	s = openTestStore(t, dir)
	for _, name := range names {
		if _, err := s.Lookup(name); err != nil {
			t.Fatalf("lookup %s after a Close on a full disk: %v", name, err)
		}
	}
	checkStore(t, s)
}
