package source

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/cmroot"
	"github.com/cmfs-project/cmfs/internal/wait"
	"github.com/cmfs-project/cmfs/journal"
	"github.com/cmfs-project/cmfs/repl"
)

// testSource is a served source: a warehouse root with the default state
// directory, and a client connected to it over loopback TCP.
type testSource struct {
	backing, state, cmroot string
	srv                    *Server
	c                      *Client
}

// newSource serves cfg (Backing and State filled in when empty) on
// 127.0.0.1:0; cleanup stops the server and waits for Serve to return.
func newSource(t *testing.T, cfg Config) *testSource {
	t.Helper()
	if cfg.Backing == "" {
		cfg.Backing = t.TempDir()
	}
	if cfg.State == "" {
		cfg.State = filepath.Join(cfg.Backing, ".cmfs")
	}
	if cfg.CMRoot == "" {
		cfg.CMRoot = filepath.Join(cfg.State, "cmroot")
	}
	if err := os.MkdirAll(cfg.CMRoot, 0o755); err != nil {
		t.Fatal(err)
	}
	if cfg.Token == "" {
		cfg.Token = testToken
	}
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis) }()
	c, err := Dial(ctx, lis.Addr().String(), WithToken(cfg.Token))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	got := srv.Config()
	return &testSource{backing: got.Backing, state: got.State, cmroot: got.CMRoot, srv: srv, c: c}
}

// write puts data at rel in the warehouse and returns the journal.File
// that names it.
func (s *testSource) write(t *testing.T, rel string, data []byte) journal.File {
	t.Helper()
	p := filepath.Join(s.backing, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return fileOf(rel, data)
}

// preserve puts data into cmroot under its name.
func (s *testSource) preserve(t *testing.T, data []byte) {
	t.Helper()
	name := cmroot.Name(journal.Sum(data), int64(len(data)))
	p := filepath.Join(s.cmroot, name[:2], name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o444); err != nil {
		t.Fatal(err)
	}
}

func fileOf(rel string, data []byte) journal.File {
	return journal.File{Path: rel, Size: int64(len(data)), XXH64: journal.Sum(data)}
}

func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// fetch reads f through the client, returning the bytes and the error
// the reader ended with (nil for io.EOF).
func fetch(t *testing.T, c *Client, f journal.File) ([]byte, error) {
	t.Helper()
	r, err := c.Fetch(context.Background(), f)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

func TestFetch(t *testing.T) {
	orig := []byte("the original rows\n")
	same := []byte("THE CHANGED ROWS!\n") // same size, other bytes
	longer := []byte("new rows, and more of them\n")
	tests := []struct {
		name      string
		setup     func(t *testing.T, s *testSource) journal.File
		want      []byte
		retries   int64
		wantBytes int64 // file data received, discarded bytes included
	}{
		{"live", func(t *testing.T, s *testSource) journal.File {
			return s.write(t, "db1.db/t/p=1/part-0", orig)
		}, orig, 0, int64(len(orig))},
		{"live, cmroot has it too", func(t *testing.T, s *testSource) journal.File {
			s.preserve(t, orig)
			return s.write(t, "db1.db/t/p=1/part-0", orig)
		}, orig, 0, int64(len(orig))},
		{"gone: cmroot", func(t *testing.T, s *testSource) journal.File {
			s.preserve(t, orig)
			return fileOf("db1.db/t/p=1/part-0", orig)
		}, orig, 0, int64(len(orig))},
		{"other size: cmroot", func(t *testing.T, s *testSource) journal.File {
			s.preserve(t, orig)
			s.write(t, "db1.db/t/p=1/part-0", longer)
			return fileOf("db1.db/t/p=1/part-0", orig)
		}, orig, 0, int64(len(orig))},
		{"same size, other bytes: cmroot after a retry", func(t *testing.T, s *testSource) journal.File {
			s.preserve(t, orig)
			s.write(t, "db1.db/t/p=1/part-0", same)
			return fileOf("db1.db/t/p=1/part-0", orig)
		}, orig, 1, 2 * int64(len(orig))},
		{"a directory now: cmroot", func(t *testing.T, s *testSource) journal.File {
			s.preserve(t, orig)
			s.write(t, "db1.db/t/p=1/part-0/x", longer)
			return fileOf("db1.db/t/p=1/part-0", orig)
		}, orig, 0, int64(len(orig))},
		{"by cm name only", func(t *testing.T, s *testSource) journal.File {
			s.preserve(t, orig)
			f := fileOf("", orig)
			f.CM = cmroot.Name(f.XXH64, f.Size)
			return f
		}, orig, 0, int64(len(orig))},
		{"empty file", func(t *testing.T, s *testSource) journal.File {
			return s.write(t, "db1.db/t/empty", nil)
		}, []byte{}, 0, 0},
		{"dot elements", func(t *testing.T, s *testSource) journal.File {
			f := s.write(t, "db1.db/t/part-0", orig)
			f.Path = "./db1.db//t/./part-0"
			return f
		}, orig, 0, int64(len(orig))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSource(t, Config{})
			f := tt.setup(t, s)
			got, err := fetch(t, s.c, f)
			if err != nil {
				t.Fatalf("fetch: %v", err)
			}
			if !bytes.Equal(got, tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
			}
			st := s.c.Stats()
			if st.Retries != tt.retries || st.Bytes != tt.wantBytes || st.Files != 1 {
				t.Errorf("stats %+v, want retries %d, bytes %d, files 1", st, tt.retries, tt.wantBytes)
			}
		})
	}
}

func TestFetchNotFound(t *testing.T) {
	s := newSource(t, Config{})
	orig := []byte("the original rows\n")
	f := fileOf("db1.db/t/p=1/part-0", orig)

	_, err := fetch(t, s.c, f)
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("got %v, want ErrNotFound", err)
	}
	want := "no copy of db1.db/t/p=1/part-0 with xxh64 " + f.XXH64 + " (size 18): not at the path, not in cmroot"
	if !strings.Contains(err.Error(), want) {
		t.Errorf("got %q, want it to say %q", err, want)
	}

	// Same size at the path, other bytes, nothing in cmroot.
	s.write(t, f.Path, []byte("THE CHANGED ROWS!\n"))
	_, err = fetch(t, s.c, f)
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "has changed, not in cmroot") {
		t.Errorf("changed in place: got %v, want ErrNotFound saying the file has changed", err)
	}
}

func TestFetchCorruptEntry(t *testing.T) {
	s := newSource(t, Config{})
	orig := []byte("the original rows\n")
	f := fileOf("gone", orig)
	name := cmroot.Name(f.XXH64, f.Size)
	p := filepath.Join(s.cmroot, name[:2], name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("THE CHANGED ROWS!\n"), 0o444); err != nil {
		t.Fatal(err)
	}
	_, err := fetch(t, s.c, f)
	if !errors.Is(err, ErrMismatch) {
		t.Errorf("got %v, want ErrMismatch", err)
	}
}

func TestFetchLarge(t *testing.T) {
	big := randomBytes(5<<20+12345, 1)
	other := randomBytes(len(big), 2)
	for _, tt := range []struct {
		name  string
		spool int64 // Client.spoolMemory
		setup func(t *testing.T, s *testSource) journal.File
	}{
		{"live", spoolMemory, func(t *testing.T, s *testSource) journal.File {
			return s.write(t, "db.db/t/big", big)
		}},
		{"live, spooled to disk", 1 << 20, func(t *testing.T, s *testSource) journal.File {
			return s.write(t, "db.db/t/big", big)
		}},
		{"cmroot after a retry, spooled to disk", 1 << 20, func(t *testing.T, s *testSource) journal.File {
			s.preserve(t, big)
			s.write(t, "db.db/t/big", other)
			return fileOf("db.db/t/big", big)
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := newSource(t, Config{})
			s.c.spoolMemory = tt.spool
			s.c.spoolDir = t.TempDir()
			got, err := fetch(t, s.c, tt.setup(t, s))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, big) {
				t.Fatalf("got %d bytes (xxh64 %s), want %d (%s)", len(got), journal.Sum(got), len(big), journal.Sum(big))
			}
			if left, _ := os.ReadDir(s.c.spoolDir); len(left) != 0 {
				t.Errorf("spool directory holds %d files, want none", len(left))
			}
		})
	}
}

func TestFetchRefused(t *testing.T) {
	passwd, err := os.ReadFile("/etc/passwd")
	if err != nil {
		t.Skip("no /etc/passwd to point a symlink at")
	}
	secret := []byte("state, never served\n")
	rows := []byte("rows\n")
	s := newSource(t, Config{})
	for _, l := range []struct{ target, link string }{
		{"/etc/passwd", "db.db/t/abs"},
		{strings.Repeat("../", 12) + "etc/passwd", "db.db/t/rel-out"},
		{"../../.cmfs/secret", "db.db/t/to-state"},
		{".cmfs", "state-dir"},
		{filepath.Join(s.backing, "db.db/t/part-0"), "db.db/t/abs-in"},
		{"part-0", "db.db/t/rel-in"},
	} {
		p := filepath.Join(s.backing, l.link)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(l.target, p); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(s.state, "secret"), secret, 0o644); err != nil {
		t.Fatal(err)
	}
	s.write(t, "db.db/t/part-0", rows)
	// Nothing may come from cmroot either: these names are refused, not
	// missing.
	s.preserve(t, passwd)
	s.preserve(t, secret)

	tests := []struct {
		name    string
		f       journal.File
		wantErr error // nil: served
		wantMsg string
	}{
		{"dot-dot", fileOf("../"+filepath.Base(s.backing)+"/db.db/t/part-0", rows), ErrInvalid, `has a ".." element`},
		{"dot-dot inside", fileOf("db.db/../db.db/t/part-0", rows), ErrInvalid, `has a ".." element`},
		{"absolute", fileOf("/etc/passwd", passwd), ErrInvalid, "is absolute"},
		{"NUL", fileOf("db.db/t/part-0\x00", rows), ErrInvalid, "contains a NUL"},
		{"symlink to /etc/passwd", fileOf("db.db/t/abs", passwd), ErrRefused, "leads outside the warehouse root"},
		{"relative symlink out", fileOf("db.db/t/rel-out", passwd), ErrRefused, "leads outside the warehouse root"},
		{"state dir", fileOf(".cmfs/secret", secret), ErrRefused, "state directory"},
		{"state dir, dot path", fileOf("./.cmfs//secret", secret), ErrRefused, "state directory"},
		{"cmroot entry by path", fileOf(".cmfs/cmroot/"+journal.Sum(secret)[:2]+"/"+cmroot.Name(journal.Sum(secret), int64(len(secret))), secret), ErrRefused, "state directory"},
		{"symlink into the state dir", fileOf("db.db/t/to-state", secret), ErrRefused, "state directory"},
		{"through a symlinked state dir", fileOf("state-dir/secret", secret), ErrRefused, "state directory"},
		// An absolute symlink is refused even when it points inside.
		{"absolute symlink inside", fileOf("db.db/t/abs-in", rows), ErrRefused, "leads outside the warehouse root"},
		// A relative symlink that stays inside is served.
		{"relative symlink inside", fileOf("db.db/t/rel-in", rows), nil, ""},
		{"uppercase xxh64", journal.File{Path: "db.db/t/part-0", Size: 5, XXH64: strings.ToUpper(journal.Sum(rows))}, ErrInvalid, "16 lowercase hex"},
		{"short xxh64", journal.File{Path: "db.db/t/part-0", Size: 5, XXH64: "abc"}, ErrInvalid, "16 lowercase hex"},
		{"negative size", journal.File{Path: "db.db/t/part-0", Size: -1, XXH64: journal.Sum(rows)}, ErrInvalid, "negative"},
		{"cm of other content", journal.File{Path: "db.db/t/part-0", Size: 5, XXH64: journal.Sum(rows), CM: "../../etc/passwd"}, ErrInvalid, "does not name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := fetch(t, s.c, tt.f)
			if tt.wantErr == nil {
				if err != nil || !bytes.Equal(got, rows) {
					t.Fatalf("got %q, %v; want %q", got, err, rows)
				}
				return
			}
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("got %q, %v; want %v", got, err, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("got %q, want it to say %q", err, tt.wantMsg)
			}
		})
	}
}

// A state directory configured elsewhere inside the warehouse root is
// refused too, and so is the default one.
func TestFetchRefusedCustomState(t *testing.T) {
	backing := t.TempDir()
	s := newSource(t, Config{Backing: backing, State: filepath.Join(backing, "meta", "state")})
	secret := []byte("state, never served\n")
	for _, rel := range []string{"meta/state/secret", ".cmfs/secret", "meta/state/cmroot/x"} {
		s.write(t, rel, secret)
		if _, err := fetch(t, s.c, fileOf(rel, secret)); !errors.Is(err, ErrRefused) {
			t.Errorf("%s: got %v, want ErrRefused", rel, err)
		}
	}
	if _, err := fetch(t, s.c, s.write(t, "meta/other", secret)); err != nil {
		t.Errorf("meta/other: %v", err)
	}
}

func TestNonLoopbackRefused(t *testing.T) {
	ctx := context.Background()
	for _, addr := range []string{"0.0.0.0:9860", ":9860", "[::]:9860", "192.0.2.1:9860", "[2001:db8::1]:9860"} {
		srv, err := NewServer(Config{Backing: t.TempDir(), State: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		err = srv.ListenAndServe(ctx, addr)
		if !errors.Is(err, ErrInsecure) {
			t.Errorf("ListenAndServe(%s): got %v, want ErrInsecure", addr, err)
		}
		if _, err := Dial(ctx, addr); !errors.Is(err, ErrInsecure) {
			t.Errorf("Dial(%s): got %v, want ErrInsecure", addr, err)
		}
	}
	srv, err := NewServer(Config{Backing: t.TempDir(), State: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	err = srv.ListenAndServe(ctx, "0.0.0.0:9860")
	want := "refusing to listen on 0.0.0.0:9860 without TLS (--tls-cert, --tls-key, --tls-ca); use a loopback address such as 127.0.0.1"
	if err == nil || err.Error() != want {
		t.Errorf("got %v, want %q", err, want)
	}
	for _, addr := range []string{"127.0.0.1:9860", "[::1]:9860", "localhost:9860"} {
		if err := checkLoopback(ctx, "listen on", addr); err != nil {
			t.Errorf("%s: %v", addr, err)
		}
	}
}

func TestListenAndServe(t *testing.T) {
	backing := t.TempDir()
	srv, err := NewServer(Config{Backing: backing, State: t.TempDir(), SourceID: "src-1", Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	// Find a free port, then serve on it.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.ListenAndServe(ctx, addr) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ListenAndServe: %v", err)
		}
	})
	c, err := Dial(ctx, addr, WithToken(testToken))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var st Status
	wait.Until(10*time.Second, func() bool { // until the listener is up
		st, err = c.Status(ctx)
		return err == nil
	})
	if err != nil {
		t.Fatal(err)
	}
	real, _ := filepath.EvalSymlinks(backing)
	if st != (Status{SourceID: "src-1", Backing: real}) {
		t.Errorf("got %+v", st)
	}
}

func TestNewServerErrors(t *testing.T) {
	dir := t.TempDir()
	for _, cfg := range []Config{
		{},
		{Backing: filepath.Join(dir, "missing")},
		{Backing: dir}, // no state directory yet
		{Backing: dir, State: dir},
	} {
		if _, err := NewServer(cfg); err == nil {
			t.Errorf("NewServer(%+v) succeeded", cfg)
		}
	}
}

// A file with a cmroot name is a preserved original: it is read from
// cmroot only, even while the path holds the same bytes.
func TestFetchCMOnly(t *testing.T) {
	s := newSource(t, Config{})
	orig := []byte("the original rows\n")
	f := s.write(t, "db.db/t/part-0", orig)
	f.CM = cmroot.Name(f.XXH64, f.Size)
	_, err := fetch(t, s.c, f)
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "no cmroot entry "+f.CM) {
		t.Fatalf("got %v, want ErrNotFound naming the entry", err)
	}
	s.preserve(t, orig)
	if got, err := fetch(t, s.c, f); err != nil || !bytes.Equal(got, orig) {
		t.Errorf("got %q, %v; want %q", got, err, orig)
	}
}

// WithStreaming hands a changed live file's bytes through, unchecked (the
// caller's own check finds them different); asking again with the cmroot
// name gets the original.
func TestFetchStreaming(t *testing.T) {
	s := newSource(t, Config{})
	c, err := Dial(context.Background(), s.c.conn.Target(), WithStreaming(), WithToken(testToken))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	orig := []byte("the original rows\n")
	s.preserve(t, orig)
	s.write(t, "db.db/t/part-0", []byte("THE CHANGED ROWS!\n"))
	f := fileOf("db.db/t/part-0", orig)
	if got, err := fetch(t, c, f); err != nil || journal.Sum(got) == f.XXH64 {
		t.Fatalf("got %q, %v; want the changed bytes, for the caller to find them different", got, err)
	}
	f.CM = cmroot.Name(f.XXH64, f.Size)
	if got, err := fetch(t, c, f); err != nil || !bytes.Equal(got, orig) {
		t.Errorf("got %q, %v; want %q", got, err, orig)
	}
	if st := c.Stats(); st.Retries != 0 || st.Files != 2 || st.Bytes != 2*int64(len(orig)) {
		t.Errorf("stats %+v", st)
	}
}

// TestFetchRenamedAway: content a later rename took elsewhere (renames
// preserve nothing in cmroot) is found under its new name when the client
// says which event it fetches for.
func TestFetchRenamedAway(t *testing.T) {
	s := newSource(t, Config{})
	data := []byte("partition data that moved")
	old := fileOf("w.db/t/p=1/part-0", data)
	s.write(t, "w.db/t/p=2/part-0", data)
	appendEvents(t, s.state,
		&journal.Event{Type: journal.Insert, Path: old.Path, Files: []journal.File{old}},
		&journal.Event{Type: journal.RenamePartition, Path: "w.db/t/p=1", NewPath: "w.db/t/p=2"})

	if _, err := fetch(t, s.c, old); !errors.Is(err, ErrNotFound) {
		t.Fatalf("fetch without an event: %v, want ErrNotFound", err)
	}
	r, err := s.c.Fetch(repl.WithEvent(context.Background(), 1), old)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got, err := io.ReadAll(r)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("fetch after event 1: %q, %v; want the renamed content", got, err)
	}
	// After the rename's own event there is nothing left to follow.
	if _, err := s.c.Fetch(repl.WithEvent(context.Background(), 2), old); !errors.Is(err, ErrNotFound) {
		t.Fatalf("fetch after event 2: %v, want ErrNotFound", err)
	}
}

// testToken is the token of the test servers.
const testToken = "0123456789abcdef0123456789abcdef"

func TestUnauthenticated(t *testing.T) {
	s := newSource(t, Config{})
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		opts []Option
	}{
		{"no token", nil},
		{"wrong token", []Option{WithToken("fedcba9876543210fedcba9876543210")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Dial(ctx, s.c.conn.Target(), tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.Status(ctx); !errors.Is(err, ErrUnauthenticated) {
				t.Errorf("status: %v, want ErrUnauthenticated", err)
			}
			if err := c.Range(ctx, 1, 0, func(*journal.Event) error { return nil }); !errors.Is(err, ErrUnauthenticated) {
				t.Errorf("events: %v, want ErrUnauthenticated", err)
			}
			if _, err := c.Fetch(ctx, journal.File{Path: "f", Size: 1, XXH64: journal.FormatSum(0)}); !errors.Is(err, ErrUnauthenticated) {
				t.Errorf("fetch: %v, want ErrUnauthenticated", err)
			}
		})
	}
	if _, err := s.c.Status(ctx); err != nil {
		t.Errorf("status with the token: %v", err)
	}
}

func TestServeNeedsToken(t *testing.T) {
	srv, err := NewServer(Config{Backing: t.TempDir(), State: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Serve(context.Background(), lis); !errors.Is(err, ErrInvalid) {
		t.Errorf("serve without a token: %v, want ErrInvalid", err)
	}
}
