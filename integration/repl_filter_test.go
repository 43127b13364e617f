package integration

import (
	"os"
	"path"
	"strconv"
	"strings"
	"testing"

	"github.com/cmfs-project/cmfs/journal"
)

// inScope says whether a path of a tree belongs to a --db/--table filter:
// a directory by its own place in the warehouse layout, anything else by
// its directory's.
func inScope(db, table, p, value string) bool {
	loc := journal.Locate(p)
	if value != "dir" {
		loc = journal.Locate(path.Dir(p))
	}
	if loc.Level == journal.Outside {
		return false
	}
	return (db == "" || loc.DB == db) && (table == "" || loc.Table == table)
}

// restrict is tr restricted to the filter.
func restrict(tr tree, db, table string) tree {
	out := tree{}
	for p, v := range tr {
		if inScope(db, table, p, v) {
			out[p] = v
		}
	}
	return out
}

// checkFilteredTarget fails t unless the target is want restricted to the
// filter, with nothing outside it but the directory of the filter's
// database.
func checkFilteredTarget(t testing.TB, what, target, db, table string, want tree) {
	t.Helper()
	got := targetTree(t, target)
	for p, v := range got {
		if !inScope(db, table, p, v) && !(v == "dir" && p == db+".db") {
			t.Errorf("%s: the target holds %s (%s), outside the filter", what, p, v)
		}
	}
	if d := diffTree(restrict(got, db, table), restrict(want, db, table)); d != "" {
		t.Fatalf("%s: target %s differs from the source restricted to the filter (got vs want):\n%s", what, target, d)
	}
}

// TestReplFilterMoves moves files, tables and partitions across the
// edge of a --db and of a --table filter through a real mount, and loads
// a filtered chain — a filtered BOOTSTRAP, then one filtered INCREMENTAL
// per operation — checking after each that the target is the source
// restricted to the filter: a move in arrives with its content, a move
// out is removed, and what arrived follows later events.
func TestReplFilterMoves(t *testing.T) {
	replicadPath(t)
	type op struct {
		name string
		do   func(m *mounted)
	}
	mv := func(from, to string) op {
		return op{"mv " + from + " " + to, func(m *mounted) {
			if err := os.Rename(m.path(from), m.path(to)); err != nil {
				t.Fatal(err)
			}
		}}
	}
	mkTable := func(dir string) op {
		return op{"make " + dir, func(m *mounted) {
			if err := os.MkdirAll(m.path(dir+"/k=1/empty"), 0o755); err != nil {
				t.Fatal(err)
			}
			writeFile(t, m.path(dir+"/k=1/g"), []byte("gee"))
		}}
	}
	write := func(p, content string) op {
		return op{"write " + p, func(m *mounted) { writeFile(t, m.path(p), []byte(content)) }}
	}
	for _, tc := range []struct {
		name      string
		flags     []string // as the user spells them
		db, table string   // what they mean
		dirs      []string
		files     map[string]string
		ops       []op
	}{
		{
			name: "db", flags: []string{"--db", "a.db"}, db: "a",
			dirs:  []string{"a.db/t", "b.db/t"},
			files: map[string]string{"a.db/t/f1": "one", "b.db/t/f2": "two", "a.db/t/f3": "three, old", "b.db/t/f4": "four, new"},
			ops: []op{
				mv("a.db/t/f1", "b.db/t/f1"), // out
				mv("b.db/t/f2", "a.db/t/f2"), // in
				mv("b.db/t/f4", "a.db/t/f3"), // over
				mkTable("b.db/u"),
				mv("b.db/u", "a.db/u"),         // a table in
				mv("a.db/u/k=1", "a.db/u/k=2"), // a partition renamed inside it
				write("a.db/u/k=2/g", "gee, changed"),
				mv("a.db/u", "b.db/v"), // a table out
			},
		},
		{
			name: "table", flags: []string{"--table", "a.t"}, db: "a", table: "t",
			dirs:  []string{"a.db/t", "a.db/s", "b.db/t"},
			files: map[string]string{"a.db/t/f1": "one", "a.db/s/f2": "two", "a.db/t/f3": "three, old", "b.db/t/f4": "four, new"},
			ops: []op{
				mv("a.db/t/f1", "a.db/s/f1"), // out
				mv("a.db/s/f2", "a.db/t/f2"), // in
				mv("b.db/t/f4", "a.db/t/f3"), // over
				mv("a.db/t", "a.db/old"),     // the table out
				mkTable("b.db/u"),
				mv("b.db/u", "a.db/t"),         // a table in
				mv("a.db/t/k=1", "a.db/t/k=2"), // a partition renamed inside it
				write("a.db/t/k=2/g", "gee, changed"),
				mv("a.db", "c.db"), // its database renamed: out
				mv("c.db", "a.db"), // and back: in
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := mount(t)
			for _, d := range tc.dirs {
				if err := os.MkdirAll(m.path(d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			for p, c := range tc.files {
				writeFile(t, m.path(p), []byte(c))
			}
			h := newHistory(t, m)
			dumps, target := t.TempDir(), t.TempDir()
			src := fetchFrom{State: m.State}
			boot := replDump(t, m.State, dumps, tc.flags...)
			if boot.Kind != "BOOTSTRAP" || boot.To != h.last() {
				t.Fatalf("filtered BOOTSTRAP: %+v, want one up to %d", boot, h.last())
			}
			if !strings.HasSuffix(boot.Dump, "-db="+tc.db) && !strings.HasSuffix(boot.Dump, "-table="+tc.table) {
				t.Errorf("dump %s is not named after the filter", boot.Dump)
			}
			replLoad(t, boot.Dump, target, src)
			checkFilteredTarget(t, "after the BOOTSTRAP", target, tc.db, tc.table, h.at(t, h.last()))
			prev := h.last()
			for _, o := range tc.ops {
				o.do(m)
				id := h.record(t, o.name)
				if id == prev {
					t.Fatalf("%s: no event", o.name)
				}
				args := append([]string{"--from", strconv.FormatUint(prev+1, 10), "--to", strconv.FormatUint(id, 10)}, tc.flags...)
				d := replDump(t, m.State, dumps, args...)
				l := replLoad(t, d.Dump, target, src)
				checkFilteredTarget(t, o.name+" (events "+strconv.FormatUint(prev+1, 10)+".."+strconv.FormatUint(id, 10)+", "+strconv.Itoa(l.Applied)+" applied)", target, tc.db, tc.table, h.at(t, id))
				if st := statusOf(t, target); st.LastReplID != id {
					t.Fatalf("%s: target at event %d, want %d", o.name, st.LastReplID, id)
				}
				prev = id
			}
		})
	}
}

// TestReplFilterNames: --db takes a database's name or its directory's,
// and a filter that names nothing the warehouse holds or its journal
// ever named is refused with one line, before any dump is written.
func TestReplFilterNames(t *testing.T) {
	replicadPath(t)
	m := mount(t)
	if err := os.MkdirAll(m.path("d1.db/t"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, m.path("d1.db/t/f"), []byte("f"))
	last := lastEventID(t, m.State)
	for _, flags := range [][]string{{"--db", "d1"}, {"--db", "d1.db"}, {"--table", "d1.t"}, {"--table", "d1.db/t"}, {"--db", "d1", "--table", "t"}, {"--table", "t"}} {
		out := t.TempDir()
		d := replDump(t, m.State, out, append([]string{"--from", "1"}, flags...)...)
		files := 0
		for id := uint64(1); id <= last; id++ {
			if _, err := os.Stat(d.Dump + "/" + eventDir(id) + "/_files"); err == nil {
				b, _ := os.ReadFile(d.Dump + "/" + eventDir(id) + "/_files")
				files += strings.Count(string(b), "\n")
			}
		}
		if files != 1 {
			t.Errorf("dump %v: %d files listed, want the 1 of d1.db/t", flags, files)
		}
	}
	for _, tc := range []struct {
		flags []string
		want  string
	}{
		{[]string{"--db", "d2"}, "--db d2: no database d2.db in"},
		{[]string{"--db", "d2.db"}, "--db d2: no database d2.db in"},
		{[]string{"--table", "d1.u"}, "no table d1.db/u in"},
		{[]string{"--table", "u"}, "no table u in any database"},
		{[]string{"--db", "a/b"}, "not a name"},
	} {
		out := t.TempDir()
		args := append([]string{"dump", "--state", m.State, "--out", out, "--from", "1"}, tc.flags...)
		expectReplicadRefusal(t, args, replicad(t, args...), tc.want)
		if ents, _ := os.ReadDir(out); len(ents) != 0 {
			t.Errorf("refused dump %v left %d entries in %s", tc.flags, len(ents), out)
		}
	}
}

func eventDir(id uint64) string {
	s := strconv.FormatUint(id, 10)
	return strings.Repeat("0", 20-len(s)) + s
}
