package repl

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/cmfs-project/cmfs/journal"
)

// buildSource makes a small history: a table with two partitions, inserts,
// an overwrite, a delete.
func buildSource(t *testing.T) *source {
	s := newSource(t)
	s.mkdir("d.db")                        // 1
	s.mkdir("d.db/t")                      // 2
	s.mkdir("d.db/t/p=1")                  // 3
	s.write("d.db/t/p=1/f#1", "one")       // 4
	s.write("d.db/t/p=1/f#1", "uno")       // 5
	s.mkdir("d.db/t/p=2")                  // 6
	s.write("d.db/t/p=2/g", "two")         // 7
	s.del("d.db/t/p=1/f#1")                // 8
	s.write("top level\nname", "outside!") // 9
	return s
}

func TestIncrementalDumpLayout(t *testing.T) {
	s := buildSource(t)
	out := mustDump(t, s, 3, 9)
	md, err := ReadMetadata(out)
	if err != nil {
		t.Fatal(err)
	}
	if md.Kind != Incremental || md.From != 3 || md.To != 9 || md.Source != "src" || md.Version != FormatVersion || md.Created.IsZero() {
		t.Fatalf("metadata: %+v", md)
	}
	fin, err := ReadFinished(out)
	if err != nil || fin.To != 9 {
		t.Fatalf("finished: %+v, %v", fin, err)
	}
	ents, _ := os.ReadDir(out)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	want := []string{"00000000000000000003", "00000000000000000004", "00000000000000000005", "00000000000000000006",
		"00000000000000000007", "00000000000000000008", "00000000000000000009", "_dumpmetadata", "_finished_dump"}
	if !reflect.DeepEqual(names, want) {
		t.Fatalf("dump entries:\n got %q\nwant %q", names, want)
	}
	// _metadata is the event as encoding/json writes it.
	b, _ := os.ReadFile(filepath.Join(out, EventDirName(5), "_metadata"))
	wantJSON, _ := json.Marshal(s.ev.events[4])
	if strings.TrimSpace(string(b)) != string(wantJSON) {
		t.Fatalf("_metadata:\n got %s\nwant %s", b, wantJSON)
	}
	// _files lists the new content only, not the preserved original.
	files, err := ReadFiles(filepath.Join(out, EventDirName(5), "_files"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 1 || files[0].Path != "d.db/t/p=1/f#1" || files[0].CM != "" || files[0].XXH64 != journal.Sum([]byte("uno")) {
		t.Fatalf("_files of the overwrite: %+v", files)
	}
	raw, _ := os.ReadFile(filepath.Join(out, EventDirName(9), "_files"))
	if want := "top level%0Aname#8#" + journal.Sum([]byte("outside!")) + "#\n"; string(raw) != want {
		t.Fatalf("_files of event 9: got %q, want %q", raw, want)
	}
	if files, _ := ReadFiles(filepath.Join(out, EventDirName(8), "_files")); len(files) != 0 {
		t.Fatalf("a DELETE adds nothing, got %+v", files)
	}
}

func TestDumpFilters(t *testing.T) {
	s := buildSource(t)
	out := filepath.Join(t.TempDir(), "d")
	res, err := Dump(context.Background(), &s.ev, out, DumpOptions{From: 1, DB: "d", Table: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if res.To != 9 || res.Events != 7 { // 1 (the database) and 9 (outside) are left out
		t.Fatalf("filtered dump: %+v", res)
	}
	if _, err := os.Stat(filepath.Join(out, EventDirName(9))); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("event 9 (outside the table) dumped: %v", err)
	}
}

func TestDumpErrors(t *testing.T) {
	s := buildSource(t)
	ctx := context.Background()
	if _, err := Dump(ctx, &s.ev, filepath.Join(t.TempDir(), "x"), DumpOptions{From: 10}); !errors.Is(err, ErrNoEvents) {
		t.Fatalf("from past the end: got %v, want ErrNoEvents", err)
	}
	if _, err := Dump(ctx, &s.ev, filepath.Join(t.TempDir(), "x"), DumpOptions{From: 2, To: 12}); !errors.Is(err, ErrNoEvents) {
		t.Fatalf("to past the end: got %v, want ErrNoEvents", err)
	}
	busy := t.TempDir()
	os.WriteFile(filepath.Join(busy, "something"), nil, 0o644)
	if _, err := Dump(ctx, &s.ev, busy, DumpOptions{From: 2}); !errors.Is(err, ErrMismatch) {
		t.Fatalf("into a non-empty directory: got %v, want ErrMismatch", err)
	}
	out := mustDump(t, s, 2, 5)
	if _, err := Dump(ctx, &s.ev, out, DumpOptions{From: 3, Source: "src"}); !errors.Is(err, ErrMismatch) {
		t.Fatalf("another range into a dump: got %v, want ErrMismatch", err)
	}
	// The same dump again is the finished one, untouched.
	res, err := Dump(ctx, &s.ev, out, DumpOptions{From: 2, To: 5, Source: "src"})
	if err != nil || res.To != 5 || res.Events != 0 {
		t.Fatalf("rerun of a finished dump: %+v, %v", res, err)
	}
}

// An interrupted dump has _dumpmetadata but no _finished_dump; a rerun
// resumes and ends with exactly what an uninterrupted dump writes.
func TestDumpResume(t *testing.T) {
	for _, filtered := range []bool{false, true} {
		t.Run(map[bool]string{false: "all", true: "filtered"}[filtered], func(t *testing.T) {
			s := buildSource(t)
			opts := DumpOptions{From: 2, Source: "src"}
			if filtered {
				opts.DB = "d"
			}
			ref := filepath.Join(t.TempDir(), "ref")
			if _, err := Dump(context.Background(), &s.ev, ref, opts); err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(t.TempDir(), "dump")
			dying := &sliceEvents{events: s.ev.events, failAfter: 4}
			if _, err := Dump(context.Background(), dying, out, opts); !errors.Is(err, errSourceDied) {
				t.Fatalf("got %v, want the source's error", err)
			}
			if _, err := os.Stat(filepath.Join(out, "_dumpmetadata")); err != nil {
				t.Fatalf("_dumpmetadata must be written first: %v", err)
			}
			if _, err := ReadFinished(out); !errors.Is(err, ErrIncomplete) {
				t.Fatalf("interrupted dump: got %v, want ErrIncomplete", err)
			}
			if _, err := Load(context.Background(), out, t.TempDir(), s.fetcher(), LoadOptions{}); !errors.Is(err, ErrIncomplete) ||
				!strings.Contains(err.Error(), "is incomplete (no _finished_dump)") {
				t.Fatalf("load of an interrupted dump: got %v", err)
			}
			// A torn event directory left by a crash is redone.
			os.Mkdir(filepath.Join(out, ".tmp-"+EventDirName(6)), 0o755)
			res, err := Dump(context.Background(), &s.ev, out, opts)
			if err != nil {
				t.Fatal(err)
			}
			if !filtered && res.Events != 4 {
				t.Fatalf("resume rewrote %d events, want the 4 that were missing", res.Events)
			}
			if d := diffTrees(dumpTree(t, out), dumpTree(t, ref)); d != "" {
				t.Fatalf("resumed dump differs from an uninterrupted one:\n%s", d)
			}
		})
	}
}

// dumpTree snapshots a dump without the files that differ between runs.
func dumpTree(t *testing.T, dir string) map[string]string {
	m := snapshot(t, dir)
	delete(m, "_dumpmetadata")
	delete(m, "_progress")
	return m
}

func TestBootstrapLayout(t *testing.T) {
	s := buildSource(t)
	os.MkdirAll(s.abs("d.db/empty"), 0o755)
	os.MkdirAll(s.abs("d.db/t/p=3"), 0o755)
	os.MkdirAll(s.abs("_x.db/_files"), 0o755)
	os.WriteFile(s.abs("_x.db/_files/part"), []byte("p"), 0o644)
	os.MkdirAll(s.abs("d.db/t/_temporary/0"), 0o755)
	os.WriteFile(s.abs("d.db/t/_temporary/0/junk"), []byte("junk"), 0o644)
	out := filepath.Join(t.TempDir(), "boot")
	res, err := Dump(context.Background(), &s.ev, out, DumpOptions{Source: "src", Tree: LocalTree{Root: s.root, Exclude: []string{"_temporary"}}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Kind != Bootstrap || res.To != 9 || res.Files != 3 {
		t.Fatalf("bootstrap: %+v", res)
	}
	read := func(p string) string {
		b, err := os.ReadFile(filepath.Join(out, p))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for p, want := range map[string]string{
		"d/_metadata":             `{"db":"d"}` + "\n",
		"d/t/_metadata":           `{"db":"d","table":"t","partitioned":true}` + "\n",
		"d/empty/_metadata":       `{"db":"d","table":"empty"}` + "\n",
		"d/empty/_dirs":           "d.db/empty\n",
		"d/empty/_files":          "",
		"d/t/p=1/_dirs":           "d.db/t/p=1\n",
		"d/t/p=1/_files":          "",
		"d/t/p=3/_dirs":           "d.db/t/p=3\n",
		"d/t/p=2/_files":          "d.db/t/p=2/g#3#" + journal.Sum([]byte("two")) + "#\n",
		"%5Fx/%5Ffiles/_metadata": `{"db":"_x","table":"_files"}` + "\n",
		"_outside/_files":         "top level%0Aname#8#" + journal.Sum([]byte("outside!")) + "#\n",
		"_finished_dump":          `{"to":9,"walk_end":9}` + "\n",
	} {
		if got := read(p); got != want {
			t.Errorf("%s: got %q, want %q", p, got, want)
		}
	}
	if strings.Contains(read("d/t/_dirs")+read("d/t/_files"), "_temporary") {
		t.Errorf("excluded scratch space dumped")
	}
	if _, err := os.Stat(filepath.Join(out, "_outside", "_metadata")); err == nil {
		t.Errorf("_outside has no _metadata")
	}
}
