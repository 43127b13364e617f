package journal

import (
	"maps"
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
