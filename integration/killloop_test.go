package integration

import (
	"github.com/cmfs-project/cmfs/internal/wait"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// killLoopRounds is how many times TestKillShellWriters kills the mount,
// in each durability mode.
const killLoopRounds = 8

// syncModes are the durability modes (`cmfs mount --sync`) the crash
// tests run in: a kill -9 loses nothing in either.
var syncModes = []string{"always", "interval"}

// shellWriters are the shell loops TestKillShellWriters runs against the
// mount, as an operator's scripts would: overwrite with >, append, a
// truncate, write-temp-then-mv -f, rm and recreate. $D is a partition
// directory of the mount; each loop runs until the mount dies under it.
var shellWriters = []string{
	`i=0; while :; do i=$((i+1)); echo "r-$i" > "$D/part-0" || exit 0; done`,
	`i=0; while :; do i=$((i+1)); echo "a-$i" >> "$D/part-1" || exit 0; [ $((i % 50)) -eq 0 ] && { truncate -s 3 "$D/part-1" || exit 0; }; done`,
	`i=0; while :; do i=$((i+1)); echo "n-$i" > "$D/.tmp-$i" && mv -f "$D/.tmp-$i" "$D/part-3" || exit 0; done`,
	`i=0; while :; do i=$((i+1)); echo "c-$i" > "$D/part-4" && rm "$D/part-4" || exit 0; echo "d-$i" > "$D/part-4" || exit 0; done`,
}

// TestKillShellWriters kills the mount with SIGKILL while shell loops
// overwrite, append, truncate, rename over and delete files, remounts
// (half the rounds after `cmfs fsck --repair`), and checks after every
// round that the journal's last word on every path is what the tree holds
// and that every original an event names is in cmroot.
func TestKillShellWriters(t *testing.T) {
	requireFUSE(t)
	for _, mode := range syncModes {
		t.Run(mode, func(t *testing.T) { killShellWriters(t, mode) })
	}
}

func killShellWriters(t *testing.T, mode string) {
	backing := filepath.Join(t.TempDir(), "backing")
	dir := "k.db/t/p=1"
	if err := os.Mkdir(backing, 0o755); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(backing, ".cmfs")
	rng := rand.New(rand.NewPCG(8, 8))
	for round := range killLoopRounds {
		mp := filepath.Join(t.TempDir(), "mnt")
		if err := os.Mkdir(mp, 0o755); err != nil {
			t.Fatal(err)
		}
		mount := startForeground(t, backing, mp, "--sync="+mode)
		if err := os.MkdirAll(filepath.Join(mp, dir), 0o755); err != nil {
			t.Fatal(err)
		}
		var shells []*exec.Cmd
		for _, script := range shellWriters {
			sh := exec.Command("sh", "-c", script)
			sh.Env = append(os.Environ(), "D="+filepath.Join(mp, dir))
			if err := sh.Start(); err != nil {
				t.Fatal(err)
			}
			shells = append(shells, sh)
		}
		time.Sleep(time.Duration(150+rng.IntN(600)) * time.Millisecond) // the kill lands anywhere
		mount.kill()
		for _, sh := range shells {
			sh.Wait()
		}
		mount.wait(t)
		if round%2 == 1 {
			if res := cmfs(t, "fsck", "--repair", backing); res.Code != 0 {
				t.Fatalf("round %d: cmfs fsck --repair: %v", round, res)
			}
		}
		// Remounting runs recovery; the next round writes through it.
		m := mountAt(t, backing, "--sync="+mode)
		m.unmount(t)
		bad := journalTreeViolations(t, backing, state)
		bad = append(bad, lostOriginals(t, filepath.Join(state, "cmroot"), events(t, state))...)
		if len(bad) > 0 {
			t.Fatalf("round %d: after kill -9 and remount:\n%s", round, strings.Join(bad, "\n"))
		}
	}
	if n := len(events(t, state)); n < 100 {
		t.Errorf("only %d events after %d rounds: the writers hardly ran", n, killLoopRounds)
	}
}

// foreground is a `cmfs mount` running in the foreground, to be killed.
type foreground struct {
	mp     string
	cmd    *exec.Cmd
	exited chan error
	log    string
}

// startForeground mounts backing at mp with a foreground `cmfs mount` and
// waits until the mount is there; of extra, arguments starting with "--"
// are flags of the mount, the others are added to its environment.
func startForeground(t *testing.T, backing, mp string, extra ...string) *foreground {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "cmfs.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	live.Store(mp, true)
	args, env := []string{"mount"}, os.Environ()
	for _, x := range extra {
		if strings.HasPrefix(x, "--") {
			args = append(args, x)
		} else {
			env = append(env, x)
		}
	}
	f := &foreground{mp: mp, cmd: exec.Command(cmfsBin, append(args, backing, mp)...), exited: make(chan error, 1), log: logPath}
	f.cmd.Stdout, f.cmd.Stderr = logFile, logFile
	f.cmd.Env = env
	if err := f.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { f.exited <- f.cmd.Wait() }()
	t.Cleanup(func() {
		f.kill()
		f.wait(t)
	})
	// Ready once the control socket answers: the mount has fully come up
	// (a stale socket from a killed mount refuses connections).
	sock := filepath.Join(backing, ".cmfs", "control.sock")
	ready := func() bool {
		c, err := net.Dial("unix", sock)
		if err != nil {
			return false
		}
		c.Close()
		return isMounted(mp)
	}
	if !wait.Until(10*time.Second, func() bool {
		select {
		case err := <-f.exited:
			f.exited <- err
			return true
		default:
		}
		return ready()
	}) || !ready() {
		log, _ := os.ReadFile(logPath)
		t.Fatalf("cmfs mount %s did not come up:\n%s", mp, log)
	}
	return f
}

// kill sends SIGKILL to the mount process.
func (f *foreground) kill() { f.cmd.Process.Signal(syscall.SIGKILL) }

// wait waits for the process to end and the dead mount to be gone.
func (f *foreground) wait(t *testing.T) {
	t.Helper()
	err := <-f.exited
	f.exited <- err
	forceUnmount(t, f.mp)
	wait.For(t, 10*time.Second, "dead mount to go", func() bool { return !isMounted(f.mp) })
	live.Delete(f.mp)
}
