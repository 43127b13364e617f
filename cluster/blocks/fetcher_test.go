package blocks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/cluster"
	"github.com/cmfs-project/cmfs/container"
	"github.com/cmfs-project/cmfs/journal"
	"github.com/cmfs-project/cmfs/peer"
	"github.com/cmfs-project/cmfs/repl"
)

// fakeCluster is a coordinator's node list and the blocks on each node.
type fakeCluster struct {
	mu      sync.Mutex
	nodes   []Node
	down    bool                                    // the coordinator does not answer
	blocks  map[string]map[container.BlockID][]byte // by node address
	broken  map[string]error                        // a node's Get fails so
	slow    map[string]bool                         // a node's Get hangs until its context ends
	corrupt map[string]bool                         // a node's bytes end in ErrCorrupt
	asked   []string                                // the addresses asked, in order
	lists   int
}

func (c *fakeCluster) list(ctx context.Context) ([]Node, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lists++
	if c.down {
		return nil, errors.New("coordinator 127.0.0.1:1: cannot connect: connection refused")
	}
	return append([]Node(nil), c.nodes...), nil
}

func (c *fakeCluster) get(ctx context.Context, addr string, b container.BlockID) (io.ReadCloser, int64, error) {
	c.mu.Lock()
	c.asked = append(c.asked, addr)
	err, slow, corrupt := c.broken[addr], c.slow[addr], c.corrupt[addr]
	data, ok := c.blocks[addr][b]
	c.mu.Unlock()
	switch {
	case slow:
		<-ctx.Done()
		return nil, 0, fmt.Errorf("get %s: %w", b, peer.ErrUnavailable)
	case err != nil:
		return nil, 0, err
	case !ok:
		return nil, 0, fmt.Errorf("open block %s: %w", b, container.ErrBlockNotFound)
	case corrupt:
		return io.NopCloser(io.MultiReader(bytes.NewReader(data[:len(data)/2]), errReader{fmt.Errorf("get %s: %w", b, container.ErrCorrupt)})), b.Size, nil
	}
	return io.NopCloser(bytes.NewReader(data)), b.Size, nil
}

func (c *fakeCluster) takeAsked() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	a := c.asked
	c.asked = nil
	return a
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// newFake returns a Fetcher over c whose clock is *now.
func newFake(t *testing.T, c *fakeCluster, now *time.Time) *Fetcher {
	t.Helper()
	f, err := New(Config{
		Coordinators: []string{"127.0.0.1:1"},
		Dial:         func(context.Context, string) (*peer.Client, error) { return nil, errors.New("no dialing in tests") },
		AskTimeout:   200 * time.Millisecond,
		Now:          func() time.Time { return *now },
	})
	if err != nil {
		t.Fatal(err)
	}
	f.list, f.get = c.list, c.get
	t.Cleanup(func() { f.Close() })
	return f
}

func fileOf(path string, data []byte) (journal.File, container.BlockID) {
	return journal.File{Path: path, Size: int64(len(data)), XXH64: journal.Sum(data)}, container.BlockIDOf(data)
}

func read(t *testing.T, f *Fetcher, jf journal.File) ([]byte, error) {
	t.Helper()
	rc, err := f.Fetch(context.Background(), jf)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

func TestFetchAsksNodesInTurn(t *testing.T) {
	data := []byte("the content of s.db/t/part-0")
	jf, b := fileOf("s.db/t/part-0", data)
	c := &fakeCluster{
		nodes: []Node{
			{ID: "dn4", Addr: "a4", Health: cluster.Stale},
			{ID: "dn3", Addr: "a3", Health: cluster.Dead},
			{ID: "dn2", Addr: "a2", Health: cluster.Healthy},
			{ID: "dn1", Addr: "a1", Health: cluster.Healthy},
			{ID: "dn5", Health: cluster.Healthy}, // no address
		},
		blocks: map[string]map[container.BlockID][]byte{"a2": {b: data}, "a3": {b: data}, "a4": {b: data}},
	}
	now := time.Now()
	f := newFake(t, c, &now)
	got, err := read(t, f, jf)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("got %q, %v; want %q", got, err, data)
	}
	if a := c.takeAsked(); strings.Join(a, " ") != "a1 a2" {
		t.Errorf("asked %v, want a1 (healthy, first by id, without the block) then a2", a)
	}
	// The node that served last is asked first.
	if _, err := read(t, f, jf); err != nil {
		t.Fatal(err)
	}
	if a := c.takeAsked(); strings.Join(a, " ") != "a2" {
		t.Errorf("second fetch asked %v, want a2 (served last) alone", a)
	}
	if c.lists != 1 {
		t.Errorf("the coordinator was asked %d times within Refresh, want 1", c.lists)
	}
	// A stale node is asked after the healthy ones, a dead one never.
	c.blocks = map[string]map[container.BlockID][]byte{"a3": {b: data}, "a4": {b: data}}
	if _, err := read(t, f, jf); err != nil {
		t.Fatal(err)
	}
	if a := c.takeAsked(); strings.Join(a, " ") != "a2 a1 a4" {
		t.Errorf("asked %v, want a2 a1 a4 (the dead a3 never)", a)
	}
}

func TestFetchNoCopy(t *testing.T) {
	jf, _ := fileOf("s.db/t/gone", []byte("nowhere"))
	tests := []struct {
		name     string
		broken   map[string]error
		slow     map[string]bool
		isNoCopy bool
		msgHas   []string
	}{
		{name: "no node has it", isNoCopy: true, msgHas: []string{"s.db/t/gone", "none of the cluster's nodes", "dn1, dn2"}},
		{name: "a node could not be asked", broken: map[string]error{"a2": fmt.Errorf("cannot connect: %w", peer.ErrUnavailable)},
			msgHas: []string{"not on dn1", "dn2 could not be asked", "cannot connect"}},
		{name: "a node does not answer", slow: map[string]bool{"a1": true},
			msgHas: []string{"not on dn2", "dn1 could not be asked", "no answer within"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &fakeCluster{
				nodes:  []Node{{ID: "dn1", Addr: "a1"}, {ID: "dn2", Addr: "a2"}},
				broken: tt.broken, slow: tt.slow,
			}
			now := time.Now()
			_, err := read(t, newFake(t, c, &now), jf)
			if err == nil {
				t.Fatal("fetched content no node holds")
			}
			if got := errors.Is(err, repl.ErrNoCopy); got != tt.isNoCopy {
				t.Errorf("errors.Is(%v, ErrNoCopy) = %v, want %v", err, got, tt.isNoCopy)
			}
			for _, s := range tt.msgHas {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("%q does not say %q", err, s)
				}
			}
		})
	}
}

func TestFetchCorruptGoesElsewhere(t *testing.T) {
	data := bytes.Repeat([]byte("block "), 100)
	jf, b := fileOf("p", data)
	c := &fakeCluster{
		nodes:   []Node{{ID: "dn1", Addr: "a1"}, {ID: "dn2", Addr: "a2"}},
		blocks:  map[string]map[container.BlockID][]byte{"a1": {b: data}, "a2": {b: data}},
		corrupt: map[string]bool{"a1": true},
	}
	now := time.Now()
	f := newFake(t, c, &now)
	if _, err := read(t, f, jf); !errors.Is(err, repl.ErrChecksum) {
		t.Fatalf("corrupt bytes: got %v, want ErrChecksum (the loader asks again)", err)
	}
	got, err := read(t, f, jf)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the retry: %d bytes, %v", len(got), err)
	}
	if a := c.takeAsked(); strings.Join(a, " ") != "a1 a2" {
		t.Errorf("asked %v, want a1 (corrupt) then a2 alone", a)
	}
}

func TestFetchCoordinator(t *testing.T) {
	data := []byte("x")
	jf, b := fileOf("p", data)
	c := &fakeCluster{nodes: []Node{{ID: "dn1", Addr: "a1"}}, blocks: map[string]map[container.BlockID][]byte{"a1": {b: data}}, down: true}
	now := time.Now()
	f := newFake(t, c, &now)
	if _, err := read(t, f, jf); err == nil || errors.Is(err, repl.ErrNoCopy) || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("coordinator down, no list known: got %v, want its error, not ErrNoCopy", err)
	}
	c.down = false
	if _, err := read(t, f, jf); err != nil {
		t.Fatal(err)
	}
	// Past Refresh the list is asked for again; a coordinator gone by
	// then leaves the last list in use.
	c.down = true
	now = now.Add(DefaultRefresh + time.Second)
	if _, err := read(t, f, jf); err != nil {
		t.Fatalf("coordinator gone, list known: %v", err)
	}
	if c.lists != 3 {
		t.Errorf("the coordinator was asked %d times, want 3", c.lists)
	}
	// An empty file needs no one.
	empty := journal.File{Path: "e", Size: 0, XXH64: journal.Sum(nil)}
	c.takeAsked()
	if got, err := read(t, f, empty); err != nil || len(got) != 0 || len(c.takeAsked()) != 0 {
		t.Errorf("empty file: %q, %v", got, err)
	}
}
