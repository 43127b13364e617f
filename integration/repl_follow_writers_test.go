package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/internal/wait"
)

// followSoakEnv, set to a duration ("15s"), makes each round of writers in
// the follow tests run that long instead of a few seconds.
const followSoakEnv = "CMFS_FOLLOW_SOAK"

// writerScript is one shell writer in one partition directory: overwrite
// with >, write a temp file and mv -f it over a part, rm, and rm -rf of a
// partition of its own, in a loop until DEADLINE (epoch seconds). Every
// content is unique (writer, iteration), so cmroot's deduplication cannot
// hide a miss.
const writerScript = `
n=$1; dir=$2; end=$3; i=0
cd "$dir" || exit 1
while [ "$(date +%s)" -lt "$end" ]; do
	i=$((i+1))
	echo "w$n o $i" > part-$n-1
	echo "w$n t $i" > .t$n && mv -f .t$n part-$n-0
	echo "w$n r $i" > part-$n-2
	rm -f part-$n-2
	if [ $((i % 5)) -eq 0 ]; then
		mkdir -p ../dt=$n$i && echo "w$n p $i" > ../dt=$n$i/part-0 && rm -rf ../dt=$n$i
	fi
done
`

// runWriters runs three shell writers in dir (a partition directory of the
// mount) for d and returns the first one's failure.
func runWriters(dir string, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d+time.Minute)
	defer cancel()
	end := strconv.FormatInt(time.Now().Add(d).Unix()+1, 10)
	var wg sync.WaitGroup
	errs := make([]error, 3)
	outs := make([][]byte, 3)
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.CommandContext(ctx, "sh", "-c", writerScript, "writer", strconv.Itoa(i+1), dir, end)
			outs[i], errs[i] = cmd.CombinedOutput()
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return fmt.Errorf("writer %d: %v\n%s", i+1, err, outs[i])
		}
	}
	return nil
}

// writeDuration is how long one round of writers runs: a few seconds, or
// followSoakEnv.
func writeDuration(t *testing.T) time.Duration {
	t.Helper()
	v := os.Getenv(followSoakEnv)
	if v == "" {
		return 5 * time.Second
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", followSoakEnv, v, err)
	}
	return d
}

// TestFollowWriters is the defect of follow stopping for good under
// ordinary concurrent writes: three shells overwrite, mv -f over, rm and
// rm -rf in one partition while follow loads. Content a loaded event
// names moves on (renamed, then preserved) while the source looks for it;
// follow must never miss it, nor stop, and the target must end equal to
// the source. Three rounds.
func TestFollowWriters(t *testing.T) {
	replicadPath(t)
	m := mount(t)
	part := "f.db/t/dt=0"
	if err := os.MkdirAll(m.path(part), 0o755); err != nil {
		t.Fatal(err)
	}
	srv := serve(t, m.State)
	target := filepath.Join(t.TempDir(), "target")
	follow := startProc(t, replicadPath(t), "follow", "--source", srv.Addr, "--target", target, "--interval", "100ms")
	d := writeDuration(t)
	for round := 1; round <= 3; round++ {
		if err := runWriters(m.path(part), d); err != nil {
			t.Fatal(err)
		}
		awaitFollow(t, fmt.Sprintf("round %d", round), m, target, follow, 2*time.Minute)
	}
	t.Logf("follow stderr:\n%s", follow.stderrNow())
}

// TestFollowSourceRestart kills the source's `replicad serve` while follow
// loads and writers write, and starts it again on the same address: follow
// keeps going, says it is retrying (stderr, status, metrics) while the
// source is away, and catches up.
func TestFollowSourceRestart(t *testing.T) {
	replicadPath(t)
	m := mount(t)
	part := "f.db/t/dt=0"
	if err := os.MkdirAll(m.path(part), 0o755); err != nil {
		t.Fatal(err)
	}
	srv := serve(t, m.State)
	target := filepath.Join(t.TempDir(), "target")
	follow := startProc(t, replicadPath(t), "follow", "--source", srv.Addr, "--target", target, "--interval", "100ms", "--metrics", "127.0.0.1:0")
	d := writeDuration(t)
	done := make(chan error, 1)
	go func() { done <- runWriters(m.path(part), d) }()
	time.Sleep(d / 3) // mid-follow: let it load some first
	srv.kill()
	wait.For(t, 20*time.Second, "status to say follow is retrying", func() bool {
		var st struct {
			Follow *struct {
				State    string `json:"state"`
				Running  bool   `json:"running"`
				Failures int    `json:"failures"`
			} `json:"follow"`
		}
		res := replicad(t, "status", "--target", target, "--json")
		return res.Code == 0 && json.Unmarshal([]byte(res.Stdout), &st) == nil &&
			st.Follow != nil && st.Follow.State == "retrying" && st.Follow.Running && st.Follow.Failures > 0
	})
	if got := followMetric(t, follow, "replicad_follow_consecutive_failures"); got == "0" {
		t.Errorf("replicad_follow_consecutive_failures %s while the source is away", got)
	}
	if _, err := serveAt(t, m.State, srv.Addr, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	awaitFollow(t, "after the source restarted", m, target, follow, 2*time.Minute)
	// The round that caught up ends (and says so) just after its last
	// event is in place.
	if !wait.Until(10*time.Second, func() bool { return strings.Contains(follow.stderrNow(), `msg="a round succeeded after failures"`) }) ||
		!strings.Contains(follow.stderrNow(), `level=WARN msg="a round failed; retrying"`) {
		t.Errorf("follow's stderr does not say it retried and recovered:\n%s", follow.stderrNow())
	}
	if got := followMetric(t, follow, "replicad_follow_consecutive_failures"); got != "0" {
		t.Errorf("replicad_follow_consecutive_failures %s after catching up, want 0", got)
	}
	if got := followMetric(t, follow, "replicad_follow_errors_total"); got == "0" {
		t.Errorf("replicad_follow_errors_total %s after an outage", got)
	}
	t.Logf("follow stderr:\n%s", follow.stderrNow())
}
