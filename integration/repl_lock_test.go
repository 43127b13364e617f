package integration

import (
	"encoding/json"
	"fmt"
	"github.com/cmfs-project/cmfs/internal/wait"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// refusalLine is the one line a loader refused by a busy target prints.
var refusalLine = regexp.MustCompile(`^replicad: target (\S+) is being loaded by pid (\d+) \((replicad (load|follow) [^)]*)\) since (\S+)\n$`)

// TestReplLoadersOneAtATime starts two loads (and a follow) at once on one
// target. A target belongs to one loader at
// a time: every other one is refused with one line naming the holder, or,
// with --wait, waits for it. Every process exits 0 or with that line, the
// events are applied once in all (no two loaders applied the same ones),
// and the target ends exactly the source.
func TestReplLoadersOneAtATime(t *testing.T) {
	replicadPath(t)
	m := mount(t)
	if err := os.MkdirAll(m.path("w.db/t"), 0o755); err != nil {
		t.Fatal(err)
	}
	const files, size = 300, 200_000
	r := rand.New(rand.NewPCG(9, 2))
	buf := make([]byte, size)
	for i := range files {
		for j := range buf {
			buf[j] = byte(r.Uint32())
		}
		writeFile(t, m.path(fmt.Sprintf("w.db/t/part-%03d", i)), buf)
	}
	for i := 0; i < files; i += 3 {
		if err := os.Remove(m.path(fmt.Sprintf("w.db/t/part-%03d", i))); err != nil {
			t.Fatal(err)
		}
	}
	want := sourceTree(t, m)
	last := lastEventID(t, m.State)
	dump := incremental(t, m.State, t.TempDir(), 1, last)
	srv := serve(t, m.State)

	// Each round starts two loads and a follow at once on a fresh target,
	// in a different order and with --wait on different ones.
	rounds := []struct {
		name       string
		order      []string // "load", "follow"
		waitLoads  bool
		waitFollow bool
	}{
		{name: "refuse", order: []string{"load", "follow", "load"}},
		{name: "loads wait", order: []string{"follow", "load", "load"}, waitLoads: true},
		{name: "follow waits", order: []string{"load", "load", "follow"}, waitFollow: true},
		{name: "refuse again", order: []string{"load", "load", "follow"}},
	}
	for _, rd := range rounds {
		t.Run(rd.name, func(t *testing.T) {
			target := filepath.Join(t.TempDir(), "rep")
			type started struct {
				kind string
				wait bool
				p    *proc
			}
			var procs []started
			for _, kind := range rd.order {
				var args []string
				wait := false
				switch kind {
				case "load":
					args = loadArgs(dump.Dump, target, fetchFrom{Addr: srv.Addr})
					wait = rd.waitLoads
				case "follow":
					args = []string{"follow", "--source", srv.Addr, "--target", target, "--interval", "100ms", "--no-slot", "--metrics", "127.0.0.1:0"}
					wait = rd.waitFollow
				}
				if wait {
					args = append(args, "--wait", "2m")
				}
				procs = append(procs, started{kind, wait, startProc(t, replicadPath(t), args...)})
			}
			pids := map[int]bool{}
			for _, s := range procs {
				pids[s.p.cmd.Process.Pid] = true
			}

			// A refusal is one line naming a holder of this round;
			// a process told to wait is never refused.
			applied := 0
			refused := func(s started, res result) bool {
				t.Helper()
				if res.Code == 0 {
					return false
				}
				mm := refusalLine.FindStringSubmatch(res.Stderr)
				if mm == nil {
					t.Errorf("%s: exit %d, neither 0 nor the one-line refusal:\n%v", s.p.name, res.Code, res)
					return true
				}
				if pid, _ := strconv.Atoi(mm[2]); !pids[pid] || pid == s.p.cmd.Process.Pid {
					t.Errorf("%s: refused by pid %d, not another loader of this round: %q", s.p.name, pid, res.Stderr)
				}
				if _, err := time.Parse(time.RFC3339, mm[5]); err != nil {
					t.Errorf("%s: refusal's time %q: %v", s.p.name, mm[5], err)
				}
				if s.wait {
					t.Errorf("%s: refused although told to wait: %q", s.p.name, res.Stderr)
				}
				return true
			}
			var follow *started
			for i := range procs {
				if procs[i].kind == "follow" {
					follow = &procs[i]
				}
			}
			// Loads that do not wait end on their own; the others wait
			// for the load or the follow that holds the target.
			wait.For(t, 2*time.Minute, "the loads that do not wait to end", func() bool {
				for _, s := range procs {
					if s.kind == "load" && !s.wait && !s.p.exited() {
						return false
					}
				}
				return true
			})
			if !follow.p.exited() {
				// It holds the target, or waits for it: once it says
				// it follows (it holds it) and the target is at the
				// source's last event, stop it.
				wait.For(t, 2*time.Minute, "follow to hold the target and catch up", func() bool {
					out, _ := os.ReadFile(follow.p.stdout)
					return follow.p.exited() || strings.Contains(string(out), "following ") && stateID(target) == last
				})
				if !follow.p.exited() {
					v, err := strconv.ParseFloat(followMetric(t, follow.p, "replicad_follow_events_applied_total"), 64)
					if err != nil {
						t.Fatal(err)
					}
					applied += int(v)
					follow.p.cmd.Process.Signal(syscall.SIGTERM)
				}
			}
			for _, s := range procs {
				res := s.p.wait(t, 2*time.Minute)
				t.Logf("%s (wait %v): exit %d: %s%s", s.kind, s.wait, res.Code, strings.TrimSpace(res.Stdout), strings.TrimSpace(res.Stderr))
				if refused(s, res) || s.kind != "load" {
					continue
				}
				var l loadInfo
				if err := json.Unmarshal([]byte(strings.TrimSpace(res.Stdout)), &l); err != nil {
					t.Errorf("%s: stdout is not one JSON object: %v\n%v", s.p.name, err, res)
				}
				applied += l.Applied
			}
			if applied != int(last) {
				t.Errorf("the loaders applied %d events in all, want each of the %d once", applied, last)
			}
			if id := stateID(target); id != last {
				t.Errorf("target at event %d, want %d", id, last)
			}
			checkTarget(t, "after the concurrent loaders", target, want)
		})
	}
}
