package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/cmfs-project/cmfs/internal/wait"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Shape of the tree TestReplBootstrapRacing bootstraps: big enough that
// the walk takes a while, so the writer's events race with it.
const (
	raceParts    = 10
	racePerPart  = 80
	raceFileSize = 2048
)

// TestReplBootstrapRacing takes a BOOTSTRAP dump while a writer keeps
// changing the tree through the mount (overwrites, inserts, deletes,
// renames, appends, a partition dropped and re-added), then incremental
// dumps from the bootstrap's last event on, while the writer still runs
// and after it stopped, until no event is left. Loaded in order, the
// target must end equal to the source. Files are fetched with
// --source-state. The first BOOTSTRAP walks the tree; a second one, taken
// while the writer runs, lists the catalog (built by a walk that races
// the writer, then brought up to date), and is checked the same way.
func TestReplBootstrapRacing(t *testing.T) { replBootstrapRacing(t, false) }

// TestReplBootstrapRacingServe is TestReplBootstrapRacing with the
// BOOTSTRAP loaded through `replicad serve`.
func TestReplBootstrapRacingServe(t *testing.T) { replBootstrapRacing(t, true) }

// replBootstrapRacing is TestReplBootstrapRacing; viaServe loads the
// BOOTSTRAP through `replicad serve` (--source) instead.
func replBootstrapRacing(t *testing.T, viaServe bool) {
	replicadPath(t)
	m := mount(t)
	for _, d := range []string{"w.db", "w.db/t"} {
		if err := os.Mkdir(m.path(d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for p := range raceParts {
		dir := fmt.Sprintf("w.db/t/dt=%d", p)
		if err := os.Mkdir(m.path(dir), 0o755); err != nil {
			t.Fatal(err)
		}
		for f := range racePerPart {
			writeFile(t, m.path(fmt.Sprintf("%s/part-%d", dir, f)), raceContent(p*1000+f, raceFileSize))
		}
	}
	t.Logf("populated: %d files, events 1..%d", raceParts*racePerPart, lastEventID(t, m.State))

	ctx, cancel := context.WithCancel(context.Background())
	var (
		wg      sync.WaitGroup
		ops     atomic.Int64
		written error
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		written = raceWriter(ctx, m, &ops)
	}()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			wg.Wait()
		}
	}
	t.Cleanup(stop) // before the unmount, which runs later
	wait.For(t, 10*time.Second, "the writer to get going", func() bool { return ops.Load() >= 20 })

	dumps := t.TempDir()
	// The first BOOTSTRAP walks the tree (--walk), racing the writer, to
	// put the load's handling of the events that raced with it to the
	// test.
	boot := replDump(t, m.State, dumps, "--walk")
	if boot.Kind != "BOOTSTRAP" || boot.From != 0 {
		t.Fatalf("replicad dump without --from: got %+v, want a BOOTSTRAP from 0", boot)
	}
	fin := readFinished(t, boot.Dump)
	t.Logf("bootstrap pinned to event %d; the walk ended at %d (%d writer ops so far)", boot.To, fin.WalkEnd, ops.Load())
	if want := fmt.Sprintf("bootstrap-%d", boot.To); filepath.Base(boot.Dump) != want {
		t.Errorf("bootstrap dump %s pinned to event %d: named for another event (want %s)", boot.Dump, boot.To, want)
	}
	if fin.WalkEnd <= boot.To {
		t.Logf("no event raced with the walk this time")
	}

	// Incrementals while the writer runs, then after it stopped until
	// the journal is quiescent.
	var incs []dumpInfo
	from := boot.To + 1
	var boot2 dumpInfo
	for i := range 3 {
		var last uint64
		wait.For(t, 10*time.Second, fmt.Sprintf("events after %d", from-1), func() bool {
			last = lastEventID(t, m.State)
			return last >= from
		})
		incs = append(incs, incremental(t, m.State, dumps, from, last))
		from = last + 1
		if i == 1 {
			// A second BOOTSTRAP, from the catalog, still racing the
			// writer: its first walk races it, then the journal brings
			// it up to date; the dump lists the tree exactly as of its
			// pin, with no event racing it.
			boot2 = replDump(t, m.State, t.TempDir())
			fin2 := readFinished(t, boot2.Dump)
			if fin2.WalkEnd != boot2.To {
				t.Errorf("second bootstrap pinned to %d with walk_end %d: a catalog races no event", boot2.To, fin2.WalkEnd)
			}
		}
	}
	stop()
	if written != nil {
		t.Fatalf("writer: %v", written)
	}
	for {
		last := lastEventID(t, m.State)
		if last < from {
			break
		}
		incs = append(incs, incremental(t, m.State, dumps, from, last))
		from = last + 1
	}
	want := sourceTree(t, m)
	t.Logf("writer: %d operations; %d incrementals up to event %d", ops.Load(), len(incs), from-1)

	target := t.TempDir()
	src := fetchFrom{State: m.State}
	bootSrc := src
	if viaServe {
		bootSrc = fetchFrom{Addr: serve(t, m.State).Addr}
	}
	replLoad(t, boot.Dump, target, bootSrc)
	if st := statusOf(t, target); st.LastReplID != boot.To {
		t.Errorf("status after the bootstrap: last_repl_id %d, want %d", st.LastReplID, boot.To)
	}
	for _, d := range incs {
		replLoad(t, d.Dump, target, src)
	}
	checkTarget(t, "after the bootstrap and every incremental", target, want)
	if st := statusOf(t, target); st.LastReplID != from-1 {
		t.Errorf("status at the end: last_repl_id %d, want %d", st.LastReplID, from-1)
	}

	target2 := t.TempDir()
	replLoad(t, boot2.Dump, target2, bootSrc)
	replLoad(t, incremental(t, m.State, t.TempDir(), boot2.To+1, from-1).Dump, target2, src)
	checkTarget(t, "after the second (catalog) bootstrap and an incremental", target2, want)
}

// readFinished reads a dump's _finished_dump.
func readFinished(t *testing.T, dump string) (fin struct {
	To      uint64 `json:"to"`
	WalkEnd uint64 `json:"walk_end"`
}) {
	t.Helper()
	if err := json.Unmarshal(readFile(t, filepath.Join(dump, "_finished_dump")), &fin); err != nil {
		t.Fatalf("%s/_finished_dump: %v", dump, err)
	}
	return fin
}

// raceContent is n bytes that differ for every seed.
func raceContent(seed, n int) []byte {
	r := rand.New(rand.NewPCG(uint64(seed), 7))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// raceWriter changes the tree of TestReplBootstrapRacing through the
// mount until ctx ends, counting operations in ops.
func raceWriter(ctx context.Context, m *mounted, ops *atomic.Int64) error {
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	for i := 0; ctx.Err() == nil; i++ {
		dir := fmt.Sprintf("w.db/t/dt=%d", r.IntN(raceParts))
		entries, err := os.ReadDir(m.backing(dir))
		if err != nil {
			return err
		}
		var existing string
		if len(entries) > 0 {
			existing = dir + "/" + entries[r.IntN(len(entries))].Name()
		}
		content := raceContent(1_000_000+i, 1+r.IntN(2*raceFileSize))
		switch k := r.IntN(100); {
		case k < 2: // drop the partition and add it again
			if err := os.RemoveAll(m.path(dir)); err != nil {
				return err
			}
			if err := os.Mkdir(m.path(dir), 0o755); err != nil {
				return err
			}
			err = os.WriteFile(m.path(dir+"/part-0"), content, 0o644)
		case existing == "" || k < 25:
			err = os.WriteFile(m.path(fmt.Sprintf("%s/new-%d", dir, i)), content, 0o644)
		case k < 55:
			err = os.WriteFile(m.path(existing), content, 0o644)
		case k < 70:
			err = os.Remove(m.path(existing))
		case k < 85:
			err = os.Rename(m.path(existing), m.path(fmt.Sprintf("%s/mv-%d", dir, i)))
		default:
			var f *os.File
			if f, err = os.OpenFile(m.path(existing), os.O_WRONLY|os.O_APPEND, 0); err == nil {
				_, err = f.Write(content)
				if cerr := f.Close(); err == nil {
					err = cerr
				}
			}
		}
		if err != nil {
			return fmt.Errorf("operation %d: %w", i, err)
		}
		ops.Add(1)
	}
	return nil
}
