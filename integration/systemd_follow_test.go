package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/internal/auth"
	"github.com/cmfs-project/cmfs/internal/wait"
)

// probeFailed is the warning a daemon logs for each watchdog probe that
// fails (internal/systemd).
const probeFailed = "watchdog probe failed"

// statusSays matches a datagram whose STATUS= line contains s.
func statusSays(s string) func(string) bool {
	return func(d string) bool { return strings.Contains(notifyStatus(d), s) }
}

// TestSystemdFollow runs `replicad follow` with a notify socket and a
// watchdog, as replicad-follow@.service does, from a real `replicad
// serve` of a real mount. Started while the source is not up yet, it is
// alive but not ready: it extends its start and says it retries. READY=1
// comes once the target holds the source's events (checked the moment
// it arrives). With the source killed it retries, alive: WATCHDOG=1 keeps
// coming. With the source stopped (SIGSTOP, so its connection stays open
// and its calls go unanswered) the follow's round is stuck in a call: the
// probes fail and no WATCHDOG=1 comes, until the source goes on. SIGTERM
// brings STOPPING=1 and exit 0.
func TestSystemdFollow(t *testing.T) {
	bin := replicadPath(t)
	m := mount(t)
	for i := range 3 {
		writeFile(t, m.path(fmt.Sprintf("w.db/t/p=1/part-%d", i)), []byte(fmt.Sprintf("row %d\n", i)))
	}
	addr := freeAddr(t)
	target := filepath.Join(t.TempDir(), "replica")
	sock := newNotifySocket(t)
	// 2s: a probe every second; a round stalled for 2s fails it.
	const usec = "2000000"
	p := startProcEnv(t, sock.env("WATCHDOG_USEC="+usec), bin, "follow", "--source", addr, "--target", target, "--interval", "100ms")

	// No source yet: the follow retries, alive, and is not ready.
	seen := sock.until(t, p, 30*time.Second, "EXTEND_TIMEOUT_USEC="+usec)
	seen = append(seen, sock.untilMatch(t, p, 30*time.Second, "a status saying it retries", statusSays("retrying"))...)
	if assigns(seen, "READY=1") || assigns(seen, "WATCHDOG=1") {
		t.Fatalf("with no source up: sent %q; want neither READY=1 nor WATCHDOG=1", seen)
	}

	srv, err := serveAt(t, m.State, addr, 15*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	before := sock.until(t, p, time.Minute, "READY=1")
	// The first thing done once READY arrives: the target must hold the
	// source's events.
	if got, want := stateID(target), lastEventID(t, m.State); got != want {
		t.Fatalf("at READY=1 the target is at event %d; the source at %d", got, want)
	}
	checkTarget(t, "at READY=1", target, sourceTree(t, m))
	if s := notifyStatus(before[len(before)-1]); !strings.Contains(s, addr) || !strings.Contains(s, target) || !strings.Contains(s, "caught up") {
		t.Errorf("READY=1 came with STATUS=%q; want it to name %s, %s and say caught up", s, addr, target)
	}
	if assigns(before, "WATCHDOG=1") {
		t.Errorf("WATCHDOG=1 before READY=1: %q", before)
	}
	for range 2 {
		sock.until(t, p, 10*time.Second, "WATCHDOG=1")
	}

	// The source killed: rounds fail and are retried, and the follow is
	// alive all along.
	srv.kill()
	sock.untilMatch(t, p, 30*time.Second, "a status saying it retries", statusSays("retrying"))
	for range 3 {
		sock.until(t, p, 10*time.Second, "WATCHDOG=1")
	}
	if e := p.stderrNow(); strings.Contains(e, probeFailed) {
		t.Fatalf("a watchdog probe failed while the source was down:\n%s", e)
	}

	// The source back: the follow catches up again and says so.
	srv, err = serveAt(t, m.State, addr, 15*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, m.path("w.db/t/p=2/part-3"), []byte("written while the source was down\n"))
	awaitFollow(t, "after the source came back", m, target, p, time.Minute)
	sock.untilMatch(t, p, 30*time.Second, "a status saying it caught up again", statusSays("caught up"))

	// The source stopped: its connection stays open, the follow's next
	// round waits in a call nobody answers. The probes fail and nothing
	// says it is alive.
	if err := srv.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.cmd.Process.Signal(syscall.SIGCONT) })
	failures := func() int { return strings.Count(p.stderrNow(), probeFailed) }
	wait.For(t, 30*time.Second, "a watchdog probe failing", func() bool { return failures() >= 1 })
	sock.drain() // what came before that failure
	wait.For(t, 30*time.Second, "three more failed probes", func() bool { return failures() >= 4 })
	if got := sock.drain(); assigns(got, "WATCHDOG=1") {
		t.Fatalf("WATCHDOG=1 while the follow's round was stuck: %q", got)
	}
	if p.exited() {
		t.Fatalf("follow exited while stuck: %v", p.res)
	}

	// The source goes on: so does the round, and the pings.
	if err := srv.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	sock.until(t, p, 30*time.Second, "WATCHDOG=1")
	sock.terminate(t, p)
}

// TestSystemdFollowRefused: a follow the source refuses (another token)
// ends with exit 1 and never says READY=1.
func TestSystemdFollowRefused(t *testing.T) {
	bin := replicadPath(t)
	m := mount(t)
	writeFile(t, m.path("w.db/t/part-0"), []byte("row\n"))
	srv := serve(t, m.State)
	other := filepath.Join(t.TempDir(), auth.FileName)
	if _, err := auth.File(other); err != nil {
		t.Fatal(err)
	}
	sock := newNotifySocket(t)
	p := startProcEnv(t, sock.env("WATCHDOG_USEC=2000000"), bin, "follow", "--source", srv.Addr,
		"--target", filepath.Join(t.TempDir(), "replica"), "--token-file", other)
	seen := sock.until(t, p, 30*time.Second, "STOPPING=1")
	res := p.wait(t, 30*time.Second)
	if res.Code != 1 {
		t.Fatalf("follow with a token the source refuses: %v; want exit 1", res)
	}
	if seen = append(seen, sock.drain()...); assigns(seen, "READY=1") {
		t.Errorf("a follow refused before its first round sent READY=1: %q", seen)
	}
}

// TestUnitExecStartFollow runs replicad-follow@.service's ExecStart= as
// systemd would for an instance: the unit's command line, with
// REPLICAD_CONFIG as its Environment= line sets it but naming a file the
// test writes in place of /etc/cmfs/replicad-follow-%i.yaml (its follow
// section: a real source, a target, the token file), and a notify socket.
// It must come up READY=1 in the foreground with the target loaded from
// the source that file names, and stop cleanly at SIGTERM.
func TestUnitExecStartFollow(t *testing.T) {
	bin := replicadPath(t)
	unit := installedUnit(t, "replicad-follow@.service", filepath.Dir(bin))
	if got := unitLine(t, unit, "Environment"); got != "REPLICAD_CONFIG=/etc/cmfs/replicad-follow-%i.yaml" {
		t.Fatalf("Environment=%s; the test stands in for REPLICAD_CONFIG=/etc/cmfs/replicad-follow-%%i.yaml", got)
	}
	m := mount(t)
	writeFile(t, m.path("w.db/t/part-0"), []byte("row\n"))
	srv := serve(t, m.State)
	target := filepath.Join(t.TempDir(), "replica")
	cfg := filepath.Join(t.TempDir(), "replicad-follow-replica.yaml")
	writeFile(t, cfg, []byte(fmt.Sprintf("follow:\n  source: %s\n  target: %s\n  interval: 100ms\n  token-file: %s\n",
		srv.Addr, target, os.Getenv(tokenEnv))))

	argv := strings.Fields(unitLine(t, unit, "ExecStart"))
	sock := newNotifySocket(t)
	p := startProcEnv(t, sock.env("REPLICAD_CONFIG="+cfg), argv[0], argv[1:]...)
	sock.until(t, p, time.Minute, "READY=1")
	if p.exited() {
		t.Fatalf("%s exited after READY=1: %v", p.name, p.res)
	}
	checkTarget(t, "at READY=1", target, sourceTree(t, m))
	sock.terminate(t, p)
}
