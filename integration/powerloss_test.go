package integration

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/internal/statedir"
	"github.com/cmfs-project/cmfs/internal/wait"
	"github.com/cmfs-project/cmfs/journal"
)

// powerLossWorkload is what a shell does to a warehouse through the
// mount, never calling fsync: create, overwrite with >, append with >>,
// rm, write a temp file and mv -f it over an existing one, rm -r a
// partition.
const powerLossWorkload = `set -e
mkdir -p db.db/t/p=1 db.db/t/p=2 plain
echo one > db.db/t/p=1/f1
echo bye > db.db/t/p=1/f1
echo three > db.db/t/p=1/f3
rm db.db/t/p=1/f3
echo part-0 > db.db/t/p=1/part-0
echo more >> db.db/t/p=1/part-0
echo first > db.db/t/p=2/part-0
echo second > db.db/t/p=2/part-1
echo replacement > db.db/t/p=1/part-1.tmp
echo old > db.db/t/p=1/part-1
mv -f db.db/t/p=1/part-1.tmp db.db/t/p=1/part-1
rm -r db.db/t/p=2
echo notes > plain/notes.txt
echo appended >> plain/notes.txt
`

// TestPowerLoss runs the workload through cmfs over a backing directory
// on lazyfs (the state directory, journal and cmroot with it), kills the
// mount with SIGKILL, simulates a power failure, remounts and checks
// DESIGN.md's I1 (no acknowledged event lost), I2 (every original an
// event names is in cmroot with its checksum) and I3 (the journal
// describes the tree).
//
// In both durability modes: under --sync=interval the events are checked
// once an interval has passed (they are flushed then, and shown).
func TestPowerLoss(t *testing.T) {
	for _, mode := range syncModes {
		t.Run(mode, func(t *testing.T) { powerLoss(t, mode) })
	}
}

func powerLoss(t *testing.T, mode string) {
	l := mountLazy(t)
	backing := filepath.Join(l.Mountpoint(), "backing")
	if err := os.Mkdir(backing, 0o755); err != nil {
		t.Fatal(err)
	}
	m := mountAt(t, backing, "--sync="+mode)
	sh := exec.Command("sh", "-c", powerLossWorkload)
	sh.Dir = m.Mnt
	if out, err := sh.CombinedOutput(); err != nil {
		t.Fatalf("workload through the mount: %v\n%s", err, out)
	}
	if mode == "interval" {
		time.Sleep(200 * time.Millisecond) // four intervals: flushed
	}
	acked := events(t, m.State)
	before := journaledTree(t, backing, m.State)
	if v := journalTreeViolations(t, backing, m.State); len(v) > 0 {
		t.Fatalf("before the crash, the journal does not describe the tree:\n  %s", strings.Join(v, "\n  "))
	}

	// kill -9, then the power goes.
	m.crash(t)
	crashLazy(t, l)

	if res := cmfs(t, "fsck", "--state", m.State); res.Code != 0 {
		t.Logf("cmfs fsck after the power loss, before the remount: %v", res)
	}
	m2 := mountAt(t, backing)
	after := events(t, m2.State)
	var broken []string
	broken = append(broken, lostEvents(acked, after)...)
	broken = append(broken, lostOriginals(t, m2.CMRoot, after)...)
	for _, v := range journalTreeViolations(t, backing, m2.State) {
		broken = append(broken, "I3 "+v)
	}
	if len(broken) > 0 {
		var log strings.Builder
		for _, ev := range after[min(len(acked), len(after)):] {
			fmt.Fprintf(&log, "  recovery: %s\n", eventLine(ev))
		}
		if entries, err := os.ReadDir(filepath.Join(m2.CMRoot, ".corrupt")); err == nil {
			for _, e := range entries {
				fmt.Fprintf(&log, "  cmroot/.corrupt/%s\n", e.Name())
			}
		}
		for _, p := range sortedKeys(before) {
			fmt.Fprintf(&log, "  before the crash: %s: %v\n", p, before[p])
		}
		t.Errorf("after kill -9 and a power loss on the backing filesystem, %d invariant violations:\n  %s\n%s",
			len(broken), strings.Join(broken, "\n  "), log.String())
	}
}

// lostEvents checks I1: every event acknowledged before the crash is in
// the journal after it, unchanged.
func lostEvents(acked, after []journal.Event) []string {
	byID := map[uint64]journal.Event{}
	for _, ev := range after {
		byID[ev.ID] = ev
	}
	var out []string
	for _, ev := range acked {
		got, ok := byID[ev.ID]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("I1 event lost: %s", eventLine(ev)))
		case eventLine(got) != eventLine(ev):
			out = append(out, fmt.Sprintf("I1 event changed: %s, now %s", eventLine(ev), eventLine(got)))
		}
	}
	return out
}

// lostOriginals checks I2: every cmroot entry an event names exists with
// the size and xxh64 the event gives.
func lostOriginals(t testing.TB, cmroot string, evs []journal.Event) []string {
	t.Helper()
	var out []string
	entries := map[string]journal.File{} // path of the entry -> what an event says
	for _, ev := range evs {
		for _, f := range ev.Files {
			if f.CM == "" {
				continue
			}
			p, err := cmEntry(cmroot, f.CM)
			if err != nil {
				out = append(out, fmt.Sprintf("I2 event %d %s: original of %s: no cmroot entry %s", ev.ID, ev.Type, f.Path, f.CM))
				continue
			}
			fi, err := os.Stat(p)
			if err != nil || fi.Size() != f.Size {
				out = append(out, fmt.Sprintf("I2 event %d %s: original of %s: cmroot entry %s has %v bytes (%v), want %d",
					ev.ID, ev.Type, f.Path, f.CM, sizeOf(fi), err, f.Size))
				continue
			}
			entries[p] = f
		}
	}
	paths := sortedKeys(entries)
	sums := xxhsums(t, paths...)
	for _, p := range paths {
		if f := entries[p]; sums[p] != f.XXH64 {
			out = append(out, fmt.Sprintf("I2 original of %s: cmroot entry %s hashes to %s", f.Path, f.CM, sums[p]))
		}
	}
	return out
}

func sizeOf(fi os.FileInfo) any {
	if fi == nil {
		return "no"
	}
	return fi.Size()
}

// eventLine is an event as `cmfs events` prints it, without its time.
func eventLine(ev journal.Event) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d %s %s", ev.ID, ev.Type, ev.Path)
	if ev.NewPath != "" {
		fmt.Fprintf(&b, " -> %s", ev.NewPath)
	}
	for _, f := range ev.Files {
		fmt.Fprintf(&b, " %s:%d:%s", f.Path, f.Size, f.XXH64)
		if f.CM != "" {
			fmt.Fprintf(&b, ":%s", f.CM)
		}
	}
	return b.String()
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// TestPowerLossMovedBeforeFlush: under --sync=interval what an event
// names is flushed up to an interval after the change. A file written,
// closed and renamed within the interval holds, after the flush and a
// power loss, what the journal says it holds at its new name.
func TestPowerLossMovedBeforeFlush(t *testing.T) {
	l := mountLazy(t)
	backing := filepath.Join(l.Mountpoint(), "backing")
	if err := os.Mkdir(backing, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(statedir.TestBootIDEnv, "moved-before-flush-boot-0")
	m := mountAt(t, backing, "--sync=interval:1s")
	if err := os.MkdirAll(m.path("m.db/t/p=1"), 0o755); err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("staged, then moved\n"), 300)
	writeFile(t, m.path("m.db/t/p=1/part.tmp"), data)
	if err := os.Rename(m.path("m.db/t/p=1/part.tmp"), m.path("m.db/t/p=1/part-0")); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "the rename's event to be flushed", func() bool {
		evs := events(t, m.State)
		return len(evs) > 0 && evs[len(evs)-1].Type == journal.Rename
	})
	acked := events(t, m.State)

	m.crash(t)
	crashLazy(t, l)
	t.Setenv(statedir.TestBootIDEnv, "moved-before-flush-boot-1")

	m2 := mountAt(t, backing, "--sync=interval:1s")
	wantContent(t, m2.backing("m.db/t/p=1/part-0"), data)
	broken := lostEvents(acked, events(t, m2.State))
	broken = append(broken, journalTreeViolations(t, backing, m2.State)...)
	if len(broken) > 0 {
		t.Errorf("after the power loss:\n  %s", strings.Join(broken, "\n  "))
	}
}
