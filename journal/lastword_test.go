package journal

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestReplay(t *testing.T) {
	file := func(p string, size int64, sum string) File { return File{Path: p, Size: size, XXH64: sum} }
	orig := func(p string) File {
		return File{Path: p, Size: 1, XXH64: "0000000000000001", CM: "0000000000000001-1"}
	}
	for _, tc := range []struct {
		name   string
		events []Event
		want   map[string]LastWord
	}{
		{"insert then truncate", []Event{
			{Type: Insert, Path: "d.db/t/a", Files: []File{file("d.db/t/a", 3, "aa")}},
			{Type: Truncate, Path: "d.db/t/a", Files: []File{file("d.db/t/a", 0, "ef"), orig("d.db/t/a")}},
		}, map[string]LastWord{"d.db/t/a": {Size: 0, XXH64: "ef"}}},
		{"delete", []Event{
			{Type: Write, Path: "x", Files: []File{file("x", 1, "11")}},
			{Type: Delete, Path: "x", Files: []File{orig("x")}},
		}, map[string]LastWord{}},
		{"rename over", []Event{
			{Type: Write, Path: "a", Files: []File{file("a", 1, "aa")}},
			{Type: Write, Path: "b", Files: []File{file("b", 2, "bb")}},
			{Type: Rename, Path: "a", NewPath: "b", Files: []File{file("b", 1, "aa"), orig("b")}},
		}, map[string]LastWord{"b": {Size: 1, XXH64: "aa"}}},
		{"directory rename moves what is below", []Event{
			{Type: Insert, Path: "d.db/t/p=1/f", Files: []File{file("d.db/t/p=1/f", 1, "ff")}},
			{Type: Symlink, Path: "d.db/t/p=1/l", Target: "f"},
			{Type: RenamePartition, Path: "d.db/t/p=1", NewPath: "d.db/t/p=2"},
		}, map[string]LastWord{"d.db/t/p=2/f": {Size: 1, XXH64: "ff"}, "d.db/t/p=2/l": {Symlink: true, Target: "f"}}},
		{"exchange swaps", []Event{
			{Type: Write, Path: "a", Files: []File{file("a", 1, "aa")}},
			{Type: Write, Path: "b", Files: []File{file("b", 2, "bb")}},
			{Type: Rename, Path: "a", NewPath: "b", Target: "exchange"},
		}, map[string]LastWord{"a": {Size: 2, XXH64: "bb"}, "b": {Size: 1, XXH64: "aa"}}},
		{"drop partition removes what is below, not a sibling prefix", []Event{
			{Type: Insert, Path: "d.db/t/p=1/f", Files: []File{file("d.db/t/p=1/f", 1, "ff")}},
			{Type: Insert, Path: "d.db/t/p=10/f", Files: []File{file("d.db/t/p=10/f", 1, "ff")}},
			{Type: DropPartition, Path: "d.db/t/p=1"},
		}, map[string]LastWord{"d.db/t/p=10/f": {Size: 1, XXH64: "ff"}}},
		{"link names the new path", []Event{
			{Type: Write, Path: "a", Files: []File{file("a", 1, "aa")}},
			{Type: Link, Path: "a", NewPath: "b", Files: []File{file("b", 1, "aa")}},
		}, map[string]LastWord{"a": {Size: 1, XXH64: "aa"}, "b": {Size: 1, XXH64: "aa"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Replay(tc.events); !maps.Equal(got, tc.want) {
				t.Errorf("Replay = %v, want %v", got, tc.want)
			}
		})
	}
}

// naiveReplay is Replay as it was first written, every removal a look at
// every word: the reference the Replayer is checked against.
func naiveReplay(events []Event) map[string]LastWord {
	tr := map[string]LastWord{}
	below := func(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }
	take := func(dir string) map[string]LastWord {
		moved := map[string]LastWord{}
		for p, w := range tr {
			if below(p, dir) {
				moved[strings.TrimPrefix(p, dir)] = w
				delete(tr, p)
			}
		}
		return moved
	}
	put := func(dir string, moved map[string]LastWord) {
		for suffix, w := range moved {
			tr[dir+suffix] = w
		}
	}
	for _, e := range events {
		switch e.Type {
		case Delete, Rmdir, DropPartition, DropTable, DropDatabase:
			take(e.Path)
			continue
		case Rename, RenameTable, RenamePartition, RenameDatabase:
			a, b := take(e.Path), take(e.NewPath)
			put(e.NewPath, a)
			if e.Target == "exchange" {
				put(e.Path, b)
			}
		case Symlink:
			tr[e.Path] = LastWord{Symlink: true, Target: e.Target}
		}
		for _, f := range e.Files {
			if f.CM == "" {
				tr[f.Path] = LastWord{Size: f.Size, XXH64: f.XXH64}
			}
		}
	}
	return tr
}

// TestReplayerRandom folds random events over a small set of nested
// paths and checks every prefix against naiveReplay.
func TestReplayerRandom(t *testing.T) {
	paths := []string{"a", "a/b", "a/b/c", "a/b/d", "a/e", "ab", "ab/c", "x", "x/a", "x/a/b"}
	types := []Type{Write, Insert, Delete, Rmdir, DropPartition, Rename, RenamePartition, Symlink, Link, Truncate}
	rng := rand.New(rand.NewPCG(1, 2))
	for run := 0; run < 200; run++ {
		var events []Event
		r := NewReplayer()
		for i := 0; i < 60; i++ {
			e := Event{Type: types[rng.IntN(len(types))], Path: paths[rng.IntN(len(paths))]}
			switch e.Type {
			case Rename, RenamePartition, Link:
				e.NewPath = paths[rng.IntN(len(paths))]
				if rng.IntN(4) == 0 {
					e.Target = "exchange"
				}
			case Symlink:
				e.Target = fmt.Sprint(i)
			}
			if e.Type != Delete && e.Type != Rmdir && e.Type != DropPartition && e.Type != Symlink {
				to := e.Path
				if e.NewPath != "" {
					to = e.NewPath
				}
				e.Files = []File{{Path: to, Size: int64(i), XXH64: fmt.Sprintf("%016x", i)}}
			}
			events = append(events, e)
			r.Apply(&events[len(events)-1])
			if got, want := r.Words(), naiveReplay(events); !maps.Equal(got, want) {
				t.Fatalf("run %d after %d events (last %+v): Replayer %v, want %v", run, len(events), e, got, want)
			}
		}
		if got, want := Replay(events), naiveReplay(events); !maps.Equal(got, want) {
			t.Fatalf("run %d: Replay %v, want %v", run, got, want)
		}
	}
}
