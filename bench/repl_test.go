package bench

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/journal"
	"github.com/cmfs-project/cmfs/repl"
)

func TestReplRowRatioAndTarget(t *testing.T) {
	tests := []struct {
		name      string
		row       ReplRow
		wantRatio float64
		wantMet   bool
	}{
		{"throughput", ReplRow{Higher: true, Baseline: "b", Runs: []float64{200}, BaseRuns: []float64{100}}, 2, false},
		{"time within 2×", ReplRow{Baseline: "b", Runs: []float64{1.9}, BaseRuns: []float64{1}, Target: ReplTarget{MinRatio: 0.5}}, 1 / 1.9, true},
		{"time over 2×", ReplRow{Baseline: "b", Runs: []float64{2.5}, BaseRuns: []float64{1}, Target: ReplTarget{MinRatio: 0.5}}, 0.4, false},
		{"median of runs", ReplRow{Baseline: "b", Runs: []float64{1, 9, 2}, BaseRuns: []float64{2, 2, 100}, Target: ReplTarget{MinRatio: 0.9}}, 1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := tt.row.Ratio()
			if !ok || got != tt.wantRatio {
				t.Errorf("Ratio() = %v, %v; want %v, true", got, ok, tt.wantRatio)
			}
			met, ok := tt.row.Met()
			hasTarget := tt.row.Target.MinRatio > 0
			if ok != hasTarget || met != tt.wantMet {
				t.Errorf("Met() = %v, %v; want %v, %v", met, ok, tt.wantMet, hasTarget)
			}
		})
	}
}

func TestReplRowMaxValue(t *testing.T) {
	exact := &ReplRow{Unit: "B/B", Target: ReplTarget{MaxValue: 1}}
	exact.Add(float64(1<<30) / float64(1<<30))
	if met, ok := exact.Met(); !met || !ok {
		t.Errorf("1.0 bytes per byte against ≤ 1.0: Met() = %v, %v; want true, true", met, ok)
	}
	over := &ReplRow{Unit: "ms", Target: ReplTarget{MaxValue: 1000}}
	over.Add(1200)
	if met, ok := over.Met(); met || !ok {
		t.Errorf("1200 ms against ≤ 1000 ms: Met() = %v, %v; want false, true", met, ok)
	}
	failed := &ReplRow{Unit: "ms", Target: ReplTarget{MaxValue: 1000}}
	failed.Add(10)
	failed.Fail(os.ErrNotExist)
	if _, ok := failed.Met(); ok {
		t.Error("Met() of a failed row: ok = true, want false")
	}
	if _, ok := failed.Ratio(); ok {
		t.Error("Ratio() without a baseline: ok = true, want false")
	}
}

func TestReplTableMarkdown(t *testing.T) {
	row := &ReplRow{Name: "bootstrap", Unit: "s", Baseline: "find -type f | wc -l", Target: ReplTarget{MinRatio: 0.5, Text: "≤ 2× find"}}
	row.Add(4)
	row.AddBase(1)
	none := &ReplRow{Name: "bytes", Unit: "B/B", Target: ReplTarget{MaxValue: 1, Text: "1.0"}}
	none.Fail(os.ErrNotExist)
	tbl := &ReplTable{Subject: "replicad", Rows: []*ReplRow{row, none}}
	var b bytes.Buffer
	if err := tbl.WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("got %d lines, want 4:\n%s", len(lines), b.String())
	}
	for _, l := range lines {
		if got := strings.Count(strings.ReplaceAll(l, `\|`, ""), "|"); got != 8 {
			t.Errorf("%q: %d cell separators, want 8", l, got)
		}
	}
	if want := "| bootstrap | s | 4.00 | find -type f \\| wc -l | 1.00 | 0.25 | ≤ 2× find MISS |"; lines[2] != want {
		t.Errorf("row = %q\nwant  %q", lines[2], want)
	}
	if !strings.Contains(lines[3], "n/a") || !strings.Contains(lines[3], "1.0 n/a") {
		t.Errorf("failed row = %q, want n/a for the value and the target", lines[3])
	}
}

func TestPercentile(t *testing.T) {
	var d []time.Duration
	for i := 100; i >= 1; i-- {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	tests := []struct {
		p    float64
		want time.Duration
	}{{50, 50 * time.Millisecond}, {99, 99 * time.Millisecond}, {100, 100 * time.Millisecond}, {0.1, time.Millisecond}}
	for _, tt := range tests {
		if got := Percentile(d, tt.p); got != tt.want {
			t.Errorf("Percentile(1..100 ms, %v) = %v, want %v", tt.p, got, tt.want)
		}
	}
	if d[0] != 100*time.Millisecond {
		t.Error("Percentile sorted its argument")
	}
	if got := Percentile(nil, 50); got != 0 {
		t.Errorf("Percentile(nil) = %v, want 0", got)
	}
}

// TestDumpFloorMatchesDump checks that the baseline of the dump row writes
// what repl.Dump writes for every event, byte for byte.
func TestDumpFloorMatchesDump(t *testing.T) {
	dir := t.TempDir()
	l, err := journal.Open(filepath.Join(dir, "journal.db"), journal.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	const n = 50
	if err := FillJournal(context.Background(), l, SyntheticEvents(n), 16); err != nil {
		t.Fatal(err)
	}
	var stored []*journal.Event
	if err := l.Range(1, n, func(e *journal.Event) error { stored = append(stored, e); return nil }); err != nil {
		t.Fatal(err)
	}
	dump, floor := filepath.Join(dir, "dump"), filepath.Join(dir, "floor")
	if _, err := repl.Dump(context.Background(), repl.JournalEvents(l), dump, repl.DumpOptions{From: 1, Source: "test"}); err != nil {
		t.Fatal(err)
	}
	if _, err := DumpFloor(floor, stored); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(floor)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != n {
		t.Fatalf("floor wrote %d entries, want %d", len(entries), n)
	}
	for _, e := range entries {
		for _, f := range []string{"_metadata", "_files"} {
			got, err := os.ReadFile(filepath.Join(floor, e.Name(), f))
			if err != nil {
				t.Fatal(err)
			}
			want, err := os.ReadFile(filepath.Join(dump, e.Name(), f))
			if err != nil {
				t.Fatalf("repl.Dump wrote no %s/%s: %v", e.Name(), f, err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s/%s: floor wrote %q, repl.Dump %q", e.Name(), f, got, want)
			}
		}
	}
}

func TestTreeCreate(t *testing.T) {
	tree := Tree{Dir: t.TempDir(), Files: 30, Partitions: 4, Size: 64}
	if err := tree.Create(context.Background(), 3); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for i := range tree.Files {
		b, err := os.ReadFile(tree.Path(i))
		if err != nil {
			t.Fatal(err)
		}
		if len(b) != tree.Size {
			t.Errorf("%s: %d bytes, want %d", tree.Path(i), len(b), tree.Size)
		}
		if seen[string(b)] {
			t.Errorf("%s: content repeats another file's", tree.Path(i))
		}
		seen[string(b)] = true
	}
	parts, err := os.ReadDir(filepath.Join(tree.Dir, "sales.db", "events"))
	if err != nil || len(parts) != tree.Partitions {
		t.Errorf("partitions: %d (%v), want %d", len(parts), err, tree.Partitions)
	}
}
