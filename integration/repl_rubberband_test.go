package integration

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/cmfs-project/cmfs/journal"
)

// TestReplRubberbanding is the scenario of Hive's replication design:
// partition p=1 is added with a file (event A), an incremental dump ends
// at A, then p=1 is dropped (B) and added again with other bytes (C). A
// load of the first dump must give the target the event-A bytes, which by
// then exist only in cmroot, not the live ones; loading B..C must then
// leave the target with the new bytes and nothing else.
func TestReplRubberbanding(t *testing.T) {
	replicadPath(t)
	m := mount(t)
	dumps := t.TempDir()

	// part-0 keeps its size across the drop, so the live file looks like
	// a match until its checksum is computed; part-1 changes size.
	old0, new0 := []byte("event A bytes of part-0\n"), []byte("event C bytes of part-0\n")
	old1, new1 := bytes.Repeat([]byte("A"), 3000), bytes.Repeat([]byte("C"), 1234)
	for _, d := range []string{"default.db", "default.db/person", "default.db/person/p=1"} {
		if err := os.Mkdir(m.path(d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, m.path("default.db/person/p=1/part-0"), old0)
	writeFile(t, m.path("default.db/person/p=1/part-1"), old1)
	a := lastEventID(t, m.State)
	treeA := sourceTree(t, m)
	first := incremental(t, m.State, dumps, 1, a)
	// A dump holds metadata only: the bytes stay at the source.
	filepath.WalkDir(first.Dump, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && bytes.Contains(readFile(t, p), old0) {
			t.Errorf("dump file %s holds the content of part-0", p)
		}
		return nil
	})

	if err := os.RemoveAll(m.path("default.db/person/p=1")); err != nil {
		t.Fatal(err)
	}
	b := lastEventID(t, m.State)
	if err := os.Mkdir(m.path("default.db/person/p=1"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, m.path("default.db/person/p=1/part-0"), new0)
	writeFile(t, m.path("default.db/person/p=1/part-1"), new1)
	c := lastEventID(t, m.State)
	treeC := sourceTree(t, m)
	if b <= a || c <= b {
		t.Fatalf("event ids: A=%d B=%d C=%d, want A < B < C", a, b, c)
	}
	for _, old := range [][]byte{old0, old1} {
		name := journal.Sum(old) + "-" + strconv.Itoa(len(old))
		if _, err := cmEntry(m.CMRoot, name); err != nil {
			t.Fatalf("the event-A content was not preserved: %v", err)
		}
	}
	second := incremental(t, m.State, dumps, a+1, c)
	t.Logf("A=%d B=%d C=%d; dumps %s, %s", a, b, c, first.Dump, second.Dump)

	srv := serve(t, m.State)
	for _, tc := range []struct {
		name string
		src  fetchFrom
	}{{"source-state", fetchFrom{State: m.State}}, {"serve", fetchFrom{Addr: srv.Addr}}} {
		src := tc.src
		t.Run(tc.name, func(t *testing.T) {
			target := filepath.Join(t.TempDir(), "target")
			l := replLoad(t, first.Dump, target, src)
			if l.From != 1 || l.To != a || l.Files != 2 || l.Bytes != int64(len(old0)+len(old1)) {
				t.Errorf("load [1, A=%d]: got %+v, want from 1, to %d, 2 files, %d bytes", a, l, a, len(old0)+len(old1))
			}
			checkTarget(t, "after the dump ending at A", target, treeA)
			if got := readFile(t, filepath.Join(target, "default.db/person/p=1/part-0")); !bytes.Equal(got, old0) {
				t.Fatalf("target part-0 after [1, A]: got %q, want the event-A bytes %q", got, old0)
			}
			if st := statusOf(t, target); st.LastReplID != a {
				t.Errorf("status after [1, A]: last_repl_id %d, want %d", st.LastReplID, a)
			}

			again := replLoad(t, first.Dump, target, src)
			if again.Applied != 0 || again.Files != 0 {
				t.Errorf("loading [1, A] twice: got %+v, want nothing applied", again)
			}
			checkTarget(t, "after loading [1, A] twice", target, treeA)

			l = replLoad(t, second.Dump, target, src)
			if l.From != a+1 || l.To != c {
				t.Errorf("load [A+1, C]: got %+v, want from %d to %d", l, a+1, c)
			}
			checkTarget(t, "after the dump ending at C", target, treeC)
			if got := readFile(t, filepath.Join(target, "default.db/person/p=1/part-0")); !bytes.Equal(got, new0) {
				t.Fatalf("target part-0 after [A+1, C]: got %q, want %q", got, new0)
			}
			if st := statusOf(t, target); st.LastReplID != c {
				t.Errorf("status after [A+1, C]: last_repl_id %d, want %d", st.LastReplID, c)
			}
		})
	}
}
