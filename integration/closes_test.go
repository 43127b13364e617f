package integration

import (
	"cmp"
	"encoding/json"
	"fmt"
	"github.com/cmfs-project/cmfs/internal/wait"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/journal"
)

// cmEntries lists the names of the entries in cmroot.
func cmEntries(t *testing.T, root string) []string {
	t.Helper()
	var names []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && p != root {
			return filepath.SkipDir
		}
		if d.Type().IsRegular() && !strings.HasPrefix(d.Name(), ".") {
			names = append(names, d.Name())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// orphans returns the cmroot entries `cmfs fsck` finds no event naming.
func orphans(t *testing.T, state string) []string {
	t.Helper()
	res := cmfs(t, "fsck", "--state", state, "--json")
	if res.Code != 0 {
		t.Fatalf("cmfs fsck: %v", res)
	}
	var r struct {
		Orphans []string `json:"orphans"`
	}
	if err := json.Unmarshal([]byte(res.Stdout), &r); err != nil {
		t.Fatalf("cmfs fsck --json: %v\n%s", err, res.Stdout)
	}
	return r.Orphans
}

// TestOpenReadWriteWithoutWrites: a file opened for reading and writing
// and closed without a write leaves cmroot and the journal as they were;
// one written to keeps its original.
func TestOpenReadWriteWithoutWrites(t *testing.T) {
	m := mount(t)
	data := make([]byte, 1<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	writeFile(t, m.path("o1"), data)
	entries, last := cmEntries(t, m.CMRoot), lastID(t, m.State)

	// Twice: once through a descriptor dup'd by the shell as well.
	py := runTool(t, 30*time.Second, "python3", "-c", "import sys; open(sys.argv[1], 'r+b').close()", m.path("o1"))
	sh := runTool(t, 30*time.Second, "sh", "-c", `exec 3<>"$0"; exec 4>&3; exec 3>&- 4>&-`, m.path("o1"))
	for _, r := range []result{py, sh} {
		if r.Code != 0 {
			t.Fatalf("open r+w: %v", r)
		}
	}
	// The kernel sends RELEASE, which drops the unused copy, after close
	// has returned: wait for it, a while.
	if !wait.Until(5*time.Second, func() bool { return slices.Equal(cmEntries(t, m.CMRoot), entries) }) {
		t.Errorf("cmroot after r+w opens without writes: %v, want %v", cmEntries(t, m.CMRoot), entries)
	}
	if got := lastID(t, m.State); got != last {
		t.Errorf("last event after r+w opens without writes: %d, want %d", got, last)
	}
	if o := orphans(t, m.State); len(o) != 0 {
		t.Errorf("fsck orphans after r+w opens without writes: %v", o)
	}

	// With a write, the original is kept and named by the event.
	w := runTool(t, 30*time.Second, "python3", "-c", "import sys; f = open(sys.argv[1], 'r+b'); f.write(b'x'); f.close()", m.path("o1"))
	if w.Code != 0 {
		t.Fatalf("open r+w and write: %v", w)
	}
	evs := eventsFrom(t, m.State, last+1)
	var orig string
	for _, e := range evs {
		for _, f := range e.Files {
			orig = cmp.Or(orig, f.CM)
		}
	}
	if len(evs) != 1 || evs[0].Type != journal.Write || orig == "" {
		t.Fatalf("events after a write: %+v, want one WRITE naming the original", evs)
	}
	if got := cmEntries(t, m.CMRoot); !slices.Contains(got, filepath.Base(orig)) {
		t.Errorf("cmroot %v lacks the original %s", got, orig)
	}
	if o := orphans(t, m.State); len(o) != 0 {
		t.Errorf("fsck orphans after a write: %v", o)
	}
}

// TestEventsPerCommand: each shell command journals one event per change
// it makes, not one per close of a descriptor the shell dup'd.
func TestEventsPerCommand(t *testing.T) {
	m := mount(t)
	writeFile(t, m.path("src"), []byte("source content\n"))
	tests := []struct {
		name  string
		cmd   string
		types []journal.Type
	}{
		{"touch new", "touch f", []journal.Type{journal.Write}},
		{"touch existing", "touch f", nil},
		// A new file: the shell's first close (of the descriptor it dup'd
		// to stdout) journals the creation, before close returns, since
		// FUSE does not say whether it is the last; then the content.
		{"echo > new", "echo hello > e", []journal.Type{journal.Write, journal.Write}},
		{"echo > existing", "echo again > e", []journal.Type{journal.Truncate, journal.Write}},
		{"echo >> existing", "echo more >> e", []journal.Type{journal.Write}},
		{"head -c 1M > new", "head -c 1048576 /dev/zero > h", []journal.Type{journal.Write, journal.Write}},
		{"head -c 1M > existing", "head -c 1048576 /dev/zero > h", []journal.Type{journal.Truncate, journal.Write}},
		{"truncate -s 2", "truncate -s 2 e", []journal.Type{journal.Truncate}},
		{"truncate same size", "truncate -s 2 e", nil},
		{"cp new", "cp src c", []journal.Type{journal.Write}},
		{"cp over", "cp e c", []journal.Type{journal.Truncate, journal.Write}},
		{"mv", "mv c c2", []journal.Type{journal.Rename}},
		{"mv over", "mv c2 e", []journal.Type{journal.Rename}},
		{"dd conv=notrunc", "dd if=src of=e bs=4 count=1 conv=notrunc status=none", []journal.Type{journal.Write}},
	}
	var table strings.Builder
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			from := lastID(t, m.State) + 1
			res := runTool(t, 30*time.Second, "sh", "-c", "cd \"$0\" && "+tt.cmd, m.Mnt)
			if res.Code != 0 {
				t.Fatalf("%s: %v", tt.cmd, res)
			}
			var got []journal.Type
			for _, e := range eventsFrom(t, m.State, from) {
				got = append(got, e.Type)
			}
			fmt.Fprintf(&table, "%-55s %d %v\n", tt.cmd, len(got), got)
			if !slices.Equal(got, tt.types) {
				t.Errorf("%s journaled %v, want %v", tt.cmd, got, tt.types)
			}
		})
	}
	t.Logf("events per command:\n%s", table.String())
}
