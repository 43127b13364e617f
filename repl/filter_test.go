package repl

import (
	"context"
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cmfs-project/cmfs/journal"
)

// inFilter says whether a path of a snapshot belongs to a --db/--table
// filter: a directory by its own place in the layout, anything else by
// its directory's (as a BOOTSTRAP keeps them).
func inFilter(db, table, p, kind string) bool {
	loc := journal.Locate(p)
	if kind != "dir" {
		loc = journal.Locate(path.Dir(p))
	}
	if loc.Level == journal.Outside {
		return false
	}
	return (db == "" || loc.DB == db) && (table == "" || loc.Table == table)
}

// restrictTree keeps the entries of a snapshot inside the filter.
func restrictTree(m map[string]string, db, table string) map[string]string {
	out := map[string]string{}
	for p, v := range m {
		if inFilter(db, table, p, strings.SplitN(v, ":", 2)[0]) {
			out[p] = v
		}
	}
	return out
}

// checkFiltered compares a filtered target with the source's state after
// event id restricted to the filter; the target may hold no more than the
// directories above the filter besides.
func checkFiltered(t testing.TB, s *source, target, db, table string, id uint64) {
	t.Helper()
	got := snapshot(t, target)
	for p, v := range got {
		if !inFilter(db, table, p, strings.SplitN(v, ":", 2)[0]) && !(v == "dir" && journal.Locate(p).Level == journal.Database && (db == "" || journal.Locate(p).DB == db)) {
			t.Errorf("after event %d the target holds %s (%s), outside the filter", id, p, v)
		}
	}
	if d := diffTrees(restrictTree(got, db, table), restrictTree(s.states[id], db, table)); d != "" {
		t.Fatalf("filtered target after event %d differs from the source restricted to the filter:\n%s", id, d)
	}
	if got := lastID(t, target); got != id {
		t.Fatalf("last_repl_id: got %d, want %d", got, id)
	}
}

// filterCase builds a source history up to a base event, then the moves
// across the filter's edge.
type filterCase struct {
	name      string
	db, table string
	base      func(s *source)
	moves     func(s *source)
}

var filterCases = []filterCase{
	{
		name: "db", db: "a",
		base: func(s *source) {
			for _, d := range []string{"a.db", "a.db/t", "b.db", "b.db/t"} {
				s.mkdir(d)
			}
			s.write("a.db/t/f1", "one")
			s.write("b.db/t/f2", "two")
			s.write("a.db/t/f3", "three, old")
			s.write("b.db/t/f4", "four, new")
		},
		moves: func(s *source) {
			s.rename("a.db/t/f1", "b.db/t/f1") // out
			s.rename("b.db/t/f2", "a.db/t/f2") // in
			s.rename("b.db/t/f4", "a.db/t/f3") // over
			s.symlink("b.db/t/ln", "f2")
			s.renameDir("b.db/t/ln", "a.db/t/ln", journal.Rename) // a symlink in
			s.symlink("b.db/t/ln2", "/etc/hostname")
			s.renameOver("b.db/t/ln2", "a.db/t/f2")               // a symlink over a file
			s.renameDir("a.db/t/ln", "b.db/t/ln", journal.Rename) // a symlink out
			s.mkdir("b.db/u")
			s.mkdir("b.db/u/k=1")
			s.write("b.db/u/k=1/g", "gee")
			s.mkdir("b.db/u/k=1/empty")
			s.symlink("b.db/u/k=1/ln", "g")
			s.symlink("b.db/u/k=1/empty/dangling", "../nowhere")
			s.renameDir("b.db/u", "a.db/u", journal.RenameTable)             // a table in, symlinks too
			s.renameDir("a.db/u/k=1", "a.db/u/k=2", journal.RenamePartition) // renamed inside
			s.write("a.db/u/k=2/g", "gee, changed")
			s.rename("a.db/u/k=2/g", "a.db/t/g")
			s.renameDir("a.db/u", "b.db/v", journal.RenameTable) // a table out
			s.renameDir("b.db", "a.db/w", journal.Rename)        // a database into a table's place
		},
	},
	{
		name: "table", db: "a", table: "t",
		base: func(s *source) {
			for _, d := range []string{"a.db", "a.db/t", "a.db/s", "b.db", "b.db/t"} {
				s.mkdir(d)
			}
			s.write("a.db/t/f1", "one")
			s.write("a.db/s/f2", "two")
			s.write("a.db/t/f3", "three, old")
			s.write("b.db/t/f4", "four, new")
		},
		moves: func(s *source) {
			s.rename("a.db/t/f1", "a.db/s/f1") // out
			s.rename("a.db/s/f2", "a.db/t/f2") // in
			s.rename("b.db/t/f4", "a.db/t/f3") // over
			s.symlink("a.db/s/ln", "../t/f2")
			s.renameDir("a.db/s/ln", "a.db/t/ln", journal.Rename)  // a symlink in
			s.renameDir("a.db/t", "a.db/old", journal.RenameTable) // the table out
			s.mkdir("b.db/u")
			s.mkdir("b.db/u/k=1")
			s.write("b.db/u/k=1/g", "gee")
			s.mkdir("b.db/u/k=1/empty")
			s.symlink("b.db/u/k=1/empty/ln", "/etc/hostname")
			s.renameDir("b.db/u", "a.db/t", journal.RenameTable)             // a table in
			s.renameDir("a.db/t/k=1", "a.db/t/k=2", journal.RenamePartition) // renamed inside
			s.write("a.db/t/k=2/g", "gee, changed")
			s.renameDir("a.db", "c.db", journal.RenameDatabase) // its database renamed: out
			s.renameDir("c.db", "a.db", journal.RenameDatabase) // and back: in
		},
	},
}

// TestFilterMoves loads a filtered chain from a filtered BOOTSTRAP at the
// base: event by event (one filtered INCREMENTAL per event, the target
// checked after each) or as one filtered INCREMENTAL; either way the
// target ends as the source restricted to the filter.
func TestFilterMoves(t *testing.T) {
	for _, tc := range filterCases {
		for _, mode := range []string{"each", "one-dump"} {
			t.Run(tc.name+"/"+mode, func(t *testing.T) {
				s := newSource(t)
				tc.base(s)
				base := uint64(len(s.ev.events))
				cat := openCatalog(t)
				target := bootFiltered(t, s, cat, tc.db, tc.table)
				if mode == "each" {
					checkFiltered(t, s, target, tc.db, tc.table, base)
				}
				tc.moves(s)
				last := uint64(len(s.ev.events))
				ctx := context.Background()
				if mode == "one-dump" {
					out := filepath.Join(t.TempDir(), "inc")
					if _, err := Dump(ctx, &s.ev, out, DumpOptions{From: base + 1, Source: "src", DB: tc.db, Table: tc.table, Catalog: cat}); err != nil {
						t.Fatal(err)
					}
					mustLoad(t, out, target, s.fetcher())
					checkFiltered(t, s, target, tc.db, tc.table, last)
					return
				}
				for id := base + 1; id <= last; id++ {
					out := filepath.Join(t.TempDir(), fmt.Sprint(id))
					if _, err := Dump(ctx, &s.ev, out, DumpOptions{From: id, To: id, Source: "src", DB: tc.db, Table: tc.table, Catalog: cat}); err != nil {
						t.Fatalf("dump event %d (%s %s): %v", id, s.ev.events[id-1].Type, s.ev.events[id-1].Path, err)
					}
					if _, err := Load(ctx, out, target, s.fetcher(), LoadOptions{}); err != nil {
						t.Fatalf("load event %d (%s %s): %v", id, s.ev.events[id-1].Type, s.ev.events[id-1].Path, err)
					}
					checkFiltered(t, s, target, tc.db, tc.table, id)
				}
			})
		}
	}
}

// bootFiltered loads a filtered BOOTSTRAP of s, dumped with cat (nil: none),
// into a new target and returns the target.
func bootFiltered(t testing.TB, s *source, cat *Catalog, db, table string) string {
	t.Helper()
	boot := filepath.Join(t.TempDir(), "boot")
	if _, err := Dump(context.Background(), &s.ev, boot, DumpOptions{Source: "src", DB: db, Table: table, Tree: LocalTree{Root: s.root}, Catalog: cat}); err != nil {
		t.Fatal(err)
	}
	target := t.TempDir()
	mustLoad(t, boot, target, s.fetcher())
	return target
}

func TestParseFilter(t *testing.T) {
	for _, tc := range []struct {
		db, table         string
		wantDB, wantTable string
		err               string
	}{
		{db: "sales", wantDB: "sales"},
		{db: "sales.db", wantDB: "sales"},
		{db: "x.db.db", wantDB: "x.db"},
		{table: "orders", wantTable: "orders"},
		{table: "sales.orders", wantDB: "sales", wantTable: "orders"},
		{table: "sales.db/orders", wantDB: "sales", wantTable: "orders"},
		{db: "sales", table: "orders", wantDB: "sales", wantTable: "orders"},
		{db: "sales.db", table: "sales.db/orders", wantDB: "sales", wantTable: "orders"},
		{db: "sales", table: "a.b", wantDB: "sales", wantTable: "a.b"},
		{db: ".db", err: "empty name"},
		{db: "a/b", err: "not a name"},
		{table: "sales/orders", err: "DB.db/TABLE"},
		{db: "other", table: "sales.db/orders", err: "DB.db/TABLE"},
		{table: ".orders", err: "empty name"},
		{table: "sales.db/", err: "empty name"},
	} {
		db, table, err := ParseFilter(tc.db, tc.table)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseFilter(%q, %q): got %q, %q, %v; want an error with %q", tc.db, tc.table, db, table, err, tc.err)
			}
			continue
		}
		if err != nil || db != tc.wantDB || table != tc.wantTable {
			t.Errorf("ParseFilter(%q, %q): got %q, %q, %v; want %q, %q", tc.db, tc.table, db, table, err, tc.wantDB, tc.wantTable)
		}
	}
}

func TestFilterSeen(t *testing.T) {
	s := newSource(t)
	s.mkdir("a.db")
	s.mkdir("a.db/t")
	s.mkdir("gone.db")
	s.mkdir("gone.db/x")
	s.renameDir("gone.db/x", "a.db/x", journal.RenameTable)
	s.rmrf("gone.db")
	ctx := context.Background()
	for _, tc := range []struct {
		db, table string
		want      bool
	}{
		{"a", "", true}, {"", "t", true}, {"a", "t", true}, {"gone", "", true}, {"gone", "x", true},
		{"", "x", true}, {"b", "", false}, {"a", "u", false}, {"", "u", false}, {"a*", "", false},
	} {
		got, err := FilterSeen(ctx, &s.ev, s.root, tc.db, tc.table, uint64(len(s.ev.events)))
		if err != nil || got != tc.want {
			t.Errorf("FilterSeen(%q, %q): got %v, %v; want %v", tc.db, tc.table, got, err, tc.want)
		}
	}
}

// Without a catalog at the dump's start, a filtered dump still rewrites
// what needs no tree (files moving in and out, directories moving out),
// and refuses, saying why, a directory moving in.
func TestFilterWithoutCatalog(t *testing.T) {
	s := newSource(t)
	filterCases[0].base(s)
	base := uint64(len(s.ev.events))
	ctx := context.Background()
	target := bootFiltered(t, s, nil, "a", "")
	s.rename("a.db/t/f1", "b.db/t/f1")
	s.rename("b.db/t/f2", "a.db/t/f2")
	s.rename("b.db/t/f4", "a.db/t/f3")
	s.mkdir("a.db/gone")
	s.renameDir("a.db/gone", "b.db/gone", journal.RenameTable)
	last := uint64(len(s.ev.events))
	out := filepath.Join(t.TempDir(), "inc")
	if _, err := Dump(ctx, &s.ev, out, DumpOptions{From: base + 1, Source: "src", DB: "a"}); err != nil {
		t.Fatal(err)
	}
	mustLoad(t, out, target, s.fetcher())
	checkFiltered(t, s, target, "a", "", last)

	s.mkdir("b.db/u")
	s.renameDir("b.db/u", "a.db/u", journal.RenameTable)
	out = filepath.Join(t.TempDir(), "inc2")
	_, err := Dump(ctx, &s.ev, out, DumpOptions{From: last + 1, Source: "src", DB: "a"})
	if err == nil || !strings.Contains(err.Error(), "b.db/u moves into the filter as a.db/u") || !strings.Contains(err.Error(), "catalog") {
		t.Fatalf("a directory moving in without a catalog: got %v", err)
	}
}

// A filtered dump is resumed like any: killed midway, rerun, it ends
// with what one run writes, and the catalog it advances ends at its end.
func TestFilterResume(t *testing.T) {
	s := newSource(t)
	filterCases[0].base(s)
	base := uint64(len(s.ev.events))
	ctx := context.Background()
	cat := openCatalog(t)
	if _, err := cat.Update(ctx, &s.ev, LocalTree{Root: s.root}); err != nil {
		t.Fatal(err)
	}
	filterCases[0].moves(s)
	ref := t.TempDir()
	refCat := openCatalog(t)
	// The reference: the same catalog state, one uninterrupted dump.
	s2 := newSource(t)
	filterCases[0].base(s2)
	if _, err := refCat.Update(ctx, &s2.ev, LocalTree{Root: s2.root}); err != nil {
		t.Fatal(err)
	}
	filterCases[0].moves(s2)
	if _, err := Dump(ctx, &s2.ev, filepath.Join(ref, "d"), DumpOptions{From: base + 1, Source: "src", DB: "a", Catalog: refCat}); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "d")
	dying := &sliceEvents{events: s.ev.events, failAfter: 5}
	if _, err := Dump(ctx, dying, out, DumpOptions{From: base + 1, Source: "src", DB: "a", Catalog: cat}); !errors.Is(err, errSourceDied) {
		t.Fatalf("got %v, want the source's error", err)
	}
	if _, err := Dump(ctx, &s.ev, out, DumpOptions{From: base + 1, Source: "src", DB: "a", Catalog: cat}); err != nil {
		t.Fatal(err)
	}
	if d := diffTrees(dumpTree(t, out), dumpTree(t, filepath.Join(ref, "d"))); d != "" {
		t.Fatalf("resumed filtered dump differs from an uninterrupted one:\n%s", d)
	}
	if at, _, _ := cat.At(); at != uint64(len(s.ev.events)) {
		t.Fatalf("catalog at %d, want %d", at, len(s.ev.events))
	}
}

// An exchange across the filter's edge: the end inside gets what the
// other end held, file or directory.
func TestFilterExchange(t *testing.T) {
	s := newSource(t)
	for _, d := range []string{"a.db", "a.db/t", "b.db", "b.db/t", "a.db/t/d", "b.db/t/d", "b.db/t/d/sub"} {
		s.mkdir(d)
	}
	s.write("a.db/t/x", "inside")
	s.write("b.db/t/y", "outside")
	s.write("a.db/t/d/in", "in")
	s.write("b.db/t/d/sub/out", "out")
	base := uint64(len(s.ev.events))
	cat := openCatalog(t)
	target := bootFiltered(t, s, cat, "a", "")
	ctx := context.Background()
	exchange := func(a, b string, files []journal.File) {
		if err := unix.Renameat2(unix.AT_FDCWD, s.abs(a), unix.AT_FDCWD, s.abs(b), unix.RENAME_EXCHANGE); err != nil {
			t.Fatal(err)
		}
		s.emit(&journal.Event{Type: journal.Rename, Path: a, NewPath: b, Target: "exchange", Files: files})
	}
	exchange("a.db/t/x", "b.db/t/y", []journal.File{{Path: "b.db/t/y", Size: 6, XXH64: journal.Sum([]byte("inside"))}})
	exchange("b.db/t/d", "a.db/t/d", nil)
	last := uint64(len(s.ev.events))
	out := filepath.Join(t.TempDir(), "inc")
	if _, err := Dump(ctx, &s.ev, out, DumpOptions{From: base + 1, Source: "src", DB: "a", Catalog: cat}); err != nil {
		t.Fatal(err)
	}
	mustLoad(t, out, target, s.fetcher())
	checkFiltered(t, s, target, "a", "", last)
}

// Filtered chains, each with its own catalog, are independent of one
// another and of BOOTSTRAPs that move the shared catalog: two chains from
// event 1 (their catalogs start empty) and a BOOTSTRAP every few events,
// all sharing one catalog, each chain checked at every event.
func TestFilterChainsOwnCatalogs(t *testing.T) {
	s := newSource(t)
	filterCases[0].base(s)
	filterCases[0].moves(s)
	ctx := context.Background()
	state := t.TempDir()
	shared, err := OpenCatalog(filepath.Join(state, CatalogFile))
	if err != nil {
		t.Fatal(err)
	}
	defer shared.Close()
	type chain struct {
		db, table string
		cat       *Catalog
		target    string
	}
	var chains []*chain
	for _, f := range []filter{{db: "a"}, {db: "a", table: "t"}, {db: "a", table: "u"}} {
		c, err := OpenCatalog(filepath.Join(state, FilterCatalogFile(f.db, f.table)))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		chains = append(chains, &chain{db: f.db, table: f.table, cat: c, target: t.TempDir()})
	}
	// The source's tree is the one at the end: BOOTSTRAPs must build the
	// shared catalog at the end, then it is past every chain.
	if _, err := shared.Update(ctx, &s.ev, LocalTree{Root: s.root}); err != nil {
		t.Fatal(err)
	}
	for id := uint64(1); id <= uint64(len(s.ev.events)); id++ {
		for _, c := range chains {
			out := filepath.Join(t.TempDir(), "d")
			if _, err := Dump(ctx, &s.ev, out, DumpOptions{From: id, To: id, Source: "src", DB: c.db, Table: c.table, Catalog: shared, FilterCatalog: c.cat}); err != nil {
				t.Fatalf("%s.%s: dump event %d (%s %s): %v", c.db, c.table, id, s.ev.events[id-1].Type, s.ev.events[id-1].Path, err)
			}
			if _, err := Load(ctx, out, c.target, s.fetcher(), LoadOptions{}); err != nil {
				t.Fatalf("%s.%s: load event %d: %v", c.db, c.table, id, err)
			}
			checkFiltered(t, s, c.target, c.db, c.table, id)
		}
	}
	for _, c := range chains {
		if at, _, _ := c.cat.At(); at != uint64(len(s.ev.events)) {
			t.Errorf("%s.%s: its catalog at %d, want %d", c.db, c.table, at, len(s.ev.events))
		}
	}
}

func TestFilterCatalogFile(t *testing.T) {
	seen := map[string]bool{}
	for _, f := range [][2]string{{"a", ""}, {"", "a"}, {"a", "t"}, {"a-table=t", ""}, {"a", "-table=t"}, {"a%2D", ""}, {"a-", ""}} {
		n := FilterCatalogFile(f[0], f[1])
		if seen[n] || strings.Contains(n, "/") || n == CatalogFile {
			t.Errorf("FilterCatalogFile(%q, %q) = %q: not a name of its own", f[0], f[1], n)
		}
		seen[n] = true
	}
}
