package integration

import (
	"encoding/json"
	"fmt"
	"github.com/cmfs-project/cmfs/internal/wait"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/slot"
)

// TestSlotCatchUp: a destination that follows with a replication slot is
// stopped, the source changes (originals preserved) and gc runs with a
// retention shorter than the pause; the restarted follow catches up
// exactly, because gc kept what the slot's events need.
func TestSlotCatchUp(t *testing.T) {
	s := slotScenario(t, []string{"--slot", "r1"}, nil)

	// While it is stopped, the slot shows its lag and what it pins, in
	// cmfs status, replicad slots and serve's metrics alike.
	last := lastEventID(t, s.m.State)
	st := s.status(t)
	if len(st.Slots) != 1 || st.Slots[0].Lag != last-st.Slots[0].Position || st.Slots[0].Lag < 3 ||
		st.Slots[0].Entries != 2 || st.Slots[0].Bytes == 0 || st.Slots[0].Lost {
		t.Errorf("cmfs status slots while stopped = %+v, want r1 3 or more behind pinning 2 entries", st.Slots)
	}
	res := mustReplicad(t, "slots", "--source", s.srv.Addr, "--json")
	var rs struct {
		Slots []slot.Report `json:"slots"`
	}
	if err := json.Unmarshal([]byte(res.Stdout), &rs); err != nil || len(rs.Slots) != 1 || rs.Slots[0] != st.Slots[0] {
		t.Errorf("replicad slots --json = %q (%v), want %+v", res.Stdout, err, st.Slots)
	}
	p := startProc(t, replicadPath(t), "serve", "--state", s.m.State, "--listen", freeAddr(t), "--metrics", "127.0.0.1:0")
	var addr []string
	wait.Until(15*time.Second, func() bool {
		b, _ := os.ReadFile(p.stdout)
		addr = regexp.MustCompile(`metrics http://(\S+)/metrics`).FindStringSubmatch(string(b))
		return addr != nil || p.exited()
	})
	if addr == nil {
		t.Fatalf("serve --metrics did not say where: %s", p.stderrNow())
	}
	body := httpGet(t, "http://"+addr[1]+"/metrics")
	for _, want := range []string{
		fmt.Sprintf(`replicad_slot_lag_events{slot="r1"} %d`, st.Slots[0].Lag),
		`replicad_slot_pinned_entries{slot="r1"} 2`,
		fmt.Sprintf(`replicad_slot_pinned_bytes{slot="r1"} %d`, st.Slots[0].Bytes),
		`replicad_slot_lost{slot="r1"} 0`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("serve's /metrics has no %q:\n%s", want, grepLines(body, "replicad_slot"))
		}
	}
	p.kill()

	s.restartFollow(t)
	s.catchUp(t)
	// The slot moved with the target, and pins nothing once caught up.
	st = s.status(t)
	if len(st.Slots) != 1 || st.Slots[0].Name != "r1" || st.Slots[0].Position != lastEventID(t, s.m.State) || st.Slots[0].Lost {
		t.Errorf("cmfs status slots = %+v, want r1 at %d, not lost", st.Slots, lastEventID(t, s.m.State))
	}
}

// TestSlotRefusedWithoutSlot: the same without a slot: gc removed an
// original the destination needs, and the restarted follow refuses with
// one line naming the first event it cannot reproduce.
func TestSlotRefusedWithoutSlot(t *testing.T) {
	s := slotScenario(t, []string{"--no-slot"}, nil)
	s.expectRefusal(t, "without a replication slot")
}

// TestSlotRetainMax: with a slot, but gc's --retain-max shorter than the
// pause: the slot is lost, and the destination is refused the same way.
func TestSlotRetainMax(t *testing.T) {
	s := slotScenario(t, []string{"--slot", "r1"}, []string{"--retain-max", "1s"})
	st := s.status(t)
	if len(st.Slots) != 1 || !st.Slots[0].Lost {
		t.Errorf("cmfs status slots after gc past --retain-max = %+v, want r1 lost", st.Slots)
	}
	s.expectRefusal(t, `slot "r1" fell behind what gc kept`)
}

type slotRun struct {
	m          *mounted
	srv        *server
	target     string
	followArgs []string
	follow     *proc
	// lostEvent is the event whose content only the overwrite preserved.
	lostEvent uint64
}

// slotScenario mounts, follows (with followArgs) until the target is at
// the source's newest event, stops the follow, writes part-3, overwrites
// it (its first content now only in cmroot) and deletes part-0, then runs
// gc with a one-second retention (and gcArgs) once that second is over.
func slotScenario(t *testing.T, followArgs, gcArgs []string) *slotRun {
	replicadPath(t)
	// The mount's own retention is as short as gc's, so that the fsck
	// after the unmount counts what gc removed as expired, not missing.
	s := &slotRun{m: mount(t, "--retain", "1s"), followArgs: followArgs}
	for _, d := range []string{"w.db", "w.db/t", "w.db/t/p=1"} {
		if err := os.Mkdir(s.m.path(d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		writeFile(t, s.m.path(fmt.Sprintf("w.db/t/p=1/part-%d", i)), []byte(fmt.Sprintf("part %d, first\n", i)))
	}
	s.srv = serve(t, s.m.State)
	s.target = filepath.Join(t.TempDir(), "target")
	s.restartFollow(t)
	s.catchUp(t)
	s.stopFollow(t)

	writeFile(t, s.m.path("w.db/t/p=1/part-3"), []byte("part 3, first: only in cmroot after the overwrite\n"))
	s.lostEvent = lastEventID(t, s.m.State)
	writeFile(t, s.m.path("w.db/t/p=1/part-3"), []byte("part 3, second\n"))
	if err := os.Remove(s.m.path("w.db/t/p=1/part-0")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // past the one-second retention
	res := cmfs(t, append([]string{"gc", "--state", s.m.State, "--retain", "1s"}, gcArgs...)...)
	if res.Code != 0 {
		t.Fatalf("cmfs gc: %v", res)
	}
	t.Logf("cmfs gc: %s", strings.TrimSpace(res.Stdout))
	return s
}

func (s *slotRun) restartFollow(t *testing.T) {
	t.Helper()
	args := append([]string{"follow", "--source", s.srv.Addr, "--target", s.target, "--interval", "100ms"}, s.followArgs...)
	s.follow = startProc(t, replicadPath(t), args...)
}

func (s *slotRun) stopFollow(t *testing.T) {
	t.Helper()
	s.follow.cmd.Process.Signal(syscall.SIGTERM)
	if res := s.follow.wait(t, 10*time.Second); res.Code != 0 {
		t.Fatalf("follow, stopped: %v", res)
	}
}

// catchUp waits until the target equals the source exactly.
func (s *slotRun) catchUp(t *testing.T) {
	t.Helper()
	want := sourceTree(t, s.m)
	last := lastEventID(t, s.m.State)
	var diff string
	ok := wait.Until(30*time.Second, func() bool {
		if s.follow.exited() {
			return true
		}
		if id := stateID(s.target); id < last {
			diff = fmt.Sprintf("target at event %d, source at %d", id, last)
			return false
		}
		got, err := tryReadTree(s.target, targetNames...)
		if err != nil {
			diff = err.Error()
			return false
		}
		diff = diffTree(got, want)
		return diff == ""
	})
	if s.follow.exited() {
		t.Fatalf("replicad follow exited: %v", s.follow.res)
	}
	if !ok {
		t.Fatalf("the target did not catch up within 30s: %s\nfollow stderr: %s", diff, s.follow.stderrNow())
	}
	// Confirmed at the source after the round's load.
	wait.Until(5*time.Second, func() bool {
		for _, sl := range s.status(t).Slots {
			if sl.Position < last {
				return false
			}
		}
		return true
	})
}

// expectRefusal restarts the follow and expects exit 1 with one line
// naming the lost event, the reason and how to bootstrap again, the
// target untouched.
func (s *slotRun) expectRefusal(t *testing.T, why string) {
	t.Helper()
	before := readTree(t, s.target, targetNames...)
	at := stateID(s.target)
	s.restartFollow(t)
	res := s.follow.wait(t, 30*time.Second)
	if res.Code != 1 {
		t.Fatalf("follow after gc: %v, want exit 1", res)
	}
	lines := strings.Split(strings.TrimSpace(res.Stderr), "\n")
	line := lines[len(lines)-1]
	t.Logf("refusal: %s", line)
	for _, want := range []string{
		fmt.Sprintf("is at event %d and cannot catch up", at),
		fmt.Sprintf("event %d (INSERT w.db/t/p=1/part-3) can no longer be reproduced", s.lostEvent),
		why,
		"replicad dump --state " + s.m.State,
		"replicad load --dump",
	} {
		if !strings.Contains(line, want) {
			t.Errorf("refusal %q does not say %q", line, want)
		}
	}
	if !regexp.MustCompile(`^replicad: `).MatchString(line) || len(lines) != 1 {
		t.Errorf("want one line on stderr starting with 'replicad: ', got %q", res.Stderr)
	}
	if diff := diffTree(readTree(t, s.target, targetNames...), before); diff != "" || stateID(s.target) != at {
		t.Errorf("the refused follow changed the target: %s (at %d, was %d)", diff, stateID(s.target), at)
	}
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func (s *slotRun) status(t *testing.T) (st struct {
	Slots   []slot.Report `json:"slots"`
	Horizon uint64        `json:"slot_horizon"`
}) {
	t.Helper()
	res := cmfs(t, "status", "--state", s.m.State, "--json")
	if res.Code != 0 {
		t.Fatalf("cmfs status: %v", res)
	}
	if err := json.Unmarshal([]byte(res.Stdout), &st); err != nil {
		t.Fatalf("cmfs status --json: %v in %q", err, res.Stdout)
	}
	return st
}
