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
	follow := startProc(t, replicadPath(t), "follow", "--source", srv.Addr, "--target", target, "--interval", "100ms", "--metrics", "127.0.0.1:0")

	// catchUp waits until the target equals the source as it is now.
	catchUp := func(what string) {
		t.Helper()
		last := awaitFollow(t, what, m, target, follow, 30*time.Second)
		if st := statusOf(t, target); st.LastReplID != last {
			t.Errorf("%s: status: last_repl_id %d, want %d", what, st.LastReplID, last)
		}
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

	// The metrics say where the target is, and saw every event's lag.
	metric := func(name string) string { return followMetric(t, follow, name) }
	if got, want := metric("replicad_follow_target_last_id"), fmt.Sprint(lastEventID(t, m.State)); got != want {
		t.Errorf("replicad_follow_target_last_id %s, want %s", got, want)
	}
	if n := metric("replicad_follow_lag_seconds_count"); n == "0" || n != metric("replicad_follow_events_applied_total") {
		t.Errorf("lag observed for %s events, %s applied: want every applied event, at least one", n, metric("replicad_follow_events_applied_total"))
	}
}
