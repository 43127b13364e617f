package repl

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/journal"
)

func openCatalog(t *testing.T) *Catalog {
	t.Helper()
	c, err := OpenCatalog(filepath.Join(t.TempDir(), CatalogFile))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// catalogTree is the catalog's tree in the form snapshot gives a source's
// states: "dir", or "file:" and the size and xxh64 (the catalog has no
// content).
func catalogTree(t *testing.T, c *Catalog) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := c.Walk(context.Background(), func(e Entry) error {
		switch e.Kind {
		case EntryDir:
			m[e.Path] = "dir"
		case EntrySymlink:
			m[e.Path] = "link:" + e.Target
		default:
			m[e.Path] = fmt.Sprintf("file:%d:%s", e.Size, e.XXH64)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// summed turns a state's file contents into their size and xxh64, as a
// catalog holds them.
func summed(state map[string]string) map[string]string {
	m := map[string]string{}
	for p, v := range state {
		if content, ok := strings.CutPrefix(v, "file:"); ok {
			v = fmt.Sprintf("file:%d:%s", len(content), journal.Sum([]byte(content)))
		}
		m[p] = v
	}
	return m
}

// pinnedEvents is a journal whose Last says pin until the walk is done.
type pinnedEvents struct {
	*sliceEvents
	pin   uint64
	calls int
}

func (p *pinnedEvents) Last(ctx context.Context) (uint64, error) {
	if p.calls++; p.calls == 1 {
		return p.pin, nil
	}
	return p.sliceEvents.Last(ctx)
}

// TestCatalogModel keeps a catalog up to date through random operations,
// updating it at random events, and checks it against the source's
// recorded tree at each: the events applied to names and checksums give
// the tree the operations gave.
func TestCatalogModel(t *testing.T) {
	for seed := uint64(1); seed <= 8; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 7))
			s := modelSource(t, r, 200)
			c := openCatalog(t)
			ctx := context.Background()
			// Built on the empty tree, before the first event.
			if _, err := c.Update(ctx, &sliceEvents{}, LocalTree{Root: t.TempDir()}); err != nil {
				t.Fatal(err)
			}
			last := uint64(len(s.ev.events))
			for at := uint64(0); at < last; {
				at = min(last, at+1+uint64(r.IntN(30)))
				got, err := c.Update(ctx, &sliceEvents{events: s.ev.events[:at]}, nil)
				if err != nil {
					t.Fatal(err)
				}
				if got != at {
					t.Fatalf("Update returned %d, want %d", got, at)
				}
				if d := diffTrees(catalogTree(t, c), summed(s.states[at])); d != "" {
					t.Fatalf("catalog at event %d differs from the source:\n%s", at, d)
				}
			}
		})
	}
}

// TestCatalogRacedWalk builds catalogs from a walk of the final tree
// pinned at every earlier event, as when the events after the pin raced
// with the walk: applying them again must leave the final tree.
func TestCatalogRacedWalk(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 9))
	s := modelSource(t, r, 120)
	last := uint64(len(s.ev.events))
	want := summed(s.states[last])
	for pin := uint64(0); pin <= last; pin += 1 + uint64(r.IntN(6)) {
		c := openCatalog(t)
		c.walkBatch = 1 + int(pin%7) // the first walk commits in batches
		ev := &pinnedEvents{sliceEvents: &s.ev, pin: pin}
		at, err := c.Update(context.Background(), ev, LocalTree{Root: s.root})
		if err != nil {
			t.Fatalf("pin %d: %v", pin, err)
		}
		if at != last {
			t.Fatalf("pin %d: at %d, want %d", pin, at, last)
		}
		if d := diffTrees(catalogTree(t, c), want); d != "" {
			t.Fatalf("walk pinned at %d, events %d..%d applied again:\n%s", pin, pin+1, last, d)
		}
	}
}

// TestCatalogBootstrap dumps a BOOTSTRAP from a catalog at a past event
// while the tree has moved on, loads it, and checks the target is the
// tree as of that event exactly, then that incrementals continue it.
func TestCatalogBootstrap(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 11))
	s := modelSource(t, r, 160)
	last := uint64(len(s.ev.events))
	ctx := context.Background()
	c := openCatalog(t)
	if _, err := c.Update(ctx, &sliceEvents{}, LocalTree{Root: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	pin := last / 2
	out := filepath.Join(t.TempDir(), "bootstrap")
	res, err := Dump(ctx, &sliceEvents{events: s.ev.events[:pin]}, out, DumpOptions{Source: "src", Catalog: c})
	if err != nil {
		t.Fatal(err)
	}
	if res.To != pin {
		t.Fatalf("bootstrap pinned to %d, want %d", res.To, pin)
	}
	target := t.TempDir()
	f := s.fetcher()
	mustLoad(t, out, target, f)
	checkTarget(t, s, target, pin)
	mustLoad(t, mustDump(t, s, pin+1, last), target, f)
	checkTarget(t, s, target, last)
}

func TestCatalogRefuses(t *testing.T) {
	ctx := context.Background()
	c := openCatalog(t)
	if _, err := c.Update(ctx, &sliceEvents{}, nil); err == nil || !strings.Contains(err.Error(), "needs the tree") {
		t.Fatalf("first update without a tree: %v", err)
	}
	evs := []*journal.Event{{ID: 1, Type: journal.Mkdir, Path: "x", Time: time.Unix(1700000000, 0)}, {ID: 2, Type: journal.Mkdir, Path: "x/y"}}
	if _, err := c.Update(ctx, &sliceEvents{events: evs}, LocalTree{Root: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Update(ctx, &sliceEvents{events: evs[:1]}, nil); err == nil {
		t.Fatal("a journal shorter than the catalog was accepted")
	}
	bad := append(evs, &journal.Event{ID: 3, Type: journal.Mkdir, Path: "../out"})
	if _, err := c.Update(ctx, &sliceEvents{events: bad}, nil); err == nil {
		t.Fatal("an event naming ../out was applied")
	}
	if at, _, _ := c.At(); at != 2 {
		t.Fatalf("catalog at %d after a refused update, want 2", at)
	}
	// Another journal, longer than the first: its first event differs.
	other := []*journal.Event{
		{ID: 1, Type: journal.Mkdir, Path: "y", Time: evs[0].Time.Add(time.Hour)},
		{ID: 2, Type: journal.Mkdir, Path: "y/z"},
		{ID: 3, Type: journal.Mkdir, Path: "y/z/w"},
	}
	if _, err := c.Update(ctx, &sliceEvents{events: other}, nil); !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "another journal") {
		t.Fatalf("update from another journal: %v, want ErrMismatch naming it", err)
	}
	if at, _, _ := c.At(); at != 2 {
		t.Fatalf("catalog at %d after another journal was refused, want 2", at)
	}
}
