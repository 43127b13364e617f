package cmroot

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/cmfs-project/cmfs/internal/checksum"
	"github.com/cmfs-project/cmfs/internal/pagecache"
	"golang.org/x/sys/unix"
)

// coldOriginal writes an original of size bytes that no one has cached
// (skipping where the filesystem keeps the pages anyway) and opens it.
func coldOriginal(t *testing.T, size int) (*os.File, string) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "original")
	data := bytes.Repeat([]byte("an original no one has read\n"), size/28+1)[:size]
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
	if n, err := pagecache.Resident(f, int64(size)); err != nil || n > int64(size)/16 {
		t.Skipf("the filesystem keeps %d bytes of %s cached after FADV_DONTNEED (%v)", n, p, err)
	}
	return f, checksum.Bytes(data)
}

// TestCopyLeavesCacheAsFound: copying an original that no one had cached
// leaves it uncached, both by PreserveCopy (read and hashed here) and by
// PreserveCopyOf (copied in the kernel): the copy costs the page cache
// nothing, and later small writes into the original do not land in the
// large folios its readahead would leave.
func TestCopyLeavesCacheAsFound(t *testing.T) {
	const size = 8 << 20
	for _, tc := range []struct {
		name string
		copy func(s *Store, f *os.File, sum string) error
	}{
		{"PreserveCopy", func(s *Store, f *os.File, _ string) error { _, err := s.PreserveCopy(f); return err }},
		{"PreserveCopyOf", func(s *Store, f *os.File, sum string) error { _, _, err := s.PreserveCopyOf(f, sum, size); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestStore(t)
			f, sum := coldOriginal(t, size)
			if err := tc.copy(s, f, sum); err != nil {
				t.Fatal(err)
			}
			if n, err := pagecache.Resident(f, size); err != nil || n > size/16 {
				t.Errorf("after the copy %d bytes of the original are cached (%v), none before", n, err)
			}
		})
	}
}
