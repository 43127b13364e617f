package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"github.com/cmfs-project/cmfs/internal/wait"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestReplBadInput feeds `replicad load` what it must refuse — a dump
// without _finished_dump, a mangled _files line, a dump past a gap, a
// checksum no copy has — and kills the source in the middle of a load.
// Each time the error must be one clear line, the target must be at a
// consistent event (its tree equal to the source's at its last_repl_id),
// and a rerun with good input must complete.
func TestReplBadInput(t *testing.T) {
	replicadPath(t)
	m := mount(t)
	h := newHistory(t, m)
	for _, d := range []string{"w.db", "w.db/t", "w.db/t/p=1"} {
		if err := os.Mkdir(m.path(d), 0o755); err != nil {
			t.Fatal(err)
		}
		h.record(t, "mkdir "+d)
	}
	write := func(rel string, data string) {
		t.Helper()
		writeFile(t, m.path(rel), []byte(data))
		h.record(t, "write "+rel)
	}
	for i := range 4 {
		write(fmt.Sprintf("w.db/t/p=1/f%d", i), fmt.Sprintf("first batch, file %d\n", i))
	}
	k1 := h.last()
	for i := range 4 {
		write(fmt.Sprintf("w.db/t/p=1/g%d", i), fmt.Sprintf("second batch, file %d\n", i))
	}
	write("w.db/t/p=1/f0", "f0, overwritten in the second batch\n")
	k2 := h.last()
	for i := range 2 {
		write(fmt.Sprintf("w.db/t/p=1/h%d", i), fmt.Sprintf("third batch, file %d\n", i))
	}
	k3 := h.last()
	dumps := t.TempDir()
	d1 := incremental(t, m.State, dumps, 1, k1)
	d2 := incremental(t, m.State, dumps, k1+1, k2)
	d3 := incremental(t, m.State, dumps, k2+1, k3)
	src := fetchFrom{State: m.State}

	// consistent checks that target is exactly at a recorded event and
	// returns it.
	consistent := func(t *testing.T, target string) uint64 {
		t.Helper()
		var last uint64
		if _, err := os.Stat(filepath.Join(target, ".replstate")); err == nil {
			last = statusOf(t, target).LastReplID
		}
		checkTarget(t, fmt.Sprintf("target at event %d", last), target, h.at(t, last))
		return last
	}

	t.Run("truncated", func(t *testing.T) {
		bad := copyDump(t, d1.Dump)
		if err := os.Remove(filepath.Join(bad, "_finished_dump")); err != nil {
			t.Fatal(err)
		}
		target := t.TempDir()
		args := loadArgs(bad, target, src)
		expectReplicadRefusal(t, args, replicad(t, args...), "_finished_dump|incomplete")
		if last := consistent(t, target); last != 0 {
			t.Errorf("an incomplete dump moved the target to event %d", last)
		}
		replLoad(t, d1.Dump, target, src)
		if last := consistent(t, target); last != k1 {
			t.Errorf("rerun with the whole dump: target at %d, want %d", last, k1)
		}
	})

	t.Run("mangled _files line", func(t *testing.T) {
		bad := copyDump(t, d1.Dump)
		ev, files := eventWithFiles(t, bad, 1)
		lines := strings.SplitAfter(string(readFile(t, files)), "\n")
		f := strings.Split(lines[0], "#")
		f[1] = "12x" // the size
		lines[0] = strings.Join(f, "#")
		if err := os.WriteFile(files, []byte(strings.Join(lines, "")), 0o644); err != nil {
			t.Fatal(err)
		}
		target := t.TempDir()
		args := loadArgs(bad, target, src)
		expectReplicadRefusal(t, args, replicad(t, args...), "_files", "line 1")
		if last := consistent(t, target); last >= ev {
			t.Errorf("target at %d: the event with the mangled line (%d) counts as applied", last, ev)
		}
		replLoad(t, d1.Dump, target, src)
		if last := consistent(t, target); last != k1 {
			t.Errorf("rerun with the good dump: target at %d, want %d", last, k1)
		}
	})

	t.Run("gap", func(t *testing.T) {
		target := t.TempDir()
		replLoad(t, d1.Dump, target, src)
		args := loadArgs(d3.Dump, target, src)
		expectReplicadRefusal(t, args, replicad(t, args...), fmt.Sprint(k1+1), "missing|gap")
		if last := consistent(t, target); last != k1 {
			t.Errorf("after the refused gap: target at %d, want %d", last, k1)
		}
		replLoad(t, d2.Dump, target, src)
		replLoad(t, d3.Dump, target, src)
		if last := consistent(t, target); last != k3 {
			t.Errorf("after filling the gap: target at %d, want %d", last, k3)
		}
	})

	t.Run("checksum that matches nowhere", func(t *testing.T) {
		target := t.TempDir()
		replLoad(t, d1.Dump, target, src)
		bad := copyDump(t, d2.Dump)
		ev, files := eventWithFiles(t, bad, 1)
		line := string(readFile(t, files))
		sum := strings.Split(line, "#")[2]
		const nowhere = "00000000deadbeef"
		for _, name := range []string{"_files", "_metadata"} {
			p := filepath.Join(filepath.Dir(files), name)
			b := readFile(t, p)
			if !bytes.Contains(b, []byte(sum)) {
				t.Fatalf("%s does not hold the checksum %s of _files", p, sum)
			}
			if err := os.WriteFile(p, bytes.ReplaceAll(b, []byte(sum), []byte(nowhere)), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		args := loadArgs(bad, target, src)
		expectReplicadRefusal(t, args, replicad(t, args...), nowhere)
		if last := consistent(t, target); last != ev-1 {
			t.Errorf("after the failed event %d: target at %d, want %d", ev, last, ev-1)
		}
		replLoad(t, d2.Dump, target, src)
		if last := consistent(t, target); last != k2 {
			t.Errorf("rerun with the good dump: target at %d, want %d", last, k2)
		}
	})

	t.Run("source killed mid-load", func(t *testing.T) {
		sourceKilledMidLoad(t, m, h, dumps)
	})
}

// sourceKilledMidLoad adds 200 files of 1 MiB, loads everything through
// `replicad serve`, kills the server (SIGKILL) after a few events, and
// restarts it on the same address: the load must fail clearly, leave the
// target at a consistent event, and a rerun must complete.
func sourceKilledMidLoad(t *testing.T, m *mounted, h *history, dumps string) {
	const (
		nBig    = 200
		bigSize = 1 << 20
	)
	if err := os.Mkdir(m.path("w.db/t/p=big"), 0o755); err != nil {
		t.Fatal(err)
	}
	base := h.record(t, "mkdir w.db/t/p=big")
	values := map[string]string{} // path -> tree value
	b := make([]byte, bigSize)
	for i := range nBig {
		rand.NewChaCha8([32]byte{byte(i), byte(i >> 8), 'b', 'i', 'g'}).Read(b)
		rel := fmt.Sprintf("w.db/t/p=big/part-%03d", i)
		writeFile(t, m.path(rel), b)
		values[rel] = fileValue(b)
	}
	last := lastEventID(t, m.State)
	// The event that wrote each big file's content.
	wroteAt := map[string]uint64{}
	for _, ev := range eventsFrom(t, m.State, base+1) {
		for _, f := range ev.Files {
			if _, ok := values[f.Path]; ok && f.CM == "" {
				wroteAt[f.Path] = ev.ID
			}
		}
	}
	if len(wroteAt) != nBig {
		t.Fatalf("the journal names %d of the %d big files", len(wroteAt), nBig)
	}
	ids := make([]uint64, 0, nBig)
	for _, id := range wroteAt {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	killAfter := ids[3] // kill once a few big files are in

	all := replDump(t, m.State, dumps, "--from", "1")
	if all.To != last {
		t.Fatalf("dump from 1: to %d, want %d", all.To, last)
	}
	srv := serve(t, m.State)
	var target string
	for attempt := 1; ; attempt++ {
		target = t.TempDir()
		load := startProc(t, replicadPath(t), loadArgs(all.Dump, target, fetchFrom{Addr: srv.Addr})...)
		// Progress shows in the files that appear (the state advances
		// only once per stretch of events).
		killed := wait.Until(60*time.Second, func() bool {
			des, _ := os.ReadDir(filepath.Join(target, "w.db/t/p=big"))
			return load.exited() || len(des) >= 4
		}) && !load.exited()
		if killed {
			srv.kill()
		}
		res := load.wait(t, 60*time.Second)
		if res.Code != 0 {
			if !killed {
				t.Fatalf("load failed before the source was killed: %v", res)
			}
			expectReplicadRefusal(t, loadArgs(all.Dump, target, fetchFrom{Addr: srv.Addr}), res)
			break
		}
		if attempt == 3 {
			t.Fatalf("the load finished before the kill took effect, %d times", attempt)
		}
		t.Logf("attempt %d: the load finished before the kill; again", attempt)
		if killed {
			srv = restartServe(t, srv)
		}
	}

	got := statusOf(t, target).LastReplID
	if got < killAfter || got >= last {
		t.Errorf("after the kill: last_repl_id %d, want in [%d, %d): the failed load records the last event it applied in full", got, killAfter, last)
	}
	// At got: the tree at base plus every big file written by then.
	want := maps.Clone(h.at(t, base))
	for p, id := range wroteAt {
		if id <= got {
			want[p] = values[p]
		}
	}
	checkTarget(t, fmt.Sprintf("after the source was killed, target at event %d", got), target, want)

	srv = restartServe(t, srv)
	l := replLoad(t, all.Dump, target, fetchFrom{Addr: srv.Addr})
	t.Logf("rerun: %+v", l)
	if st := statusOf(t, target); st.LastReplID != last {
		t.Errorf("after the rerun: last_repl_id %d, want %d", st.LastReplID, last)
	}
	checkTarget(t, "after the rerun", target, sourceTree(t, m))
}

// restartServe starts a killed server again on the same address.
func restartServe(t *testing.T, old *server) *server {
	t.Helper()
	s, err := serveAt(t, old.State, old.Addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// stateID reads a target's last_repl_id straight from its .replstate, 0
// if there is none (yet): cheap enough to poll.
func stateID(target string) uint64 {
	var st struct {
		LastReplID uint64 `json:"last_repl_id"`
	}
	b, err := os.ReadFile(filepath.Join(target, ".replstate"))
	if err != nil || json.Unmarshal(b, &st) != nil {
		return 0
	}
	return st.LastReplID
}

// copyDump copies a dump directory into a fresh temporary directory.
func copyDump(t *testing.T, dump string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), filepath.Base(dump))
	if out, err := exec.Command("cp", "-a", dump, dst).CombinedOutput(); err != nil {
		t.Fatalf("cp -a %s %s: %v %s", dump, dst, err, out)
	}
	return dst
}

// eventWithFiles returns the id and _files path of the n-th (from 0)
// event directory of an INCREMENTAL dump whose _files is not empty.
func eventWithFiles(t *testing.T, dump string, n int) (uint64, string) {
	t.Helper()
	entries, err := os.ReadDir(dump)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries { // ReadDir sorts; the names sort in id order
		id, err := strconv.ParseUint(e.Name(), 10, 64)
		if err != nil || !e.IsDir() {
			continue
		}
		p := filepath.Join(dump, e.Name(), "_files")
		if b, err := os.ReadFile(p); err == nil && len(b) > 0 {
			if n == 0 {
				return id, p
			}
			n--
		}
	}
	t.Fatalf("%s: not enough events with files", dump)
	return 0, ""
}
