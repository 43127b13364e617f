package integration

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/internal/statedir"
	"github.com/cmfs-project/cmfs/internal/wait"
	"github.com/cmfs-project/cmfs/journal"
)

// syncMode is a durability mode of `cmfs mount` (one of syncModes) as
// the mid-workload crashes run it.
type syncMode struct {
	name  string
	flags []string
	// interval is how long an acknowledged event may stay unflushed (0:
	// none, --sync=always).
	interval time.Duration
}

// midModes are syncModes, parsed.
func midModes(t *testing.T) []syncMode {
	t.Helper()
	var out []syncMode
	for _, name := range syncModes {
		m, d, err := journal.ParseSync(name)
		if err != nil {
			t.Fatalf("sync mode %q: %v", name, err)
		}
		mode := syncMode{name: name, flags: []string{"--sync=" + name}}
		if m == journal.SyncInterval {
			mode.interval = d
		}
		out = append(out, mode)
	}
	return out
}

// midWorkload loops, through the mount and never calling fsync, over
// what a warehouse's writers do — create, overwrite with >, append with
// >>, write a temp file and mv -f it over another, rm, rm -r a partition —
// and after each round makes markers/$ROUND/m-N and, once mkdir returned,
// logs N to $PROGRESS (outside the mount): round N's marker is
// acknowledged.
const midWorkload = `mkdir -p markers/$ROUND plain db.db/t || exit 1
i=0
while :; do
	i=$((i+1))
	p=db.db/t/p=$((i % 4))
	mkdir -p $p
	echo "one $ROUND $i" > $p/f1
	echo "bye $ROUND $i" > $p/f1
	echo "more $ROUND $i" >> $p/f1
	echo "staged $ROUND $i" > $p/part.tmp
	mv -f $p/part.tmp $p/part-$((i % 3))
	echo "x $i" > plain/x-$ROUND-$i
	rm -f plain/x-$ROUND-$((i - 2))
	if [ $((i % 5)) -eq 0 ]; then rm -rf db.db/t/p=$(((i + 2) % 4)); fi
	mkdir markers/$ROUND/m-$i && echo $i >> "$PROGRESS"
done
`

// powerLossRounds is how many times TestPowerLossMidWorkload loses
// power: the crash lands in an operation's window between its change and
// its event only now and then, so each run takes several chances.
const powerLossRounds = 3

// TestPowerLossMidWorkload loses power while a shell loop is still
// writing and removing files through the mount (TestPowerLoss loses it
// after the workload): the cmfs daemon is killed with SIGKILL at a random
// moment, lazyfs drops every unsynced byte, and the remount, seeing a
// reboot (a test-only boot id: statedir.TestBootIDEnv), reconciles the
// tree with the journal. After each of powerLossRounds crashes:
//
//   - I1: every event visible before the crash survives (readers see
//     flushed events only), and every round whose marker mkdir returned
//     — under --sync=interval, at least one interval before the crash —
//     has its MKDIR journaled;
//   - I2: every cmroot entry an event names holds its bytes;
//   - I3: the journal's last word on every path is what the tree holds.
func TestPowerLossMidWorkload(t *testing.T) {
	for _, mode := range midModes(t) {
		t.Run(mode.name, func(t *testing.T) {
			powerLossMidWorkload(t, mode)
		})
	}
}

func powerLossMidWorkload(t *testing.T, mode syncMode) {
	l := mountLazy(t)
	backing := filepath.Join(l.Mountpoint(), "backing")
	if err := os.Mkdir(backing, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(statedir.TestBootIDEnv, "powerloss-mid-workload-boot-0")
	m := mountAt(t, backing, mode.flags...)
	for round := 1; round <= powerLossRounds; round++ {
		m = crashMidWorkload(t, l, m, mode, round, true)
		if t.Failed() {
			return
		}
	}
}

// TestKillMidWorkload is TestPowerLossMidWorkload with kill -9 alone, no
// power loss and no reboot, under the modes that acknowledge a change
// before it is flushed: the page cache keeps everything, so every
// acknowledged round is journaled — none of the journal's unverified
// tail may be dropped for a tree that moved on by changes whose intents
// recovery replays — and no reconciliation runs. (--sync=always is
// TestKillShellWriters's.)
func TestKillMidWorkload(t *testing.T) {
	for _, mode := range midModes(t) {
		if mode.interval == 0 {
			continue
		}
		t.Run(mode.name, func(t *testing.T) {
			l := mountLazy(t)
			backing := filepath.Join(l.Mountpoint(), "backing")
			if err := os.Mkdir(backing, 0o755); err != nil {
				t.Fatal(err)
			}
			m := mountAt(t, backing, mode.flags...)
			for round := 1; round <= powerLossRounds; round++ {
				if m = crashMidWorkload(t, l, m, mode, round, false); t.Failed() {
					return
				}
			}
		})
	}
}

// crashMidWorkload runs the workload on m, kills the daemon in its
// middle and, with power, loses power too, remounts (after a simulated
// reboot, with power), checks the invariants and returns the new mount.
func crashMidWorkload(t *testing.T, l *lazyMount, m *mounted, mode syncMode, round int, power bool) *mounted {
	t.Helper()
	progress := filepath.Join(t.TempDir(), "progress")
	sh := exec.Command("sh", "-c", midWorkload)
	sh.Dir = m.Mnt
	sh.Env = append(os.Environ(), "PROGRESS="+progress, fmt.Sprintf("ROUND=%d", round))
	sh.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out strings.Builder
	sh.Stdout, sh.Stderr = &out, &out
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { sh.Wait(); close(exited) }()
	stopShell := func() {
		syscall.Kill(-sh.Process.Pid, syscall.SIGKILL)
		<-exited
	}
	defer stopShell()
	rounds := func() int {
		b, _ := os.ReadFile(progress)
		lines := strings.Fields(string(b))
		if len(lines) == 0 {
			return 0
		}
		n, _ := strconv.Atoi(lines[len(lines)-1])
		return n
	}
	wait.For(t, 60*time.Second, "the workload's first rounds", func() bool {
		select {
		case <-exited:
			t.Fatalf("the workload exited:\n%s", out.String())
		default:
		}
		return rounds() >= 3
	})
	// The crash lands at a random moment of a round.
	time.Sleep(time.Duration(rand.IntN(300)) * time.Millisecond)
	acked := 0 // rounds whose marker must be journaled
	if mode.interval > 0 && power {
		// Acknowledged at least an interval before the crash.
		acked = rounds()
		time.Sleep(3 * mode.interval)
	}
	visible := events(t, m.State)

	// The power goes: the daemon dies where it is, then the shell.
	pids := daemonPIDs(m.Mnt)
	if len(pids) == 0 {
		t.Fatalf("no cmfs daemon serves %s; workload said:\n%s", m.Mnt, out.String())
	}
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	stopShell()
	if mode.interval == 0 || !power {
		acked = rounds() // every mkdir that returned
	}
	wait.For(t, 10*time.Second, "the killed daemon to exit", func() bool { return len(daemonPIDs(m.Mnt)) == 0 })
	m.detach(t)
	if power {
		crashLazy(t, l)
		t.Setenv(statedir.TestBootIDEnv, fmt.Sprintf("powerloss-mid-workload-boot-%d", round))
	}
	logPath := filepath.Join(m.State, statedir.LogFile)
	logStart := int64(0)
	if fi, err := os.Stat(logPath); err == nil {
		logStart = fi.Size()
	}
	m2 := mountAt(t, m.Backing, mode.flags...)
	after := events(t, m2.State)
	var broken []string
	broken = append(broken, lostEvents(visible, after)...)
	broken = append(broken, lostMarkers(after, round, acked)...)
	broken = append(broken, lostOriginals(t, m2.CMRoot, after)...)
	for _, v := range journalTreeViolations(t, m.Backing, m2.State) {
		broken = append(broken, "I3 "+v)
	}
	logText := string(readFile(t, logPath)[logStart:]) // what the remount said
	switch reconciled := strings.Contains(logText, "reconciled the tree with the journal"); {
	case power && !reconciled:
		broken = append(broken, "the remount after the simulated reboot did not reconcile the tree with the journal")
	case !power && reconciled:
		broken = append(broken, "the remount after a kill -9 without a reboot reconciled the tree with the journal")
	}
	if !power && strings.Contains(logText, "dropped the last") {
		broken = append(broken, "the remount after a kill -9 without a reboot dropped events: "+grepLines(logText, "dropped the last"))
	}
	// Whatever an event that survived names was flushed: nothing it
	// says a file held can be gone from both the tree and cmroot.
	if strings.Contains(logText, "content lost") {
		broken = append(broken, "the reconciliation found content lost: "+grepLines(logText, "content lost"))
	}
	t.Logf("crash %d: %d rounds acknowledged, %d events visible before the crash, %d after the remount; the remount said:\n%s",
		round, acked, len(visible), len(after), grepLines(logText, "msg=recovery")+"\n"+grepLines(logText, `msg="reconciled`))
	if len(broken) > 0 {
		var log strings.Builder
		for _, ev := range after[min(len(visible), len(after)):] {
			fmt.Fprintf(&log, "  after the last visible event: %s\n", eventLine(ev))
		}
		what := "kill -9"
		if power {
			what = "power loss"
		}
		t.Errorf("%s %d in the middle of the workload (--sync=%s): %d invariant violations:\n  %s\n%s",
			what, round, mode.name, len(broken), strings.Join(broken, "\n  "), log.String())
	}
	return m2
}

// lostMarkers checks I1 through the workload's own account: the MKDIR of
// markers/ROUND/m-1 … m-n, each acknowledged, is journaled.
func lostMarkers(evs []journal.Event, round, n int) []string {
	made := map[string]bool{}
	for _, ev := range evs {
		if ev.Type == journal.Mkdir {
			made[ev.Path] = true
		}
	}
	var out []string
	for i := 1; i <= n; i++ {
		if p := fmt.Sprintf("markers/%d/m-%d", round, i); !made[p] {
			out = append(out, fmt.Sprintf("I1 acknowledged mkdir %s has no event", p))
		}
	}
	return out
}
