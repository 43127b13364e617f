package container

import (
	"bytes"
	"context"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// newTestStore opens a Store on fresh volumes (one unless told how many)
// without fsync. Its cleanup waits for scans and checks the invariants
// (checkStore), then closes it, so every test also checks them.
func newTestStore(t *testing.T, opts Options, vols ...string) *Store {
	t.Helper()
	if len(vols) == 0 {
		vols = []string{filepath.Join(t.TempDir(), "vol")}
	}
	opts.NoSync = true
	s, err := OpenStore(vols, opts)
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

// checkStore checks that no reservation is left, the tmp directories are
// empty, and every CLOSED container passes a full check.
func checkStore(t *testing.T, s *Store) {
	t.Helper()
	ctx := context.Background()
	for _, d := range s.List() {
		if _, err := s.WaitScan(ctx, d.ID); err != nil {
			t.Errorf("wait scan %d: %v", d.ID, err)
		}
	}
	for _, v := range s.Volumes() {
		if v.Reserved != 0 {
			t.Errorf("volume %s: %d bytes still reserved", v.Path, v.Reserved)
		}
		for _, d := range tmpDirs {
			if names := dirNames(t, filepath.Join(v.Path, d)); len(names) != 0 {
				t.Errorf("%s/%s holds %v", v.Path, d, names)
			}
		}
	}
	for _, d := range s.List() {
		if d.State != Closed {
			continue
		}
		c, err := s.get(d.ID)
		if err != nil {
			t.Error(err)
			continue
		}
		if _, reason, err := check(ctx, c.dir, d); err != nil || reason != "" {
			t.Errorf("container %d is CLOSED but: %s %v", d.ID, reason, err)
		}
	}
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, de := range des {
		names = append(names, de.Name())
	}
	return names
}

// tree lists every path under dir (relative, "/" for directories).
func tree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." {
			return nil
		}
		if de.IsDir() {
			rel += "/"
		}
		out = append(out, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// emptyVolumeTree is what a volume holds with no containers.
var emptyVolumeTree = []string{".lock", "tmp/", "tmp/container-copy/", "tmp/container-delete/", "tmp/container-extract/", "tmp/container-new/", "tmp/ec-stage/"}

// randBytes returns n pseudo-random bytes from seed.
func randBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		v := r.Uint64()
		for j := 0; j < 8; j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	for i := n &^ 7; i < n; i++ {
		b[i] = byte(r.Uint32())
	}
	return b
}

// textBytes returns n compressible bytes.
func textBytes(seed uint64, n int) []byte {
	words := strings.Fields("the quick brown fox jumps over a lazy dog while containers replicate blocks between peers")
	r := rand.New(rand.NewPCG(seed, 1))
	var b bytes.Buffer
	for b.Len() < n {
		b.WriteString(words[r.IntN(len(words))])
		b.WriteByte(' ')
	}
	return b.Bytes()[:n]
}

func mustPut(t *testing.T, s *Store, data []byte) (uint64, BlockID) {
	t.Helper()
	id, b, err := s.Put(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if want := BlockIDOf(data); b != want {
		t.Fatalf("Put = %v, want %v", b, want)
	}
	return id, b
}

func readBlock(t *testing.T, s *Store, b BlockID) ([]byte, error) {
	t.Helper()
	rc, n, err := s.OpenBlock(b)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	got, err := io.ReadAll(rc)
	if err == nil && int64(len(got)) != n {
		t.Fatalf("block %s: read %d bytes, OpenBlock said %d", b, len(got), n)
	}
	return got, err
}

// export returns container id's tarball.
func export(t *testing.T, s *Store, id uint64, c Compression) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := s.Export(context.Background(), id, c, &buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// closedContainer puts blocks into a new container and closes it.
func closedContainer(t *testing.T, s *Store, blocks ...[]byte) (Descriptor, []BlockID) {
	t.Helper()
	var id uint64
	var ids []BlockID
	for _, b := range blocks {
		cid, bid := mustPut(t, s, b)
		if id != 0 && cid != id {
			t.Fatalf("blocks went to containers %d and %d", id, cid)
		}
		id = cid
		ids = append(ids, bid)
	}
	d, err := s.CloseContainer(id)
	if err != nil {
		t.Fatal(err)
	}
	return d, ids
}

// crash stops s the way kill -9 would: the open container is not closed,
// scans stop where they are.
func (s *Store) crash() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.putMu.Lock()
	if s.idle != nil {
		s.idle.Stop()
	}
	for r, c := range s.open {
		c.closeFiles()
		delete(s.open, r)
	}
	s.putMu.Unlock()
	s.cancel()
	s.wg.Wait()
	for _, v := range s.vols {
		v.lock.Close()
	}
}

func sameStrings(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
