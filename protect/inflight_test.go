package protect

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cmfs-project/cmfs/cmroot"
	"github.com/cmfs-project/cmfs/internal/statedir"
	"github.com/cmfs-project/cmfs/journal"
)

func TestInflightTable(t *testing.T) {
	p := filepath.Join(t.TempDir(), statedir.InflightFile)
	tab, left, _, err := openInflight(p)
	if err != nil || len(left) != 0 {
		t.Fatalf("fresh table: %v, %d left", err, len(left))
	}
	a, _ := tab.begin(&intent{Type: journal.Delete, Path: "a"})
	b, _ := tab.begin(&intent{Type: journal.Mkdir, Path: "b"})
	tab.update(a, &intent{Type: journal.Delete, Path: "a", Orig: &journal.File{Path: "a", Size: 1, XXH64: "0123456789abcdef", CM: "0123456789abcdef-1"}})
	tab.end(b)
	if c, _ := tab.begin(&intent{Type: journal.Rmdir, Path: "c"}); c != b {
		t.Errorf("a freed slot is not reused: got %d, want %d", c, b)
	}
	tab.close() // as a dead mount leaves it: a and c in flight

	tab, left, _, err = openInflight(p)
	if err != nil {
		t.Fatal(err)
	}
	defer tab.close()
	if len(left) != 2 || left[0].Path != "a" || left[0].Orig == nil || left[0].Orig.CM != "0123456789abcdef-1" || left[1].Path != "c" {
		t.Fatalf("left = %+v, want the updated a and c", left)
	}
	if _, again, _, _ := openInflight(p); len(again) != 0 {
		t.Errorf("a table read once still holds %d intents", len(again))
	}
}

func TestRecover(t *testing.T) {
	dir := t.TempDir()
	backing := filepath.Join(dir, "backing")
	for _, d := range []string{backing, filepath.Join(backing, "s.db/t/p=1"), filepath.Join(backing, "made")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	j, err := journal.Open(filepath.Join(dir, "journal.db"), journal.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	cm, err := cmroot.Open(filepath.Join(dir, "cmroot"), cmroot.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer cm.Close()
	c := &Core{backing: backing, fs: openTree(t, backing), cm: cm, log: j}

	write := func(rel, content string) {
		if err := os.WriteFile(filepath.Join(backing, rel), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A delete that happened: the original moved into cmroot, no event.
	write("s.db/t/p=1/gone", "old bytes")
	gone, err := c.preserve("s.db/t/p=1/gone", byMove)
	if err != nil {
		t.Fatal(err)
	}
	gone.Path = "s.db/t/p=1/gone"
	// A delete that did not happen: the file is still there.
	write("kept", "still here")
	// A write that happened, and one that did not.
	write("s.db/t/p=1/written", "new content")
	write("same", "unchanged")
	// A directory made, and one whose event was journaled before the kill.
	if err := j.Append(context.Background(), &journal.Event{Type: journal.Mkdir, Path: "made"}); err != nil {
		t.Fatal(err)
	}

	n, err := c.recover(context.Background(), []intent{
		{Type: journal.Delete, Path: "s.db/t/p=1/gone", Orig: &gone.File},
		{Type: journal.Delete, Path: "kept"},
		{Type: journal.Write, Path: "s.db/t/p=1/written", Base: journal.Sum([]byte("old"))},
		{Type: journal.Write, Path: "same", Base: journal.Sum([]byte("unchanged"))},
		{Type: journal.Mkdir, Path: "made"},
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []*journal.Event
	j.Range(2, 0, func(e *journal.Event) error { got = append(got, e); return nil })
	if len(n) != 2 || len(got) != 2 {
		t.Fatalf("recovered %d events: %+v; want the delete and the write", len(n), got)
	}
	if e := got[0]; e.Type != journal.Delete || e.Path != "s.db/t/p=1/gone" || len(e.Files) != 1 || e.Files[0].CM != gone.CM || e.Partition != "p=1" {
		t.Errorf("recovered delete = %+v", e)
	}
	if e := got[1]; e.Type != journal.Insert || len(e.Files) != 1 || e.Files[0].XXH64 != journal.Sum([]byte("new content")) {
		t.Errorf("recovered write = %+v", e)
	}
	if err := j.Verify(); err != nil {
		t.Error(err)
	}
}

func TestInflightTableDamaged(t *testing.T) {
	p := filepath.Join(t.TempDir(), statedir.InflightFile)
	tab, _, _, err := openInflight(p)
	if err != nil {
		t.Fatal(err)
	}
	tab.begin(&intent{Type: journal.Delete, Path: "kept"})
	b, _ := tab.begin(&intent{Type: journal.Delete, Path: "garbled"})
	c, _ := tab.begin(&intent{Type: journal.Delete, Path: "too long"})
	tab.close()
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte("{{{{"), int64(b)*slotSize+4)         // not JSON any more
	f.WriteAt([]byte{0xff, 0xff, 0, 0}, int64(c)*slotSize) // a size past the slot
	f.Close()

	tab, left, damaged, err := openInflight(p)
	if err != nil {
		t.Fatal(err)
	}
	defer tab.close()
	if len(left) != 1 || left[0].Path != "kept" || damaged != 2 {
		t.Errorf("left %+v, %d damaged; want kept and 2 damaged", left, damaged)
	}
	want := "in-flight table /s/inflight: 2 damaged record(s) ignored"
	if got := (Recovery{Damaged: 2}).Findings("/s"); !strings.Contains(got, want) {
		t.Errorf("Findings = %q, want it to say %q", got, want)
	}
}

// TestInFlight: the core counts the intents its table holds: a write
// handle's from its open to its release, none once every change is done.
func TestInFlight(t *testing.T) {
	h := openHarness(t, t.TempDir())
	defer h.close(t)
	if n := h.core.InFlight(); n != 0 {
		t.Fatalf("a fresh mount has %d intents in flight", n)
	}
	a, err := h.core.Create(ctx, "a", uint32(os.O_WRONLY), 0o644, Caller{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.File().Close()
	b, err := h.core.Create(ctx, "b", uint32(os.O_WRONLY), 0o644, Caller{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.File().Close()
	if n := h.core.InFlight(); n != 2 {
		t.Errorf("two write handles open: %d intents in flight, want 2", n)
	}
	for _, hd := range []struct {
		h   *Handle
		rel string
	}{{a, "a"}, {b, "b"}} {
		if err := hd.h.Flush(ctx, hd.rel, true); err != nil {
			t.Fatal(err)
		}
		hd.h.Release()
	}
	if err := h.core.Unlink(ctx, "a", Use{}); err != nil {
		t.Fatal(err)
	}
	if n := h.core.InFlight(); n != 0 {
		t.Errorf("every handle released, the unlink done: %d intents in flight, want 0", n)
	}
}
