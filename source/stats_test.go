package source

import (
	"context"
	"errors"
	"net"
	"reflect"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/cmfs-project/cmfs/internal/auth"
	"github.com/cmfs-project/cmfs/journal"
)

// requests is st.Requests as "Method Code" → count.
func requests(st ServerStats) map[string]uint64 {
	m := map[string]uint64{}
	for _, r := range st.Requests {
		m[r.Method+" "+r.Code.String()] = r.N
	}
	return m
}

// load runs, through c: two fetches (one file found, one not), a read of
// the events, and a status call. It returns the bytes fetched.
func load(t *testing.T, s *testSource, c *Client) int {
	t.Helper()
	data := randomBytes(3<<20/2, 1) // two chunks
	f := s.write(t, "db.db/t/part-0", data)
	if got, err := fetch(t, c, f); err != nil || len(got) != len(data) {
		t.Fatalf("fetch: %d bytes, %v; want %d", len(got), err, len(data))
	}
	if _, err := fetch(t, c, fileOf("db.db/t/missing", []byte("gone"))); !errors.Is(err, ErrNotFound) {
		t.Fatalf("fetch of a missing file: %v, want ErrNotFound", err)
	}
	if err := c.Range(context.Background(), 1, 0, func(*journal.Event) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Status(context.Background()); err != nil {
		t.Fatal(err)
	}
	return len(data)
}

// TestServerStats: the calls are counted by method and code, from the
// start with an OK entry for each method; the events, files and bytes
// sent are counted; a call the credentials check refuses is not.
func TestServerStats(t *testing.T) {
	s := newSource(t, Config{})
	zero := requests(s.srv.Stats())
	for _, m := range []string{"ReadFile", "Events", "Status", "Confirm", "Slots", "DropSlot"} {
		if n, ok := zero[m+" OK"]; !ok || n != 0 {
			t.Errorf("%s OK before any call: %d (present %v), want 0", m, n, ok)
		}
	}
	if len(zero) != 6 {
		t.Errorf("requests before any call: %v, want one OK entry for each of the 6 methods", zero)
	}

	appendEvents(t, s.state, mkdirs(1, 3)...)
	n := load(t, s, s.c)
	bad, err := Dial(context.Background(), s.c.conn.Target(), WithToken("fedcba9876543210fedcba9876543210"))
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	if _, err := bad.Status(context.Background()); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("status with a wrong token: %v", err)
	}

	st := s.srv.Stats()
	want := map[string]uint64{"ReadFile OK": 1, "ReadFile NotFound": 1, "Events OK": 1, "Status OK": 1, "Confirm OK": 0, "Slots OK": 0, "DropSlot OK": 0}
	if got := requests(st); !reflect.DeepEqual(got, want) {
		t.Errorf("requests %v, want %v", got, want)
	}
	if st.Events != 3 || st.Files != 1 || st.Bytes != uint64(n) {
		t.Errorf("sent %d events, %d files, %d bytes; want 3, 1, %d", st.Events, st.Files, st.Bytes, n)
	}
}

// TestServerStatsRegistered: registered on another gRPC server (a
// node's), the service counts its calls the same, below that server's
// credentials check.
func TestServerStatsRegistered(t *testing.T) {
	s := newSource(t, Config{}) // for its warehouse and helpers
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	other, err := NewServer(Config{Backing: s.backing})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	g := grpc.NewServer(auth.ServerOptions(testToken)...)
	other.Register(ctx, g)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(lis)
	defer g.Stop()
	c, err := Dial(ctx, lis.Addr().String(), WithToken(testToken))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	n := load(t, s, c)
	bad, err := Dial(ctx, lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	if err := bad.Range(ctx, 1, 0, func(*journal.Event) error { return nil }); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("events without a token: %v", err)
	}
	st := other.Stats()
	got := requests(st)
	for k, v := range map[string]uint64{"ReadFile OK": 1, "ReadFile NotFound": 1, "Events OK": 1, "Status OK": 1} {
		if got[k] != v {
			t.Errorf("%s: %d, want %d (all: %v)", k, got[k], v, got)
		}
	}
	if _, ok := got["Events "+codes.Unauthenticated.String()]; ok {
		t.Errorf("a refused call was counted: %v", got)
	}
	if st.Files != 1 || st.Bytes != uint64(n) {
		t.Errorf("sent %d files, %d bytes; want 1, %d", st.Files, st.Bytes, n)
	}
	if st := s.srv.Stats(); st.Files != 0 {
		t.Errorf("the other server counted %d files sent", st.Files)
	}
}
