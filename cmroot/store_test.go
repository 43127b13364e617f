package cmroot

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/internal/checksum"
)

// newTestStore opens a store in a fresh temp directory. Its cleanup checks
// the store's invariants (Fsck finds nothing corrupt and an index that
// agrees with the directory; the in-memory mirror agrees with the index)
// and closes it, so every test also checks them.
func newTestStore(t *testing.T, tweak ...func(*sysOps)) *Store {
	t.Helper()
	return openTestStore(t, filepath.Join(t.TempDir(), "cmroot"), tweak...)
}

func openTestStore(t *testing.T, dir string, tweak ...func(*sysOps)) *Store {
	t.Helper()
	sys := defaultSys()
	for _, f := range tweak {
		f(&sys)
	}
	s, err := open(dir, Options{NoSync: true}, sys)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if s.isClosed() {
			return
		}
		checkStore(t, s)
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

// crash closes the store the way kill -9 would leave it: no clean marker,
// index changes not yet flushed lost.
func (s *Store) crash() {
	s.pmu.Lock()
	if s.timer != nil {
		s.timer.Stop()
	}
	s.pmu.Unlock()
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	s.dbMu.Lock()
	defer s.dbMu.Unlock()
	s.closed = true
	s.db.Close()
	s.lock.Close()
}

func checkStore(t *testing.T, s *Store) {
	t.Helper()
	rep, err := s.Fsck(nil, false)
	if err != nil {
		t.Errorf("fsck: %v", err)
		return
	}
	if len(rep.Corrupt) != 0 || rep.IndexFixed != 0 {
		t.Errorf("fsck: corrupt %v, index fixed %d", rep.Corrupt, rep.IndexFixed)
	}
	n, size := 0, int64(0)
	links := make(map[uint64]uint32)
	err = s.List(func(e Entry) error {
		n++
		size += e.Size
		r, err := s.get(e.Name)
		if err != nil || r == nil {
			t.Errorf("entry %s listed but not found: %v", e.Name, err)
			return nil
		}
		if r.shared {
			links[r.ino]++
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
	gotN, gotSize := s.Stats()
	if gotN != n || gotSize != size {
		t.Errorf("Stats() = %d, %d; index has %d, %d", gotN, gotSize, n, size)
	}
	s.mem.RLock()
	defer s.mem.RUnlock()
	if len(links) != len(s.links) {
		t.Errorf("links = %v, index says %v", s.links, links)
	}
	for ino, c := range links {
		if s.links[ino] != c {
			t.Errorf("Links(%d) = %d, index says %d", ino, s.links[ino], c)
		}
	}
}

// writeFile creates dir/name with content and returns its path and checksum.
func writeFile(t *testing.T, dir, name string, content []byte) (string, string) {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, content, 0o644); err != nil {
		t.Fatal(err)
	}
	return p, checksum.Bytes(content)
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

func readEntry(t *testing.T, s *Store, name string) []byte {
	t.Helper()
	f, err := s.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(f); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func tmpFiles(t *testing.T, s *Store) []string {
	t.Helper()
	des, err := os.ReadDir(filepath.Join(s.Dir(), tmpDir))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, de := range des {
		names = append(names, de.Name())
	}
	return names
}

// crossFS makes every rename or link from outside the store fail with
// EXDEV, as if the store were on another filesystem.
func crossFS(dir *string) func(*sysOps) {
	return func(o *sysOps) {
		outside := func(p string) bool { return !strings.HasPrefix(p, *dir+"/") }
		rename, link := o.rename, o.link
		o.rename = func(a, b string) error {
			if outside(a) {
				return &os.LinkError{Op: "rename", Old: a, New: b, Err: syscall.EXDEV}
			}
			return rename(a, b)
		}
		o.link = func(a, b string) error {
			if outside(a) {
				return &os.LinkError{Op: "link", Old: a, New: b, Err: syscall.EXDEV}
			}
			return link(a, b)
		}
	}
}

// clock is a settable time source.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

func TestParseName(t *testing.T) {
	tests := []struct {
		name string
		sum  string
		size int64
		ok   bool
	}{
		{"26c7827d889f6da3-5", "26c7827d889f6da3", 5, true},
		{"ef46db3751d8e999-0", "ef46db3751d8e999", 0, true},
		{"26c7827d889f6da3-05", "", 0, false},
		{"26C7827D889F6DA3-5", "", 0, false},
		{"26c7827d889f6da3-", "", 0, false},
		{"26c7827d889f6da3-x", "", 0, false},
		{"26c7827d889f6da-5", "", 0, false},
		{"26c7827d889f6da3-99999999999999999999", "", 0, false},
		{".index.db", "", 0, false},
		{"", "", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sum, size, ok := ParseName(tt.name)
			if sum != tt.sum || size != tt.size || ok != tt.ok {
				t.Errorf("ParseName(%q) = %q, %d, %v; want %q, %d, %v", tt.name, sum, size, ok, tt.sum, tt.size, tt.ok)
			}
			if ok && Name(sum, size) != tt.name {
				t.Errorf("Name(%q, %d) = %q", sum, size, Name(sum, size))
			}
		})
	}
}

func TestPreserveMove(t *testing.T) {
	s := newTestStore(t)
	content := []byte("part-00000 of a table")
	p, sum := writeFile(t, t.TempDir(), "part-0", content)
	ino := inode(t, p)
	fi0, _ := os.Lstat(p)

	name, created, err := s.Preserve(p, sum, int64(len(content)), true)
	if err != nil {
		t.Fatal(err)
	}
	if !created || name != Name(sum, int64(len(content))) {
		t.Errorf("Preserve = %q, %v; want %q, true", name, created, Name(sum, int64(len(content))))
	}
	if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("path still there after move: %v", err)
	}
	if got := readEntry(t, s, name); !bytes.Equal(got, content) {
		t.Errorf("entry has %q, want %q", got, content)
	}
	if got := inode(t, s.Path(name)); got != ino {
		t.Errorf("entry inode %d, original was %d", got, ino)
	}
	if got := s.Links(ino); got != 1 {
		t.Errorf("Links = %d, want 1", got)
	}
	fi1, _ := os.Lstat(s.Path(name))
	if !fi1.ModTime().Equal(fi0.ModTime()) || fi1.Mode() != fi0.Mode() {
		t.Errorf("entry mtime/mode %v %v, original %v %v", fi1.ModTime(), fi1.Mode(), fi0.ModTime(), fi0.Mode())
	}
	e, err := s.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	if e.XXH64 != sum || e.Size != int64(len(content)) || e.Ino != ino || !e.Preserved.Equal(e.Refreshed) {
		t.Errorf("Lookup = %+v", e)
	}
	if n, b := s.Stats(); n != 1 || b != int64(len(content)) {
		t.Errorf("Stats = %d, %d", n, b)
	}
}

func TestPreserveLink(t *testing.T) {
	s := newTestStore(t)
	content := []byte("kept in place")
	p, sum := writeFile(t, t.TempDir(), "f", content)
	ino := inode(t, p)

	name, created, err := s.Preserve(p, sum, int64(len(content)), false)
	if err != nil || !created {
		t.Fatalf("Preserve = %q, %v, %v", name, created, err)
	}
	if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, content) {
		t.Errorf("path after link preserve: %q, %v", got, err)
	}
	if got := inode(t, s.Path(name)); got != ino {
		t.Errorf("entry inode %d, want %d", got, ino)
	}
	if got := s.Links(ino); got != 1 {
		t.Errorf("Links = %d, want 1", got)
	}
	if err := s.Drop(name); err != nil {
		t.Fatal(err)
	}
	if got := s.Links(ino); got != 0 {
		t.Errorf("Links after Drop = %d, want 0", got)
	}
	if _, err := os.Stat(p); err != nil {
		t.Errorf("Drop touched the original: %v", err)
	}
	if _, err := s.Lookup(name); !errors.Is(err, ErrNotFound) {
		t.Errorf("Lookup after Drop: %v", err)
	}
	if err := s.Drop(name); !errors.Is(err, ErrNotFound) {
		t.Errorf("second Drop: %v", err)
	}
}

func TestPreserveDedup(t *testing.T) {
	clk := &clock{now: time.Unix(1_000_000, 0)}
	s := newTestStore(t, func(o *sysOps) { o.now = clk.Now })
	dir := t.TempDir()
	content := []byte("same bytes")
	a, sum := writeFile(t, dir, "a", content)
	b, _ := writeFile(t, dir, "b", content)
	c, _ := writeFile(t, dir, "c", content)
	inoA := inode(t, a)

	name, created, err := s.Preserve(a, sum, int64(len(content)), true)
	if err != nil || !created {
		t.Fatalf("first Preserve = %v, %v", created, err)
	}
	t1 := clk.now.Add(time.Hour)
	clk.set(t1)
	name2, created, err := s.Preserve(b, sum, int64(len(content)), true)
	if err != nil || created || name2 != name {
		t.Fatalf("second Preserve = %q, %v, %v", name2, created, err)
	}
	if _, err := os.Lstat(b); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("second path still there: %v", err)
	}
	// Without move the path stays.
	if _, created, err := s.Preserve(c, sum, int64(len(content)), false); err != nil || created {
		t.Fatalf("link Preserve of existing content = %v, %v", created, err)
	}
	if _, err := os.Stat(c); err != nil {
		t.Error(err)
	}
	e, err := s.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	if !e.Refreshed.Equal(t1) || !e.Preserved.Equal(time.Unix(1_000_000, 0)) {
		t.Errorf("Preserved %v Refreshed %v; want %v, %v", e.Preserved, e.Refreshed, time.Unix(1_000_000, 0), t1)
	}
	if n, _ := s.Stats(); n != 1 {
		t.Errorf("%d entries, want 1", n)
	}
	if s.Links(inoA) != 1 || s.Links(inode(t, c)) != 0 {
		t.Errorf("Links(a) = %d, Links(c) = %d", s.Links(inoA), s.Links(inode(t, c)))
	}
}

func TestPreserveCopy(t *testing.T) {
	big := make([]byte, 3<<20+17)
	rnd := rand.New(rand.NewPCG(1, 2))
	for i := range big {
		big[i] = byte(rnd.Uint32())
	}
	tests := []struct {
		name    string
		content []byte
		want    string // "" = compute with the xxhash library
	}{
		{"hello", []byte("hello"), "26c7827d889f6da3"}, // printf hello | xxhsum -H64
		{"empty", nil, ""},
		{"big", big, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newTestStore(t)
			want := tt.want
			if want == "" {
				want = checksum.Bytes(tt.content)
			}
			p, _ := writeFile(t, t.TempDir(), "f", tt.content)
			f, err := os.OpenFile(p, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.Seek(2, 0); err != nil {
				t.Fatal(err)
			}
			k, err := s.PreserveCopy(f)
			if err != nil {
				t.Fatal(err)
			}
			name, sum, size, created := k.Name, k.XXH64, k.Size, k.Created
			if sum != want || size != int64(len(tt.content)) || name != Name(want, size) || !created {
				t.Errorf("PreserveCopy = %q, %q, %d, %v; want %q, %d", name, sum, size, created, want, len(tt.content))
			}
			if off, _ := f.Seek(0, 1); off != 2 {
				t.Errorf("file offset moved to %d", off)
			}
			if got := readEntry(t, s, name); !bytes.Equal(got, tt.content) {
				t.Errorf("entry content differs (%d bytes, want %d)", len(got), len(tt.content))
			}
			if s.Links(inode(t, s.Path(name))) != 0 {
				t.Errorf("a copy counts as a link")
			}
			// Same content again: no new entry.
			if k, err := s.PreserveCopy(f); err != nil || k.Created {
				t.Errorf("second PreserveCopy = %+v, %v", k, err)
			}
			if n := tmpFiles(t, s); len(n) != 0 {
				t.Errorf("temp files left: %v", n)
			}
		})
	}
}

func TestPreserveCrossFilesystem(t *testing.T) {
	for _, move := range []bool{true, false} {
		t.Run(fmt.Sprintf("move=%v", move), func(t *testing.T) {
			var dir string
			s := newTestStore(t, crossFS(&dir))
			dir = s.Dir()
			content := bytes.Repeat([]byte("x"), 2<<20+3)
			p, sum := writeFile(t, t.TempDir(), "f", content)
			ino := inode(t, p)
			name, created, err := s.Preserve(p, sum, int64(len(content)), move)
			if err != nil || !created {
				t.Fatalf("Preserve = %v, %v", created, err)
			}
			_, statErr := os.Lstat(p)
			if move != errors.Is(statErr, os.ErrNotExist) {
				t.Errorf("move=%v, path stat: %v", move, statErr)
			}
			if got := readEntry(t, s, name); !bytes.Equal(got, content) {
				t.Error("entry content differs")
			}
			if inode(t, s.Path(name)) == ino || s.Links(ino) != 0 {
				t.Errorf("copy shares the original's inode or counts as a link")
			}
			if n := tmpFiles(t, s); len(n) != 0 {
				t.Errorf("temp files left: %v", n)
			}
		})
	}
}

func TestPreserveCopyChecksumMismatch(t *testing.T) {
	var dir string
	s := newTestStore(t, crossFS(&dir))
	dir = s.Dir()
	content := []byte("the caller got the checksum wrong")
	p, _ := writeFile(t, t.TempDir(), "f", content)
	_, _, err := s.Preserve(p, "0123456789abcdef", int64(len(content)), true)
	if !errors.Is(err, ErrChecksum) {
		t.Fatalf("Preserve with a wrong checksum: %v", err)
	}
	if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, content) {
		t.Errorf("original after failed preserve: %q, %v", got, err)
	}
	if n, _ := s.Stats(); n != 0 || len(tmpFiles(t, s)) != 0 {
		t.Errorf("store not empty after failure: %d entries, tmp %v", n, tmpFiles(t, s))
	}
}

func TestPreserveENOSPC(t *testing.T) {
	var dir string
	written := 0
	var mu sync.Mutex
	s := newTestStore(t, crossFS(&dir), noReflinks, func(o *sysOps) {
		o.write = func(f *os.File, p []byte) (int, error) {
			mu.Lock()
			defer mu.Unlock()
			if written >= 1<<20 {
				return 0, &os.PathError{Op: "write", Path: f.Name(), Err: syscall.ENOSPC}
			}
			written += len(p)
			return f.Write(p)
		}
	})
	dir = s.Dir()
	content := bytes.Repeat([]byte("y"), 3<<20)
	for _, move := range []bool{true, false} {
		written = 0
		p, sum := writeFile(t, t.TempDir(), "f", content)
		_, _, err := s.Preserve(p, sum, int64(len(content)), move)
		if !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("move=%v: Preserve on a full store: %v", move, err)
		}
		if !strings.HasPrefix(err.Error(), "preserve "+p+": ") {
			t.Errorf("error reads %q", err)
		}
		if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, content) {
			t.Errorf("original changed after failed preserve: %v", err)
		}
		if n, _ := s.Stats(); n != 0 || len(tmpFiles(t, s)) != 0 {
			t.Errorf("store not empty after failure: %d entries, tmp %v", n, tmpFiles(t, s))
		}
		f, _ := os.Open(p)
		written = 0
		if _, err := s.PreserveCopy(f); !errors.Is(err, syscall.ENOSPC) {
			t.Errorf("PreserveCopy on a full store: %v", err)
		}
		f.Close()
		if len(tmpFiles(t, s)) != 0 {
			t.Errorf("temp left by PreserveCopy: %v", tmpFiles(t, s))
		}
	}
}

func TestPreserveErrors(t *testing.T) {
	s := newTestStore(t)
	dir := t.TempDir()
	p, sum := writeFile(t, dir, "f", []byte("12345"))
	tests := []struct {
		name  string
		path  string
		sum   string
		size  int64
		errno error
	}{
		{"missing", filepath.Join(dir, "nope"), sum, 5, syscall.ENOENT},
		{"wrong size", p, sum, 4, nil},
		{"bad checksum", p, "XYZ", 5, nil},
		{"directory", dir, sum, 5, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := s.Preserve(tt.path, tt.sum, tt.size, true)
			if err == nil {
				t.Fatal("Preserve succeeded")
			}
			if tt.errno != nil && !errors.Is(err, tt.errno) {
				t.Errorf("error %v is not %v", err, tt.errno)
			}
			if !strings.HasPrefix(err.Error(), "preserve "+tt.path+": ") {
				t.Errorf("error reads %q", err)
			}
		})
	}
	if _, err := os.Stat(p); err != nil {
		t.Error(err)
	}
}

// TestPreserveStat: with the caller's lstat, Preserve takes the type and
// the inode from it; a stat of anything but a regular file is refused and
// nothing moves.
func TestPreserveStat(t *testing.T) {
	s := newTestStore(t)
	dir := t.TempDir()
	content := []byte("part-00000")
	p, sum := writeFile(t, dir, "f", content)
	var dst, fst syscall.Stat_t
	if err := syscall.Lstat(dir, &dst); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Lstat(p, &fst); err != nil {
		t.Fatal(err)
	}
	dst.Size = fst.Size
	if _, _, err := s.PreserveStat(p, sum, &dst, true); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("PreserveStat with a directory's stat: %v", err)
	}
	if _, err := os.Lstat(p); err != nil {
		t.Fatalf("refused preservation moved the file: %v", err)
	}
	name, created, err := s.PreserveStat(p, sum, &fst, true)
	if err != nil || !created {
		t.Fatalf("PreserveStat = %q, %v, %v", name, created, err)
	}
	if got := readEntry(t, s, name); !bytes.Equal(got, content) {
		t.Errorf("entry has %q, want %q", got, content)
	}
	if got := s.Links(fst.Ino); got != 1 {
		t.Errorf("Links(%d) = %d, want 1", fst.Ino, got)
	}
}

func TestPreserveConcurrent(t *testing.T) {
	s := newTestStore(t)
	dir := t.TempDir()
	const n = 64
	var wg sync.WaitGroup
	var mu sync.Mutex
	createdN := 0
	for i := range n {
		content := []byte(fmt.Sprintf("content %d", i%4)) // 4 distinct contents
		p, sum := writeFile(t, dir, fmt.Sprint(i), content)
		wg.Add(1)
		go func() {
			defer wg.Done()
			var created bool
			var err error
			if i%3 == 0 {
				f, _ := os.Open(p)
				var k Kept
				k, err = s.PreserveCopy(f)
				created = k.Created
				f.Close()
				os.Remove(p)
			} else {
				_, created, err = s.Preserve(p, sum, int64(len(content)), true)
			}
			if err != nil {
				t.Error(err)
			}
			if created {
				mu.Lock()
				createdN++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if entries, _ := s.Stats(); entries != 4 || createdN != 4 {
		t.Errorf("%d entries, %d created; want 4, 4", entries, createdN)
	}
}

func TestGC(t *testing.T) {
	clk := &clock{}
	s := newTestStore(t, func(o *sysOps) { o.now = clk.Now })
	dir := t.TempDir()
	t0 := time.Unix(2_000_000, 0)
	retain := 24 * time.Hour
	preserve := func(content string, at time.Time) string {
		clk.set(at)
		p, sum := writeFile(t, dir, "f", []byte(content))
		name, _, err := s.Preserve(p, sum, int64(len(content)), true)
		if err != nil {
			t.Fatal(err)
		}
		return name
	}
	old := preserve("old", t0)
	pinned := preserve("pinned", t0)
	edge := preserve("edge", t0.Add(time.Hour))
	young := preserve("young", t0.Add(2*time.Hour))
	refreshed := preserve("refreshed", t0)
	preserve("refreshed", t0.Add(3*time.Hour))

	now := t0.Add(time.Hour + retain) // edge's retention ends exactly now
	removed, err := s.GC(retain, now, func(e Entry) bool { return e.Name == pinned })
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range removed {
		got = append(got, e.Name)
	}
	want := map[string]bool{old: true, edge: true}
	if len(got) != len(want) {
		t.Errorf("removed %v, want %v", got, want)
	}
	for _, name := range got {
		if !want[name] {
			t.Errorf("removed %s", name)
		}
		if _, err := os.Lstat(s.Path(name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still on disk", name)
		}
	}
	for _, name := range []string{pinned, young, refreshed} {
		if _, err := s.Lookup(name); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	// Nothing younger than the retention, ever, whatever keep says.
	removed, err = s.GC(retain, now.Add(-time.Nanosecond), func(e Entry) bool { return e.Name == pinned })
	if err != nil || len(removed) != 0 {
		t.Errorf("GC before anything expired removed %v, %v", removed, err)
	}
	if _, err := s.GC(-time.Hour, now, nil); err == nil {
		t.Error("GC with a negative retention succeeded")
	}
}

func TestRestore(t *testing.T) {
	s := newTestStore(t)
	content := []byte("restore me")
	p, sum := writeFile(t, t.TempDir(), "f", content)
	name, _, err := s.Preserve(p, sum, int64(len(content)), true)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "back")
	if err := s.Restore(name, dst); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(dst); err != nil || !bytes.Equal(got, content) {
		t.Errorf("restored %q, %v", got, err)
	}
	if _, err := s.Lookup(name); err != nil {
		t.Errorf("entry gone after Restore: %v", err)
	}
	if err := s.Restore(Name("0123456789abcdef", 3), dst); !errors.Is(err, ErrNotFound) {
		t.Errorf("Restore of a missing entry: %v", err)
	}

	// A damaged entry is refused and dst is left alone.
	flipByte(t, s.Path(name))
	dst2 := filepath.Join(filepath.Dir(dst), "back2")
	if err := s.Restore(name, dst2); !errors.Is(err, ErrChecksum) {
		t.Errorf("Restore of a corrupt entry: %v", err)
	}
	des, _ := os.ReadDir(filepath.Dir(dst))
	if len(des) != 1 {
		t.Errorf("restore dir holds %d files, want 1", len(des))
	}
	flipByte(t, s.Path(name)) // undo, for the cleanup's Fsck
}

func flipByte(t *testing.T, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, 0); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, 0); err != nil {
		t.Fatal(err)
	}
}

func TestUnpreserve(t *testing.T) {
	for _, cross := range []bool{false, true} {
		t.Run(fmt.Sprintf("cross=%v", cross), func(t *testing.T) {
			var dir string
			var tweaks []func(*sysOps)
			if cross {
				tweaks = append(tweaks, crossFS(&dir))
			}
			s := newTestStore(t, tweaks...)
			dir = s.Dir()
			content := []byte("put me back")
			p, sum := writeFile(t, t.TempDir(), "f", content)
			name, _, err := s.Preserve(p, sum, int64(len(content)), true)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Unpreserve(name, p); err != nil {
				t.Fatal(err)
			}
			if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, content) {
				t.Errorf("path after Unpreserve: %q, %v", got, err)
			}
			if n, _ := s.Stats(); n != 0 {
				t.Errorf("%d entries left", n)
			}
		})
	}
}

func TestReopen(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cmroot")
	s := openTestStore(t, dir)
	content := []byte("survives a clean close")
	p, sum := writeFile(t, t.TempDir(), "f", content)
	ino := inode(t, p)
	name, _, err := s.Preserve(p, sum, int64(len(content)), true)
	if err != nil {
		t.Fatal(err)
	}
	before, _ := s.Lookup(name)
	if _, err := Open(dir, Options{}); !errors.Is(err, ErrInUse) {
		t.Errorf("second Open: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTestStore(t, dir)
	after, err := s.Lookup(name)
	if err != nil || after != before {
		t.Errorf("after reopen: %+v, %v; want %+v", after, err, before)
	}
	if s.Links(ino) != 1 {
		t.Errorf("Links after reopen = %d", s.Links(ino))
	}
}

func TestUncleanShutdown(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cmroot")
	clk := &clock{now: time.Unix(3_000_000, 0)}
	s := openTestStore(t, dir, func(o *sysOps) { o.now = clk.Now })
	src := t.TempDir()
	var names []string
	for _, c := range []string{"kept", "deleted behind the store's back"} {
		p, sum := writeFile(t, src, "f", []byte(c))
		name, _, err := s.Preserve(p, sum, int64(len(c)), true)
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	if err := s.flush(); err != nil { // the index had caught up
		t.Fatal(err)
	}
	s.crash()

	// Behind the store's back: an entry appears (a rename whose index
	// commit was lost), one disappears, a copy was interrupted.
	content := []byte("renamed in just before the crash")
	p, sum := writeFile(t, src, "g", content)
	ino := inode(t, p)
	born := time.Now()
	adopted := Name(sum, int64(len(content)))
	if err := os.Rename(p, s.Path(adopted)); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(s.Path(names[1])); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, tmpDir, ".cmroot-stale"), []byte("half a copy"), 0o600); err != nil {
		t.Fatal(err)
	}

	s = openTestStore(t, dir)
	if e, err := s.Lookup(names[0]); err != nil || !e.Preserved.Equal(time.Unix(3_000_000, 0)) {
		t.Errorf("surviving record: %+v, %v (its time must be kept)", e, err)
	}
	if _, err := s.Lookup(names[1]); !errors.Is(err, ErrNotFound) {
		t.Errorf("record of a deleted entry: %v", err)
	}
	e, err := s.Lookup(adopted)
	if err != nil {
		t.Fatalf("entry found in the directory was not adopted: %v", err)
	}
	if e.Preserved.Before(born.Add(-time.Second)) || !e.Preserved.Equal(e.Refreshed) || e.Ino != ino {
		t.Errorf("adopted entry %+v (want ctime ≈ %v, ino %d)", e, born, ino)
	}
	if tmp := tmpFiles(t, s); len(tmp) != 0 {
		t.Errorf("stale temp files: %v", tmp)
	}
	if n, _ := s.Stats(); n != 2 {
		t.Errorf("%d entries, want 2", n)
	}
}

func TestCorruptIndex(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cmroot")
	s := openTestStore(t, dir)
	content := []byte("the index is only a cache")
	p, sum := writeFile(t, t.TempDir(), "f", content)
	name, _, err := s.Preserve(p, sum, int64(len(content)), true)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, indexFile), bytes.Repeat([]byte{0xa5}, 64<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	s = openTestStore(t, dir)
	if _, err := s.Lookup(name); err != nil {
		t.Errorf("entry lost with the index: %v", err)
	}
}

func TestFsck(t *testing.T) {
	s := newTestStore(t)
	src := t.TempDir()
	names := map[string]string{}
	for _, c := range []string{"good", "corrupt", "orphan", "gone"} {
		p, sum := writeFile(t, src, c, []byte(c+" content"))
		name, _, err := s.Preserve(p, sum, int64(len(c+" content")), true)
		if err != nil {
			t.Fatal(err)
		}
		names[c] = name
	}
	flipByte(t, s.Path(names["corrupt"]))
	if err := os.Remove(s.Path(names["gone"])); err != nil {
		t.Fatal(err)
	}
	stray := filepath.Join(s.Dir(), "ab", "not-an-entry")
	if err := os.WriteFile(stray, []byte("?"), 0o600); err != nil {
		t.Fatal(err)
	}
	referenced := map[string]bool{names["good"]: true, names["corrupt"]: true, names["gone"]: true}

	rep, err := s.Fsck(referenced, false)
	if err != nil {
		t.Fatal(err)
	}
	want := Report{
		Entries:    2,
		Orphans:    []string{names["orphan"]},
		Missing:    []string{names["gone"]},
		Corrupt:    sorted(names["corrupt"], "not-an-entry"),
		IndexFixed: 1,
	}
	if fmt.Sprint(rep) != fmt.Sprint(want) {
		t.Errorf("Fsck = %+v\nwant   %+v", rep, want)
	}
	if _, err := os.Stat(s.Path(names["corrupt"])); err != nil {
		t.Errorf("Fsck without repair moved data: %v", err)
	}

	if rep, err = s.Fsck(referenced, true); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(rep) != fmt.Sprint(want) {
		t.Errorf("Fsck(repair) = %+v\nwant           %+v", rep, want)
	}
	rep, err = s.Fsck(referenced, false)
	if err != nil {
		t.Fatal(err)
	}
	want = Report{Entries: 2, Orphans: want.Orphans, Missing: sorted(names["corrupt"], names["gone"])}
	if fmt.Sprint(rep) != fmt.Sprint(want) {
		t.Errorf("Fsck after repair = %+v\nwant                %+v", rep, want)
	}
	aside, _ := os.ReadDir(filepath.Join(s.Dir(), corruptDir))
	if len(aside) != 2 {
		t.Errorf(".corrupt holds %d files, want 2", len(aside))
	}
}

func sorted(s ...string) []string {
	out := append([]string(nil), s...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

func TestListFind(t *testing.T) {
	s := newTestStore(t)
	src := t.TempDir()
	want := map[string]bool{}
	for i := range 2500 { // more than one List batch
		c := fmt.Sprint(i)
		p, sum := writeFile(t, src, "f", []byte(c))
		name, _, err := s.Preserve(p, sum, int64(len(c)), true)
		if err != nil {
			t.Fatal(err)
		}
		want[name] = true
	}
	seen := 0
	prev := ""
	err := s.List(func(e Entry) error {
		if !want[e.Name] || e.Name <= prev {
			t.Errorf("List gave %s after %s", e.Name, prev)
		}
		prev = e.Name
		seen++
		return nil
	})
	if err != nil || seen != len(want) {
		t.Errorf("List saw %d of %d: %v", seen, len(want), err)
	}
	sum := prev[:16]
	es, err := s.Find(sum)
	if err != nil || len(es) != 1 || es[0].Name != prev {
		t.Errorf("Find(%s) = %v, %v", sum, es, err)
	}
	if _, err := s.Find("0000000000000000"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Find of nothing: %v", err)
	}
}

func TestClosed(t *testing.T) {
	s := newTestStore(t)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	p, sum := writeFile(t, t.TempDir(), "f", []byte("abc"))
	if _, _, err := s.Preserve(p, sum, 3, true); !errors.Is(err, ErrClosed) {
		t.Errorf("Preserve on a closed store: %v", err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Error(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestPreserveCopyOf(t *testing.T) {
	s := newTestStore(t)
	dir := t.TempDir()
	content := bytes.Repeat([]byte("warehouse bytes "), 100000)
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, content, 0o640); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sum := checksum.Bytes(content)
	name, created, err := s.PreserveCopyOf(f, sum, int64(len(content)))
	if err != nil || !created || name != Name(sum, int64(len(content))) {
		t.Fatalf("PreserveCopyOf = %q %v %v", name, created, err)
	}
	got, err := os.ReadFile(s.Path(name))
	if err != nil || !bytes.Equal(got, content) {
		t.Fatalf("entry content differs from the original (err %v)", err)
	}
	if s.Links(inode(t, p)) != 0 {
		t.Fatal("a copy shares the original's inode")
	}
	// The same content again: refreshed, not copied.
	name2, created, err := s.PreserveCopyOf(f, sum, int64(len(content)))
	if err != nil || created || name2 != name {
		t.Fatalf("second PreserveCopyOf = %q %v %v, want %q false nil", name2, created, err, name)
	}
	if _, _, err := s.PreserveCopyOf(f, "not-a-sum", 3); err == nil {
		t.Fatal("PreserveCopyOf accepted a malformed checksum")
	}
}

// TestDropUnused: a copy nobody else came to share is dropped; one a
// later preservation deduplicated onto is kept (I2), even when both
// happened at the same clock reading.
func TestDropUnused(t *testing.T) {
	clk := &clock{now: time.Unix(1_000_000, 0)}
	s := newTestStore(t, func(o *sysOps) { o.now = clk.Now })
	dir := t.TempDir()
	content := []byte("taken ahead")
	a, sum := writeFile(t, dir, "a", content)
	name, created, err := s.Preserve(a, sum, int64(len(content)), false)
	if err != nil || !created {
		t.Fatalf("Preserve = %v, %v", created, err)
	}
	if dropped, err := s.DropUnused(name); err != nil || !dropped {
		t.Fatalf("DropUnused of an unshared copy = %v, %v; want dropped", dropped, err)
	}
	if _, err := s.Lookup(name); !errors.Is(err, ErrNotFound) {
		t.Errorf("Lookup after the drop: %v, want ErrNotFound", err)
	}

	// Shared at the very same instant (the clock does not move).
	name, _, err = s.Preserve(a, sum, int64(len(content)), false)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := writeFile(t, dir, "b", content)
	if _, created, err := s.Preserve(b, sum, int64(len(content)), true); err != nil || created {
		t.Fatalf("dedup Preserve = %v, %v", created, err)
	}
	if dropped, err := s.DropUnused(name); err != nil || dropped {
		t.Fatalf("DropUnused of a shared entry = %v, %v; want kept", dropped, err)
	}
	if _, err := s.Lookup(name); err != nil {
		t.Errorf("the shared entry is gone: %v", err)
	}
}
