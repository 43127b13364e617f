package repl

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/cmfs-project/cmfs/journal"
)

func TestFetcherRefusesUnsafePaths(t *testing.T) {
	s := newSource(t)
	secret := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secret, []byte("secret"), 0o644)
	os.Symlink(secret, s.abs("link-out"))
	os.Symlink(filepath.Dir(secret), s.abs("dir-out"))
	os.WriteFile(s.abs("inside"), []byte("secret"), 0o644)
	os.Symlink("inside", s.abs("link-in"))
	sum := journal.Sum([]byte("secret"))
	f := s.fetcher()
	for _, p := range []string{secret, "../" + filepath.Base(filepath.Dir(secret)) + "/secret", "a/../inside", "link-out", "dir-out/secret", ".cmfs/cmroot/x"} {
		t.Run(p, func(t *testing.T) {
			rc, err := f.Fetch(context.Background(), journal.File{Path: p, Size: 6, XXH64: sum})
			if !errors.Is(err, ErrUnsafePath) {
				if rc != nil {
					rc.Close()
				}
				t.Fatalf("got %v, want ErrUnsafePath", err)
			}
		})
	}
	// A symlink that stays inside the root is followed.
	rc, err := f.Fetch(context.Background(), journal.File{Path: "link-in", Size: 6, XXH64: sum})
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || string(b) != "secret" {
		t.Fatalf("link-in: %q, %v", b, err)
	}
	// A cmroot name that is not an entry name is refused.
	if _, err := f.Fetch(context.Background(), journal.File{Path: "x", Size: 6, XXH64: sum, CM: "../../inside"}); !errors.Is(err, ErrUnsafePath) {
		t.Fatalf("cm name with a path: got %v", err)
	}
}

func TestFetcherFallsBackAndCounts(t *testing.T) {
	s := newSource(t)
	x := []byte("content X")
	fx := journal.File{Path: "d.db/t/f", Size: int64(len(x)), XXH64: journal.Sum(x)}
	f := s.fetcher()
	if _, err := f.Fetch(context.Background(), fx); !errors.Is(err, ErrNoCopy) {
		t.Fatalf("nowhere: got %v, want ErrNoCopy", err)
	}
	putCM(t, s.cm, x)
	read := func(want string) {
		t.Helper()
		rc, err := f.Fetch(context.Background(), fx)
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		b, err := io.ReadAll(rc)
		if err != nil || string(b) != want {
			t.Fatalf("got %q, %v; want %q", b, err, want)
		}
	}
	read("content X") // from cmroot
	os.MkdirAll(s.abs("d.db/t"), 0o755)
	os.WriteFile(s.abs("d.db/t/f"), []byte("content Y"), 0o644) // same size, other bytes
	rc, err := f.Fetch(context.Background(), fx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(rc); !errors.Is(err, ErrStale) {
		t.Fatalf("stale live file: got %v, want ErrStale", err)
	}
	rc.Close()
	os.WriteFile(s.abs("d.db/t/f"), x, 0o644)
	read("content X") // live
	if st := f.Stats(); st.Files != 3 || st.CM != 1 || st.Stale != 1 || st.Bytes != 3*int64(len(x)) {
		t.Fatalf("stats: %+v", st)
	}
	// A corrupt cmroot entry is a checksum error, not content.
	os.WriteFile(s.abs("d.db/t/f"), []byte("other size"), 0o644)
	name := CMName(fx)
	os.WriteFile(filepath.Join(s.cm, name[:2], name), []byte("corrupt!!"), 0o644)
	rc, err = f.Fetch(context.Background(), fx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(rc); !errors.Is(err, ErrChecksum) {
		t.Fatalf("corrupt entry: got %v, want ErrChecksum", err)
	}
	rc.Close()
}

// Without the journal to follow, content renamed away after the event
// that named it cannot be found: the documented limit.
func TestFetcherRenamedAwayNeedsEvents(t *testing.T) {
	s := newSource(t)
	s.mkdir("d.db")
	s.mkdir("d.db/t")
	s.mkdir("d.db/t/p=1")
	s.write("d.db/t/p=1/f", "moved")
	s.renameDir("d.db/t/p=1", "d.db/t/p=2", journal.RenamePartition)
	dump := mustDump(t, s, 1, 4)
	_, err := Load(context.Background(), dump, t.TempDir(), &LocalFetcher{Root: s.root, CMRoot: s.cm}, LoadOptions{})
	if !errors.Is(err, ErrNoCopy) {
		t.Fatalf("got %v, want ErrNoCopy", err)
	}
	target := t.TempDir()
	mustLoad(t, dump, target, s.fetcher())
	checkTarget(t, s, target, 4)
}
