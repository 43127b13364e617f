package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/journal"
)

// failpointRow is one row of the protection table: a change made through
// the mount, and the failpoints (internal/failpoint, protect/failpoints.go) its
// steps pass. Every row starts from the same tree, made through a mount.
type failpointRow struct {
	name   string
	op     func(mnt string) error
	points []string
}

// failpointSetup is the tree every row starts from.
var failpointSetup = map[string]string{
	"f.db/t/p=1/part-0": "part zero, the original\n",
	"f.db/t/p=1/part-1": "part one, the original\n",
	"f.db/t/p=2/part-0": "other partition\n",
	"f.db/t/p=1/.tmp-9": "staged replacement\n",
	"notes/readme":      "outside the layout\n",
}

func failpointRows() []failpointRow {
	steps := func(change string, names ...string) []string {
		var out []string
		for _, n := range names {
			out = append(out, change+"/"+n)
		}
		return out
	}
	all := []string{"intended", "preserved", "applied", "flushed", "journaled"}
	noOrig := []string{"intended", "applied", "flushed", "journaled"}
	p := func(mnt, rel string) string { return filepath.Join(mnt, filepath.FromSlash(rel)) }
	rows := []failpointRow{
		{"unlink", func(m string) error { return os.Remove(p(m, "f.db/t/p=1/part-0")) }, steps("delete", all...)},
		{"rename over", func(m string) error { return os.Rename(p(m, "f.db/t/p=1/.tmp-9"), p(m, "f.db/t/p=1/part-1")) }, steps("rename", all...)},
		{"O_TRUNC overwrite", func(m string) error {
			return writeClose(p(m, "f.db/t/p=1/part-0"), os.O_WRONLY|os.O_TRUNC, []byte("new\n"))
		}, append(steps("truncate", all...), steps("write", "applied", "flushed", "journaled")...)},
		{"truncate smaller", func(m string) error { return os.Truncate(p(m, "f.db/t/p=1/part-1"), 4) }, steps("truncate", all...)},
		{"append", func(m string) error {
			return writeClose(p(m, "notes/readme"), os.O_WRONLY|os.O_APPEND, []byte("more\n"))
		}, steps("write", "intended", "applied", "flushed", "journaled")},
		{"create+write+close", func(m string) error {
			return writeClose(p(m, "f.db/t/p=1/part-7"), os.O_WRONLY|os.O_CREATE|os.O_EXCL, []byte("created\n"))
		}, steps("write", noOrig...)},
		{"rm -r partition", func(m string) error { return os.RemoveAll(p(m, "f.db/t/p=2")) },
			append(steps("delete", all...), steps("rmdir", noOrig...)...)},
		{"mkdir", func(m string) error { return os.Mkdir(p(m, "f.db/t/p=3"), 0o755) }, steps("mkdir", noOrig...)},
		{"link", func(m string) error { return os.Link(p(m, "f.db/t/p=1/part-1"), p(m, "f.db/t/p=1/part-1b")) }, steps("link", noOrig...)},
		{"symlink", func(m string) error { return os.Symlink("part-1", p(m, "f.db/t/p=1/latest")) }, steps("symlink", noOrig...)},
	}
	// The journal's own steps (journal/failpoints.go), in the rows that
	// preserve, create and swap: the group written to the WAL and not
	// synced, synced and not acknowledged, applied to bbolt.
	for i := range rows {
		switch rows[i].name {
		case "unlink", "create+write+close", "O_TRUNC overwrite":
			rows[i].points = append(rows[i].points, "journal/written", "journal/synced", "journal/applied")
		}
	}
	return rows
}

// TestFailpoints kills the mount at every step of every row of the
// protection table (a failpoint armed through the environment: the
// process SIGKILLs itself there), remounts, and checks that the journal
// lost nothing it had acknowledged (I1), that every original an event
// names is in cmroot (I2), and that its last word on every path is what
// the tree holds (I3): a change cut short is journaled whole or not at
// all (I4).
func TestFailpoints(t *testing.T) {
	requireFUSE(t)
	for _, mode := range syncModes {
		for _, row := range failpointRows() {
			for _, point := range row.points {
				if mode == "interval" && strings.HasSuffix(point, "/flushed") {
					// One syncfs per interval flushes for every change: no
					// change has a flush of its own to be killed after.
					continue
				}
				t.Run(mode+"/"+row.name+"/"+point, func(t *testing.T) {
					failpointCase(t, row, point, mode)
				})
			}
		}
	}
}

func failpointCase(t *testing.T, row failpointRow, point, mode string) {
	backing := filepath.Join(t.TempDir(), "backing")
	if err := os.Mkdir(backing, 0o755); err != nil {
		t.Fatal(err)
	}
	m := mountAt(t, backing)
	for rel, content := range failpointSetup {
		if err := os.MkdirAll(filepath.Dir(m.path(rel)), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, m.path(rel), []byte(content))
	}
	m.unmount(t)
	before := events(t, m.State)

	mp := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(mp, 0o755); err != nil {
		t.Fatal(err)
	}
	fg := startForeground(t, backing, mp, "CMFS_FAILPOINT="+point, "--sync="+mode)
	opErr := make(chan error, 1)
	go func() { opErr <- row.op(mp) }()
	select {
	case <-fg.exited:
	case <-time.After(20 * time.Second):
		fg.kill()
		t.Fatalf("the mount did not die at %s within 20s", point)
	}
	fg.exited <- nil
	fg.wait(t)
	select {
	case err := <-opErr:
		t.Logf("%s: %v", row.name, err)
	case <-time.After(10 * time.Second):
		t.Fatalf("%s still blocked after the mount died", row.name)
	}

	// Remounting runs recovery.
	m = mountAt(t, backing, "--sync="+mode)
	m.unmount(t)
	after := events(t, m.State)
	var bad []string
	bad = append(bad, lostEvents(before, after)...)
	bad = append(bad, lostOriginals(t, m.CMRoot, after)...)
	bad = append(bad, journalTreeViolations(t, backing, m.State)...)
	if len(bad) > 0 {
		t.Fatalf("killed at %s during %s, then remounted:\n  %s\nevents since the setup:\n  %s",
			point, row.name, strings.Join(bad, "\n  "), eventLines(after[len(before):]))
	}
}

// eventLines shows events one a line.
func eventLines(evs []journal.Event) string {
	var lines []string
	for _, e := range evs {
		lines = append(lines, eventLine(e))
	}
	return strings.Join(lines, "\n  ")
}
