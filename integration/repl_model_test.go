package integration

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path"
	"strings"
	"testing"
	"time"
)

// replModelOps is how many warehouse operations a model test applies.
const replModelOps = 300

// TestReplModel applies seeded random warehouse operations through a cmfs
// mount, recording the source tree after each one, then cuts dumps at
// random event ids (consecutive ranges from event 1) and loads them in
// order, fetching with --source-state: after each load the target must
// equal the source as it was at the dump's last event, byte for byte.
// Rerun a failure with -seed.
func TestReplModel(t *testing.T) { replModel(t, false) }

// TestReplModelServe is TestReplModel with every file fetched through
// `replicad serve` (load --source).
func TestReplModelServe(t *testing.T) { replModel(t, true) }

// replModel is the model test; viaServe fetches every file through
// `replicad serve` (load --source), else with load --source-state.
func replModel(t *testing.T, viaServe bool) {
	replicadPath(t)
	seed := *seedFlag
	if seed == 0 {
		seed = time.Now().UnixNano()
	}
	t.Logf("seed %d (rerun with: go test ./integration/ -run %s -seed %d)", seed, t.Name(), seed)
	rng := rand.New(rand.NewPCG(uint64(seed), uint64(seed)>>32|1))
	m := mount(t)
	h := newHistory(t, m)
	w := &warehouseOps{t: t, m: m, rng: rng}
	kinds := map[string]int{}
	for i := 0; i < replModelOps; i++ {
		op := w.step()
		kinds[strings.Fields(op)[0]]++
		h.record(t, fmt.Sprintf("op %d: %s", i, op))
	}
	t.Logf("%d operations %v, %d events", replModelOps, kinds, h.last())

	// Cut at ids that end an operation, so each has a recorded tree.
	var cuts []dumpInfo
	dumps := t.TempDir()
	for i := 1; i < len(h.ids); {
		j := min(len(h.ids)-1, i+rng.IntN(40))
		cuts = append(cuts, incremental(t, m.State, dumps, h.ids[i-1]+1, h.ids[j]))
		i = j + 1
	}
	src := fetchFrom{State: m.State}
	if viaServe {
		src = fetchFrom{Addr: serve(t, m.State).Addr}
	}
	target := t.TempDir()
	for _, c := range cuts {
		l := replLoad(t, c.Dump, target, src)
		what := fmt.Sprintf("load of [%d, %d] %s (last op: %s)", c.From, c.To, src, h.ops[c.To])
		if l.From != c.From || l.To != c.To {
			t.Errorf("%s: load reports [%d, %d]", what, l.From, l.To)
		}
		checkTarget(t, what, target, h.at(t, c.To))
	}
	if st := statusOf(t, target); st.LastReplID != h.last() {
		t.Errorf("status: last_repl_id %d, want %d", st.LastReplID, h.last())
	}
	t.Logf("%d dumps loaded", len(cuts))
}

// warehouseOps makes random Hive-like changes through a mount: databases,
// tables and partitions created, dropped (rm -r) and renamed, files
// inserted, overwritten, appended to, deleted and renamed.
type warehouseOps struct {
	t   testing.TB
	m   *mounted
	rng *rand.Rand
}

func (w *warehouseOps) exists(rel string) bool {
	_, err := os.Lstat(w.m.backing(rel))
	return err == nil
}

// files lists the regular files directly in dir.
func (w *warehouseOps) files(dir string) []string {
	entries, _ := os.ReadDir(w.m.backing(dir))
	var files []string
	for _, e := range entries {
		if e.Type().IsRegular() {
			files = append(files, dir+"/"+e.Name())
		}
	}
	return files
}

// step applies one operation and describes it.
func (w *warehouseOps) step() string {
	r := w.rng
	db := []string{"sales.db", "web.db"}[r.IntN(2)]
	tbl := fmt.Sprintf("%s/t%d", db, r.IntN(3))
	part := fmt.Sprintf("%s/dt=%d", tbl, r.IntN(4))
	if !w.exists(db) {
		return w.mkdir(db)
	}
	if !w.exists(tbl) {
		return w.mkdir(tbl)
	}
	dir := part
	if r.IntN(5) == 0 {
		dir = tbl // files directly in the table: an unpartitioned table
	}
	file := fmt.Sprintf("%s/part-%d", dir, r.IntN(6))
	existing := w.files(dir)
	switch k := r.IntN(100); {
	case k < 1:
		return w.rmrf(db)
	case k < 4:
		return w.rmrf(tbl)
	case k < 7:
		if to := fmt.Sprintf("%s/t%d", db, r.IntN(3)); !w.exists(to) {
			return w.rename(tbl, to)
		}
	case !w.exists(dir):
		return w.mkdir(dir)
	case k < 12 && dir == part:
		return w.rmrf(part)
	case k < 16 && dir == part:
		if to := fmt.Sprintf("%s/dt=%d", tbl, 4+r.IntN(3)); !w.exists(to) {
			return w.rename(part, to)
		}
	case len(existing) == 0:
	case k < 28:
		return w.appendTo(existing[r.IntN(len(existing))])
	case k < 40:
		return w.remove(existing[r.IntN(len(existing))])
	case k < 58:
		// Within the directory, or to another partition; over an
		// existing file sometimes.
		from := existing[r.IntN(len(existing))]
		to := file
		if other := fmt.Sprintf("%s/dt=%d/part-%d", tbl, r.IntN(4), r.IntN(6)); r.IntN(3) == 0 && w.exists(path.Dir(other)) {
			to = other
		}
		if to != from {
			return w.rename(from, to)
		}
	case k < 75:
		file = existing[r.IntN(len(existing))]
	}
	if !w.exists(dir) {
		return w.mkdir(dir)
	}
	return w.write(file) // insert, or overwrite when it exists
}

// content is random bytes of a size drawn from a small set, so that an
// overwrite often keeps the size and only the checksum tells them apart.
func (w *warehouseOps) content() []byte {
	sizes := []int{0, 1, 16, 16, 16, 300, 4096, 70000}
	b := make([]byte, sizes[w.rng.IntN(len(sizes))])
	for i := range b {
		b[i] = byte(w.rng.Uint32())
	}
	return b
}

func (w *warehouseOps) mkdir(rel string) string {
	w.t.Helper()
	if err := os.Mkdir(w.m.path(rel), 0o755); err != nil {
		w.t.Fatal(err)
	}
	return "mkdir " + rel
}

func (w *warehouseOps) rmrf(rel string) string {
	w.t.Helper()
	if err := os.RemoveAll(w.m.path(rel)); err != nil {
		w.t.Fatal(err)
	}
	return "rm -r " + rel
}

func (w *warehouseOps) rename(from, to string) string {
	w.t.Helper()
	if err := os.Rename(w.m.path(from), w.m.path(to)); err != nil {
		w.t.Fatal(err)
	}
	return "mv " + from + " " + to
}

func (w *warehouseOps) remove(rel string) string {
	w.t.Helper()
	if err := os.Remove(w.m.path(rel)); err != nil {
		w.t.Fatal(err)
	}
	return "rm " + rel
}

func (w *warehouseOps) write(rel string) string {
	w.t.Helper()
	op := "insert"
	if w.exists(rel) {
		op = "overwrite"
	}
	b := w.content()
	if err := os.WriteFile(w.m.path(rel), b, 0o644); err != nil {
		w.t.Fatal(err)
	}
	return fmt.Sprintf("%s %s (%d bytes)", op, rel, len(b))
}

func (w *warehouseOps) appendTo(rel string) string {
	w.t.Helper()
	b := w.content()
	f, err := os.OpenFile(w.m.path(rel), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		w.t.Fatal(err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		w.t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		w.t.Fatal(err)
	}
	return fmt.Sprintf("append %d bytes to %s", len(b), rel)
}
