package repl

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// holdEnv, set to a target, makes TestLockHolderProcess a child process
// that takes the target's lock, says "locked" and waits to be killed.
const holdEnv = "REPL_TEST_HOLD_LOCK"

func TestLockHolderProcess(t *testing.T) {
	target := os.Getenv(holdEnv)
	if target == "" {
		t.Skip("only run as the child of TestLockReleasedWhenHolderKilled")
	}
	if _, err := LockTarget(context.Background(), target, LockOptions{Command: "holder child"}); err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	fmt.Println("locked")
	select {} // until killed
}

// busy checks that err refuses target naming pid as its holder.
func busy(t *testing.T, err error, pid int) *BusyError {
	t.Helper()
	var b *BusyError
	if !errors.Is(err, ErrTargetBusy) || !errors.As(err, &b) {
		t.Fatalf("got %v, want a *BusyError (ErrTargetBusy)", err)
	}
	if b.Holder.PID != pid || b.Holder.Since.IsZero() || b.Holder.Command == "" {
		t.Fatalf("holder: got %+v, want pid %d with a command and a start", b.Holder, pid)
	}
	if msg := err.Error(); !strings.Contains(msg, fmt.Sprintf("is being loaded by pid %d (%s) since ", pid, b.Holder.Command)) || strings.Contains(msg, "\n") {
		t.Fatalf("message %q does not name the holder on one line", msg)
	}
	return b
}

// TestLockRefusesSecondLoader: while one loader holds a target, a second
// one (a Load, a LockTarget) is refused naming it, and nothing in the
// target is touched; once the first lets go, the second proceeds.
func TestLockRefusesSecondLoader(t *testing.T) {
	s := opsSource(t)
	dump := mustDump(t, s, 1, uint64(len(s.ev.events)))
	target := t.TempDir()
	first, err := LockTarget(context.Background(), target, LockOptions{Command: "first loader"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = Load(context.Background(), dump, target, s.fetcher(), LoadOptions{})
	if b := busy(t, err, os.Getpid()); b.Holder.Command != "first loader" || b.Waited != 0 {
		t.Fatalf("holder: %+v", b)
	}
	if _, err := os.Stat(target + "/" + stagingDir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused load touched the target's staging: %v", err)
	}
	_, err = LockTarget(context.Background(), target, LockOptions{Wait: 100 * time.Millisecond})
	if b := busy(t, err, os.Getpid()); b.Waited != 100*time.Millisecond || !strings.Contains(err.Error(), "gave up waiting after 100ms") {
		t.Fatalf("waited: %+v (%v)", b, err)
	}
	if err := first.Unlock(); err != nil {
		t.Fatal(err)
	}
	mustLoad(t, dump, target, s.fetcher())
	checkTarget(t, s, target, uint64(len(s.ev.events)))
}

// TestLockWaitsForHolder: a loader told to wait proceeds once the holder
// lets go, not before.
func TestLockWaitsForHolder(t *testing.T) {
	target := t.TempDir()
	first, err := LockTarget(context.Background(), target, LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var released atomic.Bool
	got := make(chan error, 1)
	go func() {
		l, err := LockTarget(context.Background(), target, LockOptions{Wait: time.Minute, Command: "second"})
		if err == nil && !released.Load() {
			err = errors.New("took the lock while the first loader held it")
		}
		if err == nil {
			err = l.Unlock()
		}
		got <- err
	}()
	// The waiter polls the lock: the file says the first holder until
	// the waiter has it.
	h, err := readHolder(target + "/" + lockFile)
	if err != nil || h.PID != os.Getpid() {
		t.Fatalf("lock file: %+v, %v", h, err)
	}
	released.Store(true)
	if err := first.Unlock(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting loader did not proceed after the holder let go")
	}
	if h, _ := readHolder(target + "/" + lockFile); h.Command != "second" {
		t.Fatalf("lock file after the second holder: %+v", h)
	}

	// A wait ends with its context.
	first, err = LockTarget(context.Background(), target, LockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := LockTarget(ctx, target, LockOptions{Wait: time.Minute}); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled wait: got %v", err)
	}
}

// TestLockReleasedWhenHolderKilled: a holder killed with -9 leaves its
// lock file behind, and never blocks the next loader.
func TestLockReleasedWhenHolderKilled(t *testing.T) {
	target := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestLockHolderProcess$")
	cmd.Env = append(os.Environ(), holdEnv+"="+target)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "locked\n" {
		t.Fatalf("child: %q, %v", line, err)
	}
	_, err = LockTarget(context.Background(), target, LockOptions{})
	if b := busy(t, err, cmd.Process.Pid); b.Holder.Command != "holder child" {
		t.Fatalf("holder: %+v", b.Holder)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	l, err := LockTarget(context.Background(), target, LockOptions{})
	if err != nil {
		t.Fatalf("after the holder was killed: %v", err)
	}
	if err := l.Unlock(); err != nil {
		t.Fatal(err)
	}
}
