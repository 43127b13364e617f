package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestReplFollow runs `replicad follow` against `replicad serve` while
// files are written through the mount: the target must catch up with the
// source within a deadline, and follow must keep running.
func TestReplFollow(t *testing.T) {
	replicadPath(t)
	m := mount(t)
	for _, d := range []string{"w.db", "w.db/t", "w.db/t/p=1"} {
		if err := os.Mkdir(m.path(d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	srv := serve(t, m.State)
	target := filepath.Join(t.TempDir(), "target")
	follow := startProc(t, replicadPath(t), "follow", "--source", srv.Addr, "--target", target, "--interval", "100ms")

	// catchUp waits until the target equals the source as it is now.
	catchUp := func(what string) {
		t.Helper()
		want := sourceTree(t, m)
		last := lastEventID(t, m.State)
		start := time.Now()
		var diff string
		ok := poll(30*time.Second, func() bool {
			if follow.exited() {
				return true
			}
			if id := stateID(target); id < last {
				diff = fmt.Sprintf("target at event %d, source at %d", id, last)
				return false
			}
			got, err := tryReadTree(target, ".replstate", ".repl-staging")
			if err != nil {
				diff = err.Error()
				return false
			}
			diff = diffTree(got, want)
			return diff == ""
		})
		if follow.exited() {
			t.Fatalf("replicad follow exited: %v", follow.res)
		}
		if !ok {
			t.Fatalf("%s: the target did not catch up within 30s: %s\nfollow stderr: %s", what, diff, follow.stderrNow())
		}
		if st := statusOf(t, target); st.LastReplID != last {
			t.Errorf("%s: status: last_repl_id %d, want %d", what, st.LastReplID, last)
		}
		t.Logf("%s: caught up with event %d in %v", what, last, time.Since(start).Round(time.Millisecond))
	}

	for i := range 20 {
		writeFile(t, m.path(fmt.Sprintf("w.db/t/p=%d/part-%02d", 1+i%2, i)), []byte(fmt.Sprintf("file %d, written while following\n", i)))
		if i == 9 {
			catchUp("after 10 files")
			writeFile(t, m.path("w.db/t/p=1/part-00"), []byte("part-00, overwritten\n"))
		}
	}
	// Drop a partition and add another while it follows, too.
	if err := os.RemoveAll(m.path("w.db/t/p=2")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, m.path("w.db/t/p=3/part-20"), []byte("in a partition added last\n"))
	catchUp("after 20 files")
}
