package control

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/cmroot"
	"github.com/cmfs-project/cmfs/internal/wait"
	"github.com/cmfs-project/cmfs/journal"
	"github.com/cmfs-project/cmfs/upkeep"
	"github.com/cmfs-project/cmfs/upkeep/upkeeptest"
)

// env is a journal, a store and a control server on a real unix socket.
type env struct {
	*upkeeptest.Env
	socket string
	client *Client
}

// socketDir returns a short directory: t.TempDir can exceed the 108-byte
// limit of a unix socket path.
func socketDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "cmfs")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{Env: upkeeptest.New(t), socket: filepath.Join(socketDir(t), "control.sock")}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	srv := NewServer(e.J, e.Store, Info{Mountpoint: "/mnt/x", Backing: "/data/x", State: e.Dir, CMRoot: e.Store.Dir(), Retain: time.Hour})
	go func() { done <- srv.Serve(ctx, e.socket) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	waitSocket(t, e.socket)

	c, err := Dial(e.socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	e.client = c
	return e
}

// waitSocket polls until something accepts connections on path.
func waitSocket(t *testing.T, path string) {
	t.Helper()
	var err error
	if !wait.Until(5*time.Second, func() bool {
		var c net.Conn
		if c, err = net.Dial("unix", path); err == nil {
			c.Close()
		}
		return err == nil
	}) {
		t.Fatalf("socket %s never answered: %v", path, err)
	}
}

func collect(t *testing.T, c *Client, from, to uint64) []journal.Event {
	t.Helper()
	var got []journal.Event
	err := c.Events(context.Background(), from, to, false, func(e journal.Event) error {
		got = append(got, e)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func TestSocketMode(t *testing.T) {
	e := newEnv(t)
	fi, err := os.Stat(e.socket)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != 0o600 {
		t.Errorf("socket mode = %o, want 600", got)
	}
}

func TestStatus(t *testing.T) {
	e := newEnv(t)
	f := e.Preserve(t, "hello")
	e.Append(t,
		&journal.Event{Type: journal.CreateDatabase, Path: "sales.db"},
		&journal.Event{Type: journal.Delete, Path: f.Path, Files: []journal.File{f}},
	)
	st, err := e.client.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := Status{Mountpoint: "/mnt/x", Backing: "/data/x", State: e.Dir, CMRoot: e.Store.Dir(),
		PID: os.Getpid(), LastEventID: 2, CMEntries: 1, CMBytes: 5}
	commit := st.Commit
	st.Commit = Commit{}
	if st != want {
		t.Errorf("Status = %+v, want %+v", st, want)
	}
	// The test journal does not sync (NoSync): one group, no WAL sync.
	if commit.Sync != "always" || commit.Events != 2 || commit.Groups != 1 || commit.Flushes != 1 || commit.FlushP99US < commit.FlushP50US {
		t.Errorf("Status.Commit = %+v, want always, 2 events in 1 group, 1 flush", commit)
	}
}

func TestEventsRange(t *testing.T) {
	e := newEnv(t)
	f := e.Preserve(t, "orders")
	e.Append(t,
		&journal.Event{Type: journal.CreateDatabase, Path: "sales.db"},
		&journal.Event{Type: journal.CreateTable, Path: "sales.db/orders"},
		&journal.Event{Type: journal.Delete, Path: f.Path, Files: []journal.File{f}},
		&journal.Event{Type: journal.Rename, Path: "a", NewPath: "b"},
	)
	tests := []struct {
		name     string
		from, to uint64
		want     []uint64
	}{
		{"all", 0, 0, []uint64{1, 2, 3, 4}},
		{"from", 3, 0, []uint64{3, 4}},
		{"to", 1, 2, []uint64{1, 2}},
		{"one", 3, 3, []uint64{3}},
		{"beyond", 9, 0, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ids []uint64
			for _, ev := range collect(t, e.client, tt.from, tt.to) {
				ids = append(ids, ev.ID)
			}
			if !equal(ids, tt.want) {
				t.Errorf("ids = %v, want %v", ids, tt.want)
			}
		})
	}

	got := collect(t, e.client, 3, 4)
	want, err := e.J.Get(3)
	if err != nil {
		t.Fatal(err)
	}
	g := got[0]
	if g.ID != want.ID || !g.Time.Equal(want.Time) || g.Type != want.Type || g.Path != want.Path ||
		g.DB != "sales" || g.Table != "orders" || len(g.Files) != 1 || g.Files[0] != f {
		t.Errorf("event 3 = %+v, want %+v", g, *want)
	}
	if got[1].NewPath != "b" {
		t.Errorf("event 4 new_path = %q, want b", got[1].NewPath)
	}
}

func TestEventsEmptyRange(t *testing.T) {
	e := newEnv(t)
	err := e.client.Events(context.Background(), 5, 2, false, func(journal.Event) error { return nil })
	if !errors.Is(err, ErrInvalid) {
		t.Errorf("Events(5, 2) = %v, want ErrInvalid", err)
	}
}

func TestEventsFollow(t *testing.T) {
	e := newEnv(t)
	e.Append(t, &journal.Event{Type: journal.Mkdir, Path: "a"})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan journal.Event)
	done := make(chan error, 1)
	go func() {
		done <- e.client.Events(ctx, 1, 0, true, func(ev journal.Event) error {
			select {
			case got <- ev:
			case <-ctx.Done():
			}
			return nil
		})
	}()
	next := func() journal.Event {
		t.Helper()
		select {
		case ev := <-got:
			return ev
		case <-time.After(5 * time.Second):
			t.Fatal("no event within 5s")
			return journal.Event{}
		}
	}
	if ev := next(); ev.ID != 1 {
		t.Fatalf("first id = %d, want 1", ev.ID)
	}
	e.Append(t, &journal.Event{Type: journal.Mkdir, Path: "b"}, &journal.Event{Type: journal.Mkdir, Path: "c"})
	if ev := next(); ev.ID != 2 || ev.Path != "b" {
		t.Fatalf("second = %d %s, want 2 b", ev.ID, ev.Path)
	}
	if ev := next(); ev.ID != 3 {
		t.Fatalf("third id = %d, want 3", ev.ID)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Events after cancel = %v, want context.Canceled", err)
	}
}

func TestEventsFollowUntilTo(t *testing.T) {
	e := newEnv(t)
	done := make(chan error, 1)
	var n int
	go func() {
		done <- e.client.Events(context.Background(), 1, 2, true, func(journal.Event) error {
			n++
			return nil
		})
	}()
	e.Append(t, &journal.Event{Type: journal.Mkdir, Path: "a"})
	e.Append(t, &journal.Event{Type: journal.Mkdir, Path: "b"}, &journal.Event{Type: journal.Mkdir, Path: "c"})
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("follow with to=2 did not end")
	}
	if n != 2 {
		t.Errorf("got %d events, want 2", n)
	}
}

func TestFsck(t *testing.T) {
	e := newEnv(t)
	kept := e.Preserve(t, "kept")
	e.Preserve(t, "orphan")
	gone := journal.File{Path: "sales.db/orders/part-1", Size: 4, XXH64: journal.Sum([]byte("gone")), CM: cmroot.Name(journal.Sum([]byte("gone")), 4)}
	e.Append(t,
		&journal.Event{Type: journal.Delete, Path: kept.Path, Files: []journal.File{kept}},
		&journal.Event{Type: journal.Delete, Path: gone.Path, Files: []journal.File{gone}},
	)
	r, err := e.client.Fsck(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	if r.Entries != 2 || r.Referenced != 2 || len(r.Orphans) != 1 || !equal(r.Missing, []string{gone.CM}) || r.OK() {
		t.Errorf("Fsck = %+v, want 2 entries, 2 referenced, 1 orphan, missing %s, not OK", r, gone.CM)
	}
	r, err = e.client.Fsck(context.Background(), true)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Repaired || !equal(r.Remaining, []string{gone.CM}) || r.OK() {
		t.Errorf("Fsck repair = %+v, want the missing entry remaining", r)
	}
}

func TestFsckClean(t *testing.T) {
	e := newEnv(t)
	f := e.Preserve(t, "x")
	e.Append(t, &journal.Event{Type: journal.Delete, Path: f.Path, Files: []journal.File{f}})
	r, err := e.client.Fsck(context.Background(), true)
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK() || !r.Clean() || r.Entries != 1 || r.Referenced != 1 {
		t.Errorf("Fsck = %+v, want clean", r)
	}
}

func TestGC(t *testing.T) {
	e := newEnv(t)
	e.Preserve(t, "aaaa")
	e.Preserve(t, "bbbbbb")
	// The mount's retention (1h) keeps both.
	res, err := e.client.GC(context.Background(), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if res != (upkeep.GCResult{}) {
		t.Errorf("GC(default) = %+v, want nothing removed", res)
	}
	res, err = e.client.GC(context.Background(), time.Nanosecond, 0)
	if err != nil {
		t.Fatal(err)
	}
	if want := (upkeep.GCResult{Removed: 2, Bytes: 10}); res != want {
		t.Errorf("GC = %+v, want %+v", res, want)
	}
	if n, b := e.Store.Stats(); n != 0 || b != 0 {
		t.Errorf("Stats after GC = %d, %d, want 0, 0", n, b)
	}
	if _, err := e.client.GC(context.Background(), -time.Second, 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("GC(-1s) = %v, want ErrInvalid", err)
	}
}

func TestLookup(t *testing.T) {
	e := newEnv(t)
	f := e.Preserve(t, "content")
	got, err := e.client.Lookup(context.Background(), f.CM)
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != f.CM || got.XXH64 != f.XXH64 || got.Size != f.Size {
		t.Errorf("Lookup = %+v, want %+v", got, f)
	}
	b, err := os.ReadFile(got.Path)
	if err != nil || string(b) != "content" {
		t.Errorf("entry file = %q, %v; want content", b, err)
	}
	_, err = e.client.Lookup(context.Background(), "0000000000000000-1")
	if !errors.Is(err, cmroot.ErrNotFound) {
		t.Errorf("Lookup(missing) = %v, want cmroot.ErrNotFound", err)
	}
}

func TestServeStaleSocket(t *testing.T) {
	sock := filepath.Join(socketDir(t), "control.sock")
	// A socket file nobody listens on, as a killed mount leaves it.
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()

	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- NewServer(e.J, e.Store, Info{}).Serve(ctx, sock) }()
	waitSocket(t, sock)

	// A second server on a live socket is refused.
	if err := NewServer(e.J, e.Store, Info{}).Serve(context.Background(), sock); err == nil {
		t.Error("second Serve on a live socket succeeded")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left after Serve returned: %v", err)
	}
}

func TestServeNotSocket(t *testing.T) {
	path := filepath.Join(socketDir(t), "control.sock")
	if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t)
	if err := NewServer(e.J, e.Store, Info{}).Serve(context.Background(), path); err == nil {
		t.Error("Serve over a regular file succeeded")
	}
}

func TestServeStopsFollowers(t *testing.T) {
	e := newEnv(t)
	sock := filepath.Join(socketDir(t), "c.sock")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- NewServer(e.J, e.Store, Info{}).Serve(ctx, sock) }()
	waitSocket(t, sock)
	c, err := Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	followed := make(chan error, 1)
	attached := make(chan struct{})
	var once sync.Once
	go func() {
		followed <- c.Events(context.Background(), 1, 0, true, func(journal.Event) error {
			once.Do(func() { close(attached) })
			return nil
		})
	}()
	// An event through the stream: the follower is attached.
	e.Append(t, &journal.Event{Type: journal.Mkdir, Path: "d"})
	select {
	case <-attached:
	case <-time.After(5 * time.Second):
		t.Fatal("the follower saw no event")
	}
	start := time.Now()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Serve took %v to stop with a follower attached", d)
	}
	select {
	case <-followed:
	case <-time.After(5 * time.Second):
		t.Fatal("follower not ended by server shutdown")
	}
}

func TestDialNoSocket(t *testing.T) {
	_, err := Dial(filepath.Join(t.TempDir(), "none.sock"))
	if !errors.Is(err, ErrUnavailable) {
		t.Errorf("Dial(missing) = %v, want ErrUnavailable", err)
	}
}

func equal[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
