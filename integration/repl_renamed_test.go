package integration

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestReplRenamedAway loads a dump whose content was renamed away after
// it was cut (renames preserve nothing in cmroot) and a new file took the
// old name: the load must find the content under its new name, whether
// the new file at the old name has another size or the same one (then
// only its checksum tells it apart), through --source-state and serve.
func TestReplRenamedAway(t *testing.T) {
	replicadPath(t)
	for _, tc := range []struct{ name, later string }{
		{"other size", "BBBBB"},
		{"same size", "BBBB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := mount(t)
			for _, d := range []string{"w.db", "w.db/t"} {
				if err := os.Mkdir(m.path(d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			old := []byte("AAAA")
			writeFile(t, m.path("w.db/t/a"), old)
			a := lastEventID(t, m.State)
			want := sourceTree(t, m)
			dumps := t.TempDir()
			first := incremental(t, m.State, dumps, 1, a)
			if err := os.Rename(m.path("w.db/t/a"), m.path("w.db/t/b")); err != nil {
				t.Fatal(err)
			}
			writeFile(t, m.path("w.db/t/a"), []byte(tc.later))
			second := incremental(t, m.State, dumps, a+1, lastEventID(t, m.State))
			final := sourceTree(t, m)
			srv := serve(t, m.State)
			for _, src := range []fetchFrom{{State: m.State}, {Addr: srv.Addr}} {
				name := "source-state"
				if src.Addr != "" {
					name = "serve"
				}
				t.Run(name, func(t *testing.T) {
					target := t.TempDir()
					replLoad(t, first.Dump, target, src)
					checkTarget(t, "dump cut before the rename, "+src.String(), target, want)
					if got := readFile(t, filepath.Join(target, "w.db/t/a")); !bytes.Equal(got, old) {
						t.Fatalf("%s: target a = %q, want %q", src, got, old)
					}
					replLoad(t, second.Dump, target, src)
					checkTarget(t, "after the rename, "+src.String(), target, final)
				})
			}
		})
	}
}
