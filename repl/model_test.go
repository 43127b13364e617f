package repl

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path"
	"sort"
	"testing"

	"github.com/cmfs-project/cmfs/journal"
)

// TestModel runs seeded random warehouse operations against a simulated
// source, cuts dumps at random ids, loads them in order, and compares the
// target with the source's recorded state at every cut.
func TestModel(t *testing.T) {
	for seed := uint64(1); seed <= 8; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 42))
			s := modelSource(t, r, 150)
			last := uint64(len(s.ev.events))
			target := t.TempDir()
			f := s.fetcher()
			var from uint64 = 1
			var loaded int64
			for from <= last {
				to := min(last, from+uint64(r.IntN(25)))
				res := mustLoad(t, mustDump(t, s, from, to), target, f)
				loaded += res.Bytes
				checkTarget(t, s, target, to)
				from = to + 1
			}
			t.Logf("%d events, %d bytes loaded, fetcher %+v", last, loaded, f.Stats())
		})
	}
}

// modelSource runs seeded random warehouse operations (create and drop
// tables and partitions, insert, overwrite, truncate, delete, rename files
// and partitions) on a simulated source until it has journaled events.
func modelSource(t *testing.T, r *rand.Rand, events int) *source {
	t.Helper()
	s := newSource(t)
	s.mkdir("w.db")
	contents := []string{"", "a", "bb", "ccc", "same-size-1", "same-size-2", "a longer piece of content"}
	exists := func(rel string) bool { _, err := os.Lstat(s.abs(rel)); return err == nil }
	list := func(kind string) []string {
		var out []string
		for p, v := range s.states[len(s.states)-1] {
			if (kind == "dir") == (v == "dir") {
				out = append(out, p)
			}
		}
		sort.Strings(out)
		return out
	}
	pick := func(xs []string) string { return xs[r.IntN(len(xs))] }
	for len(s.ev.events) < events {
		tables := []string{"w.db/t1", "w.db/t2", "w.db/t3"}
		tbl := pick(tables)
		part := tbl + "/p=" + fmt.Sprint(r.IntN(3))
		file := part + "/f" + fmt.Sprint(r.IntN(3))
		switch op := r.IntN(10); {
		case !exists(tbl):
			s.mkdir(tbl)
		case op == 0 && len(list("dir")) > 2:
			if d := pick(list("dir")); d != "w.db" && path.Dir(d) == "w.db" || journal.Locate(d).Level == journal.Partition {
				s.rmrf(d) // drop a table or a partition
			}
		case !exists(part):
			s.mkdir(part)
		case op <= 4:
			s.write(file, pick(contents)) // insert or overwrite
		case op == 5 && exists(file):
			s.del(file)
		case op == 6 && exists(file) && s.states[len(s.states)-1][file] != "file:":
			s.truncate(file)
		case op == 7 && exists(file):
			s.rename(file, part+"/f"+fmt.Sprint(r.IntN(3)+3))
		case op == 8:
			dst := tbl + "/p=" + fmt.Sprint(r.IntN(3)+3)
			if !exists(dst) {
				s.renameDir(part, dst, journal.RenamePartition)
			}
		default:
			s.write(path.Join(tbl, "unpartitioned"), pick(contents))
		}
	}
	return s
}
