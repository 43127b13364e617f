package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/control"
)

// The exact-replication model test. Seeded random warehouse operations go
// through a real cmfs mount while the test keeps its own model of the tree
// (checked against the backing directory every exactCheckEvery operations
// and at the end), and records the journal's newest event id after each
// one. After the workload, INCREMENTAL dumps are cut at random operation
// boundaries and loaded in order into a target with the real replicad;
// after each load the target must be the model's tree as of the cut's last
// event. A BOOTSTRAP taken halfway (from the catalog) is loaded and
// chained to the end; BOOTSTRAPs at the end, from the catalog and with
// --walk, must equal the chained target. At the same cuts, a --db and a
// --table chain, each into its own target, must be the model restricted
// to its filter, and a filtered BOOTSTRAP at the end its chain.
//
// Size and repetition:
//
//	CMFS_REPL_MODEL_OPS    operations per seed (default exactOps)
//	CMFS_REPL_MODEL_SEEDS  how many seeds (default 1)
//	-seed N                the first seed (default: the clock); seed i is N+i
//
// The long run (README, "Tests"):
//
//	CMFS_REPL_MODEL_OPS=10000 CMFS_REPL_MODEL_SEEDS=20 go test -timeout 0 -count=1 -run 'TestReplExact$' -v ./integration/

const (
	exactOps        = 400 // operations per seed by default
	exactServeOps   = 300 // for TestReplExactServe
	exactCheckEvery = 64  // the model is checked against the mount this often
)

// TestReplExact is the model test with content fetched by load
// --source-state.
func TestReplExact(t *testing.T) { replExactSeeds(t, exactOps, false) }

// TestReplExactServe is the model test with every file fetched through
// `replicad serve` (load --source).
func TestReplExactServe(t *testing.T) { replExactSeeds(t, exactServeOps, true) }

func replExactSeeds(t *testing.T, ops int, viaServe bool) {
	replicadPath(t)
	ops = envInt(t, "CMFS_REPL_MODEL_OPS", ops)
	seeds := envInt(t, "CMFS_REPL_MODEL_SEEDS", 1)
	base := *seedFlag
	if base == 0 {
		base = time.Now().UnixNano() & (1<<62 - 1)
	}
	for i := range seeds {
		seed := base + int64(i)
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Logf("seed %d (rerun with: CMFS_REPL_MODEL_OPS=%d go test ./integration/ -count=1 -run '%s$' -args -seed %d)", seed, ops, t.Name()[:strings.IndexByte(t.Name(), '/')], seed)
			replExact(t, seed, ops, viaServe)
		})
	}
}

func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive number", name, v)
	}
	return n
}

func replExact(t *testing.T, seed int64, nops int, viaServe bool) {
	rng := rand.New(rand.NewPCG(uint64(seed), uint64(seed)>>32|1))
	m := mount(t)
	ctl, err := control.Dial(filepath.Join(m.State, "control.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	lastEvent := func() uint64 {
		t.Helper()
		st, err := ctl.Status(context.Background())
		if err != nil {
			t.Fatalf("control status: %v", err)
		}
		return st.LastEventID
	}

	// The workload. ids[i] is the newest event right after ops[i].
	w := &exactGen{rng: rng, model: newXModel()}
	var ops []xop
	var ids []uint64
	kinds := map[string]int{}
	prev := lastEvent()
	dumps := t.TempDir()
	mid := -1 // the operation after which the halfway BOOTSTRAP was taken
	var midBoot dumpInfo
	start := time.Now()
	for i := range nops {
		op := w.next()
		before := w.model.value(op.a) + "|" + w.model.value(op.b)
		if err := op.do(m); err != nil {
			t.Fatalf("op %d: %s at the source: %v (the model expected it to succeed)", i, op, err)
		}
		changed := w.model.apply(op)
		id := lastEvent()
		switch {
		case changed && id <= prev:
			t.Fatalf("op %d: %s changed the tree (%s) but the journal stayed at event %d: a replica cannot follow it", i, op, before, id)
		case !changed && id != prev:
			t.Logf("op %d: %s changed nothing; events %d..%d", i, op, prev+1, id)
		}
		prev = id
		ops = append(ops, op)
		ids = append(ids, id)
		if op.shape != "" {
			kinds[op.shape]++
		} else {
			kinds[op.kind]++
		}
		if (i+1)%exactCheckEvery == 0 || i == nops-1 {
			if d := diffTree(sourceTree(t, m), w.model.tree()); d != "" {
				t.Fatalf("after op %d (%s), the mount differs from the model (mount vs model); last ops:\n%s\n%s", i, op, lastOps(ops, 12), d)
			}
		}
		if i == nops/2 {
			mid, midBoot = i, replDump(t, m.State, dumps)
			if midBoot.Kind != "BOOTSTRAP" || midBoot.To != id {
				t.Fatalf("halfway BOOTSTRAP after op %d (event %d): got %+v", i, id, midBoot)
			}
		}
	}
	t.Logf("%d operations in %v, events 1..%d; %v", nops, time.Since(start).Round(time.Millisecond), prev, sortedCounts(kinds))

	// Cuts: consecutive ranges from event 1, each ending at an operation.
	type cut struct {
		op   int // the last operation it covers
		dump dumpInfo
	}
	maxGap := max(40, nops/40)
	var cuts []cut
	from := uint64(1)
	for i := 0; i < nops; {
		j := min(nops-1, i+rng.IntN(maxGap))
		if rng.IntN(8) == 0 {
			j = i // a single operation now and then
		}
		for j < nops-1 && ids[j] < from {
			j++ // an operation without events cannot end a cut
		}
		if ids[j] >= from {
			cuts = append(cuts, cut{op: j, dump: incremental(t, m.State, dumps, from, ids[j])})
			from = ids[j] + 1
		}
		i = j + 1
	}
	src := fetchFrom{State: m.State}
	if viaServe {
		src = fetchFrom{Addr: serve(t, m.State).Addr}
	}

	// Replay the model along the cuts: the chained target, and the one
	// that starts from the halfway BOOTSTRAP.
	replay := newXModel()
	done := -1
	advance := func(to int) tree {
		for ; done < to; done++ {
			replay.apply(ops[done+1])
		}
		return replay.tree()
	}
	chained := t.TempDir()
	fromBoot := t.TempDir()
	bootLoaded := false
	scopes := exactScopes(w.model)
	for _, s := range scopes {
		s.target = t.TempDir()
	}
	for _, c := range cuts {
		want := advance(c.op)
		what := fmt.Sprintf("seed %d: load of [%d, %d] %s (its last op %d: %s)", seed, c.dump.From, c.dump.To, src, c.op, ops[c.op])
		l := replLoad(t, c.dump.Dump, chained, src)
		if l.From != c.dump.From || l.To != c.dump.To {
			t.Errorf("%s: load reports [%d, %d]", what, l.From, l.To)
		}
		checkExact(t, what, chained, want, ops, c.op)
		for _, s := range scopes {
			// The filtered chains: the same cut, dumped through the
			// filter, loaded into the scope's own target.
			d := replDump(t, m.State, dumps, append([]string{"--from", strconv.FormatUint(c.dump.From, 10), "--to", strconv.FormatUint(c.dump.To, 10)}, s.flags...)...)
			if d.Kind != "INCREMENTAL" || d.From != c.dump.From || d.To != c.dump.To {
				t.Fatalf("seed %d: filtered dump %v of [%d, %d]: got %+v", seed, s.flags, c.dump.From, c.dump.To, d)
			}
			replLoad(t, d.Dump, s.target, src)
			checkScoped(t, fmt.Sprintf("%s, filtered %v", what, s.flags), s, want, ops, c.op)
		}
		if c.op <= mid {
			continue
		}
		if !bootLoaded {
			replLoad(t, midBoot.Dump, fromBoot, src)
			bootLoaded = true
			checkExact(t, fmt.Sprintf("seed %d: the halfway BOOTSTRAP (event %d)", seed, midBoot.To), fromBoot, modelAt(ops, mid), ops, mid)
			if c.dump.From <= midBoot.To {
				// The cut straddles the BOOTSTRAP: its own INCREMENTAL
				// from right after it.
				d := incremental(t, m.State, t.TempDir(), midBoot.To+1, c.dump.To)
				replLoad(t, d.Dump, fromBoot, src)
				checkExact(t, what+" after the halfway BOOTSTRAP", fromBoot, want, ops, c.op)
				continue
			}
		}
		replLoad(t, c.dump.Dump, fromBoot, src)
		checkExact(t, what+" after the halfway BOOTSTRAP", fromBoot, want, ops, c.op)
	}
	if st := statusOf(t, chained); st.LastReplID != prev {
		t.Errorf("seed %d: chained target at event %d, want %d", seed, st.LastReplID, prev)
	}

	// BOOTSTRAPs at the end, from the catalog (brought up to date from
	// the halfway one by applying every event since) and by a walk.
	final := targetTree(t, chained)
	for _, walk := range []bool{false, true} {
		var flags []string
		if walk {
			flags = append(flags, "--walk")
		}
		boot := replDump(t, m.State, t.TempDir(), flags...)
		if boot.To != prev {
			t.Fatalf("seed %d: BOOTSTRAP %s pinned to %d, want %d", seed, boolFlag("--walk", walk), boot.To, prev)
		}
		target := t.TempDir()
		replLoad(t, boot.Dump, target, src)
		if d := diffTree(targetTree(t, target), final); d != "" {
			t.Fatalf("seed %d: BOOTSTRAP %s at event %d differs from the target chained to it (bootstrap vs chained):\n%s", seed, boolFlag("--walk", walk), prev, d)
		}
	}
	// Filtered BOOTSTRAPs at the end, against the filtered chains.
	for _, s := range scopes {
		if st := statusOf(t, s.target); st.LastReplID != prev {
			t.Errorf("seed %d: filtered chain %v at event %d, want %d", seed, s.flags, st.LastReplID, prev)
		}
		boot := replDump(t, m.State, t.TempDir(), s.flags...)
		if boot.To != prev {
			t.Fatalf("seed %d: filtered BOOTSTRAP %v pinned to %d, want %d", seed, s.flags, boot.To, prev)
		}
		target := t.TempDir()
		replLoad(t, boot.Dump, target, src)
		if d := diffTree(targetTree(t, target), targetTree(t, s.target)); d != "" {
			t.Fatalf("seed %d: filtered BOOTSTRAP %v at event %d differs from the filtered chain (bootstrap vs chained):\n%s", seed, s.flags, prev, d)
		}
	}
	t.Logf("%d dumps loaded, chained and from the halfway BOOTSTRAP (event %d); BOOTSTRAPs at event %d equal the chain; filtered chains %v", len(cuts), midBoot.To, prev, scopes)
}

// exactScope is a --db or --table filter the model test chains, with
// its own target.
type exactScope struct {
	flags     []string
	db, table string
	target    string
}

func (s exactScope) String() string { return strings.Join(s.flags, " ") }

// exactScopes picks the filters of the filtered chains from the tree at
// the end of the workload (a filter must name something the warehouse
// holds or its journal named up to the dump's end): the first database,
// and the last table, both by name. There may be none.
func exactScopes(x *xmodel) []*exactScope {
	var out []*exactScope
	if dbs := x.dbs(); len(dbs) > 0 {
		db := strings.TrimSuffix(dbs[0], ".db")
		out = append(out, &exactScope{flags: []string{"--db", db}, db: db})
	}
	if ts := x.tables(); len(ts) > 0 {
		p := ts[len(ts)-1]
		db, table := strings.TrimSuffix(path.Dir(p), ".db"), path.Base(p)
		out = append(out, &exactScope{flags: []string{"--table", db + "." + table}, db: db, table: table})
	}
	return out
}

// checkScoped fails t if the scope's target is not want, the model after
// ops[op], restricted to the scope (as filter.go keeps paths: a
// directory by its own place in the layout, anything else by its
// directory's); the directory of a --table scope's database may be there
// too.
func checkScoped(t *testing.T, what string, s *exactScope, want tree, ops []xop, op int) {
	t.Helper()
	got := targetTree(t, s.target)
	for p, v := range got {
		if !inScope(s.db, s.table, p, v) && !(v == "dir" && p == s.db+".db") {
			t.Fatalf("%s: the target holds %s (%s), outside the filter; the operations up to there:\n%s", what, p, v, lastOps(ops[:op+1], 15))
		}
	}
	if d := diffTree(restrict(got, s.db, s.table), restrict(want, s.db, s.table)); d != "" {
		t.Fatalf("%s: the target differs from the source's state restricted to the filter (got vs want):\n%s\nthe operations up to there:\n%s", what, d, lastOps(ops[:op+1], 15))
	}
}

// checkExact fails t if target is not want, the model after ops[op].
func checkExact(t *testing.T, what, target string, want tree, ops []xop, op int) {
	t.Helper()
	if d := diffTree(targetTree(t, target), want); d != "" {
		t.Fatalf("%s: the target differs from the source's state (got vs want):\n%s\nthe operations up to there:\n%s", what, d, lastOps(ops[:op+1], 15))
	}
}

// modelAt is the model's tree after ops[op].
func modelAt(ops []xop, op int) tree {
	m := newXModel()
	for _, o := range ops[:op+1] {
		m.apply(o)
	}
	return m.tree()
}

func lastOps(ops []xop, n int) string {
	var b strings.Builder
	for i := max(0, len(ops)-n); i < len(ops); i++ {
		fmt.Fprintf(&b, "  op %d: %s\n", i, ops[i])
	}
	return b.String()
}

func sortedCounts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// xop is one operation of the workload. Its content is drawn from seed,
// so that the model can be replayed without keeping every byte.
type xop struct {
	kind string // mkdir, write, append, truncate, rm, rm-r, mv, link, symlink
	a, b string // paths (b: mv and link's new name; symlink's target is b)
	seed uint64 // write, append: content
	size int    // write, append: content size; truncate: the new size
	// shape names the case for the counts the test prints ("mv-over",
	// "mv-dir-onto-empty", ...); kind if empty.
	shape string
}

func (o xop) String() string {
	switch o.kind {
	case "write", "append":
		return fmt.Sprintf("%s %s (%d bytes)", o.kind, o.a, o.size)
	case "truncate":
		return fmt.Sprintf("truncate %s to %d", o.a, o.size)
	case "mv", "link":
		return fmt.Sprintf("%s %s %s", o.kind, o.a, o.b)
	case "symlink":
		return fmt.Sprintf("symlink %s -> %s", o.a, o.b)
	}
	return o.kind + " " + o.a
}

// content is the op's bytes.
func (o xop) content() []byte {
	r := rand.New(rand.NewPCG(o.seed, 7))
	b := make([]byte, o.size)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// do applies the operation through the mount, with the system calls a
// warehouse tool would use (rename(2) itself, not os.Rename, which
// refuses an existing directory as the new name).
func (o xop) do(m *mounted) error {
	a, b := m.path(o.a), m.path(o.b)
	switch o.kind {
	case "mkdir":
		return os.Mkdir(a, 0o755)
	case "write":
		return os.WriteFile(a, o.content(), 0o644)
	case "append":
		f, err := os.OpenFile(a, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return err
		}
		_, err = f.Write(o.content())
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return err
	case "truncate":
		return os.Truncate(a, int64(o.size))
	case "rm":
		return os.Remove(a)
	case "rm-r":
		return os.RemoveAll(a)
	case "mv":
		return syscall.Rename(a, b)
	case "link":
		return os.Link(a, b)
	case "symlink":
		return os.Symlink(o.b, a)
	}
	return fmt.Errorf("unknown op %q", o.kind)
}

// xmodel is the tree as the test expects it: paths to nodes; files share
// an inode per hard link.
type xmodel struct{ n map[string]*xnode }

type xnode struct {
	kind   byte    // 'd', 'f', 'l'
	ino    *xinode // 'f'
	target string  // 'l'
}

type xinode struct{ data []byte }

func newXModel() *xmodel { return &xmodel{n: map[string]*xnode{}} }

// value describes rel for messages.
func (x *xmodel) value(rel string) string {
	n := x.n[rel]
	switch {
	case rel == "":
		return ""
	case n == nil:
		return rel + " absent"
	case n.kind == 'd':
		return rel + " dir"
	case n.kind == 'l':
		return rel + " -> " + n.target
	}
	return fmt.Sprintf("%s %d bytes", rel, len(n.ino.data))
}

// below lists the paths strictly below dir.
func (x *xmodel) below(dir string) []string {
	var out []string
	for p := range x.n {
		if strings.HasPrefix(p, dir+"/") {
			out = append(out, p)
		}
	}
	return out
}

// apply applies o, which must be valid, and reports whether the tree
// changed.
func (x *xmodel) apply(o xop) bool {
	switch o.kind {
	case "mkdir":
		x.n[o.a] = &xnode{kind: 'd'}
	case "write":
		b := o.content()
		if n := x.n[o.a]; n != nil {
			same := slices.Equal(n.ino.data, b)
			n.ino.data = b // O_TRUNC: the same inode, every name
			return !same
		}
		x.n[o.a] = &xnode{kind: 'f', ino: &xinode{data: b}}
	case "append":
		n := x.n[o.a]
		n.ino.data = slices.Concat(n.ino.data, o.content())
		return o.size > 0
	case "truncate":
		n := x.n[o.a]
		old := n.ino.data
		b := make([]byte, o.size)
		copy(b, old)
		n.ino.data = b
		return len(old) != o.size
	case "rm":
		delete(x.n, o.a)
	case "rm-r":
		for _, p := range x.below(o.a) {
			delete(x.n, p)
		}
		delete(x.n, o.a)
	case "mv":
		// rename(2): b, a file or an empty directory, is replaced.
		delete(x.n, o.b)
		moved := map[string]*xnode{o.b: x.n[o.a]}
		for _, p := range x.below(o.a) {
			moved[o.b+strings.TrimPrefix(p, o.a)] = x.n[p]
			delete(x.n, p)
		}
		delete(x.n, o.a)
		for p, n := range moved {
			x.n[p] = n
		}
	case "link":
		x.n[o.b] = &xnode{kind: 'f', ino: x.n[o.a].ino}
	case "symlink":
		x.n[o.a] = &xnode{kind: 'l', target: o.b}
	}
	return true
}

// tree is the model as readTree shows a directory.
func (x *xmodel) tree() tree {
	tr := tree{}
	for p, n := range x.n {
		switch n.kind {
		case 'd':
			tr[p] = "dir"
		case 'l':
			tr[p] = "symlink -> " + n.target
		default:
			tr[p] = fileValue(n.ino.data)
		}
	}
	return tr
}

// level lists the paths of kind at a warehouse level, sorted (so that a
// seed picks the same ones every run): dbs (depth 1, "*.db"), tables
// (depth 2 under a db), partitions (k=v below a table), files, symlinks.
func (x *xmodel) list(keep func(p string, n *xnode) bool) []string {
	var out []string
	for p, n := range x.n {
		if keep(p, n) {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

func (x *xmodel) dbs() []string {
	return x.list(func(p string, n *xnode) bool {
		return n.kind == 'd' && !strings.Contains(p, "/") && strings.HasSuffix(p, ".db")
	})
}

func (x *xmodel) tables() []string {
	return x.list(func(p string, n *xnode) bool {
		return n.kind == 'd' && strings.Count(p, "/") == 1 && strings.HasSuffix(path.Dir(p), ".db") && x.n[path.Dir(p)].kind == 'd'
	})
}

func (x *xmodel) partitions() []string {
	return x.list(func(p string, n *xnode) bool {
		return n.kind == 'd' && strings.Count(p, "/") == 2 && strings.HasPrefix(path.Base(p), "k=") && strings.HasSuffix(strings.SplitN(p, "/", 2)[0], ".db")
	})
}

// fileDirs are the directories files go in: tables, partitions, and
// "top" outside the layout.
func (x *xmodel) fileDirs() []string {
	ds := append(x.tables(), x.partitions()...)
	if n := x.n["top"]; n != nil && n.kind == 'd' {
		ds = append(ds, "top")
	}
	sort.Strings(ds)
	return ds
}

func (x *xmodel) files() []string {
	return x.list(func(p string, n *xnode) bool { return n.kind == 'f' })
}

func (x *xmodel) symlinks() []string {
	return x.list(func(p string, n *xnode) bool { return n.kind == 'l' })
}

// emptyDir says whether the directory p has nothing below it.
func (x *xmodel) emptyDir(p string) bool {
	n := x.n[p]
	if n == nil || n.kind != 'd' {
		return false
	}
	for q := range x.n {
		if strings.HasPrefix(q, p+"/") {
			return false
		}
	}
	return true
}

// exactGen draws valid operations from the model.
type exactGen struct {
	rng   *rand.Rand
	model *xmodel
}

func pick[T any](r *rand.Rand, s []T) T { return s[r.IntN(len(s))] }

// fresh returns a name in dir from names that does not exist, or "".
func (g *exactGen) fresh(dir string, names ...string) string {
	for range 8 {
		p := path.Join(dir, pick(g.rng, names))
		if g.model.n[p] == nil {
			return p
		}
	}
	return ""
}

var (
	exactDBs    = []string{"a.db", "b.db", "c.db"}
	exactTables = []string{"t0", "t1", "t2", "t3"}
	exactParts  = []string{"k=0", "k=1", "k=2", "k=3", "k=4", "k=5"}
	exactFiles  = []string{"part-0", "part-1", "part-2", "part-3", "part-4", "part-5", "part-6", "part-7"}
	exactLinks  = []string{"ln-0", "ln-1", "ln-2"}
	// Sizes from a small set, so an overwrite often keeps the size and
	// only the checksum tells the contents apart.
	exactSizes = []int{0, 1, 16, 16, 16, 300, 4096, 70000}
)

// next returns a valid operation; it never fails to find one, as mkdir of
// a database always works while one is missing.
func (g *exactGen) next() xop {
	for {
		if o, ok := g.try(); ok {
			return o
		}
	}
}

func (g *exactGen) try() (xop, bool) {
	r, x := g.rng, g.model
	dbs, tables, parts, files, links := x.dbs(), x.tables(), x.partitions(), x.files(), x.symlinks()
	dirs := x.fileDirs()
	content := func(kind, p string) xop {
		return xop{kind: kind, a: p, seed: r.Uint64(), size: pick(r, exactSizes)}
	}
	switch k := r.IntN(100); {
	case k < 3 || len(dbs) == 0:
		if p := g.fresh("", exactDBs...); p != "" {
			return xop{kind: "mkdir", a: p}, true
		}
		if x.n["top"] == nil {
			return xop{kind: "mkdir", a: "top"}, true
		}
	case k < 7 || len(tables) == 0:
		if p := g.fresh(pick(r, dbs), exactTables...); p != "" {
			return xop{kind: "mkdir", a: p}, true
		}
	case k < 14 || len(parts) == 0:
		if p := g.fresh(pick(r, tables), exactParts...); p != "" {
			return xop{kind: "mkdir", a: p}, true
		}
	case k < 30: // insert
		if p := g.fresh(pick(r, dirs), exactFiles...); p != "" {
			o := content("write", p)
			o.shape = "insert"
			return o, true
		}
	case k < 37 && len(files) > 0: // overwrite (O_TRUNC), maybe a hard-linked file
		o := content("write", pick(r, files))
		o.shape = "overwrite"
		return o, true
	case k < 43 && len(files) > 0:
		o := content("append", pick(r, files))
		o.size = max(o.size, 1)
		return o, true
	case k < 48 && len(files) > 0:
		p := pick(r, files)
		n := len(x.n[p].ino.data)
		size := pick(r, []int{0, n / 2, n + 1 + r.IntN(100), r.IntN(n + 1)})
		if size != n {
			return xop{kind: "truncate", a: p, size: size}, true
		}
	case k < 53 && len(files)+len(links) > 0:
		return xop{kind: "rm", a: pick(r, append(files, links...))}, true
	case k < 65 && len(files)+len(links) > 0:
		// A file or symlink renamed: within its directory, across
		// partitions, tables and databases, over an existing file or
		// symlink sometimes.
		from := pick(r, append(files, links...))
		to := g.fresh(pick(r, []string{path.Dir(from), pick(r, dirs)}), append(exactFiles, exactLinks...)...)
		if r.IntN(3) == 0 {
			to = pick(r, append(files, links...))
		}
		if to == "" || to == from || x.n[to] != nil && x.n[to].kind == 'f' && x.n[from].kind == 'f' && x.n[to].ino == x.n[from].ino {
			return xop{}, false // rename(2) of two names of one inode does nothing
		}
		shape := "mv-file"
		switch {
		case x.n[to] != nil:
			shape = "mv-over"
		case path.Dir(to) != path.Dir(from):
			shape = "mv-file-across"
		}
		if x.n[from].kind == 'l' {
			shape += "(symlink)"
		}
		return xop{kind: "mv", a: from, b: to, shape: shape}, true
	case k < 70 && len(files) > 0: // hard link, next to it or elsewhere
		from := pick(r, files)
		if to := g.fresh(pick(r, []string{path.Dir(from), pick(r, dirs)}), exactFiles...); to != "" {
			return xop{kind: "link", a: from, b: to}, true
		}
	case k < 75: // symlink: to a file next to it, a partition, dangling, absolute
		dir := pick(r, dirs)
		if p := g.fresh(dir, exactLinks...); p != "" {
			target := pick(r, []string{pick(r, exactFiles), "../" + pick(r, exactParts), "nowhere", "/etc/hostname"})
			return xop{kind: "symlink", a: p, b: target}, true
		}
	case k < 80: // a partition renamed to a new name, here or in another table
		if to := g.fresh(pick(r, tables), exactParts...); to != "" && len(parts) > 0 {
			return xop{kind: "mv", a: pick(r, parts), b: to, shape: "mv-partition"}, true
		}
	case k < 86: // a directory renamed onto an existing empty one of its level (or a partition and a table, either way)
		level := pick(r, [][]string{parts, parts, tables, dbs, append(slices.Clip(parts), tables...)})
		var empty []string
		for _, p := range level {
			if x.emptyDir(p) {
				empty = append(empty, p)
			}
		}
		if len(level) < 2 {
			return xop{}, false
		}
		from := pick(r, level)
		if len(empty) == 0 {
			return xop{}, false
		}
		to := pick(r, empty)
		if to != from && !strings.HasPrefix(to, from+"/") {
			return xop{kind: "mv", a: from, b: to, shape: "mv-dir-onto-empty"}, true
		}
	case k < 89 && len(tables) > 0: // a table renamed, maybe into another database
		if to := g.fresh(pick(r, dbs), exactTables...); to != "" {
			return xop{kind: "mv", a: pick(r, tables), b: to, shape: "mv-table"}, true
		}
	case k < 90 && len(dbs) > 0:
		if to := g.fresh("", exactDBs...); to != "" {
			return xop{kind: "mv", a: pick(r, dbs), b: to, shape: "mv-db"}, true
		}
	case k < 95 && len(parts) > 0: // drop a partition (re-added by a later mkdir)
		return xop{kind: "rm-r", a: pick(r, parts), shape: "drop-partition"}, true
	case k < 98 && len(tables) > 0:
		return xop{kind: "rm-r", a: pick(r, tables), shape: "drop-table"}, true
	case k < 100 && len(dbs) > 0:
		return xop{kind: "rm-r", a: pick(r, dbs), shape: "drop-db"}, true
	}
	return xop{}, false
}
