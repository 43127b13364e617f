package repl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// lockFile is the lock a loader holds on its target, at the target's root
// next to stateFile and stagingDir. It is never removed: a lock file
// unlinked while another process waits on it would let two loaders hold
// "the" lock on two different files.
const lockFile = ".repl-lock"

// lockPoll is how often a loader that waits for a target polls its lock.
const lockPoll = 50 * time.Millisecond

// Lock is a target held by one loader (a load, or a follow for its whole
// life): an exclusive flock(2) on <target>/.repl-lock. The kernel drops it
// when the holder's file closes, so a holder killed with -9 never blocks
// the next one. What the file says about its holder (Holder) is only for
// the message that refuses the next one.
type Lock struct {
	target string
	f      *os.File
}

// LockOptions tune LockTarget. The zero value refuses a busy target at
// once and describes the holder by this process's command line.
type LockOptions struct {
	// Wait is how long to wait for the holder to let go; 0 refuses at once.
	Wait time.Duration
	// Command describes the holder to the loaders it refuses; "" means
	// this process's command line.
	Command string
}

// Holder is what a target's lock file says about the loader holding it.
type Holder struct {
	PID     int       `json:"pid"`
	Command string    `json:"command"`
	Since   time.Time `json:"since"`
}

// BusyError refuses a target another loader holds. It wraps ErrTargetBusy.
type BusyError struct {
	Target string
	// Holder is what the lock file says; its PID is 0 when it said
	// nothing readable (the holder had not written it yet).
	Holder Holder
	// Waited is how long LockTarget waited before giving up (0: not at all).
	Waited time.Duration
}

func (e *BusyError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "target %s is being loaded by ", e.Target)
	if e.Holder.PID == 0 {
		b.WriteString("another process")
	} else {
		fmt.Fprintf(&b, "pid %d", e.Holder.PID)
		if e.Holder.Command != "" {
			fmt.Fprintf(&b, " (%s)", e.Holder.Command)
		}
		if !e.Holder.Since.IsZero() {
			fmt.Fprintf(&b, " since %s", e.Holder.Since.UTC().Format(time.RFC3339))
		}
	}
	if e.Waited > 0 {
		fmt.Fprintf(&b, "; gave up waiting after %s", e.Waited)
	}
	return b.String()
}

func (e *BusyError) Unwrap() error { return ErrTargetBusy }

// LockTarget takes target (creating it if missing) for the caller alone,
// before anything in it is touched. Another loader holding it is waited
// for up to opts.Wait, then refused with a *BusyError naming it.
//
// Errors: *BusyError (wrapping ErrTargetBusy), ctx's error while waiting,
// I/O errors.
func LockTarget(ctx context.Context, target string, opts LockOptions) (*Lock, error) {
	abs, err := filepath.Abs(target)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, err
	}
	name := filepath.Join(abs, lockFile)
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", abs, err)
	}
	start := time.Now()
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", name, err)
		}
		waited := time.Since(start)
		if waited >= opts.Wait {
			h := currentHolder(ctx, name)
			f.Close()
			busy := &BusyError{Target: abs, Holder: h}
			if opts.Wait > 0 {
				busy.Waited = opts.Wait
			}
			return nil, busy
		}
		t := time.NewTimer(min(lockPoll, opts.Wait-waited))
		select {
		case <-ctx.Done():
			t.Stop()
			f.Close()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
	cmd := opts.Command
	if cmd == "" {
		cmd = commandLine()
	}
	b, err := json.Marshal(Holder{PID: os.Getpid(), Command: cmd, Since: time.Now().UTC().Truncate(time.Second)})
	if err == nil {
		err = f.Truncate(0)
	}
	if err == nil {
		_, err = f.WriteAt(append(b, '\n'), 0)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", name, err)
	}
	return &Lock{target: abs, f: f}, nil
}

// Target is the absolute path of the target held.
func (l *Lock) Target() string { return l.target }

// holds reports whether l holds target.
func (l *Lock) holds(target string) bool {
	abs, err := filepath.Abs(target)
	return err == nil && l != nil && l.f != nil && abs == l.target
}

// Unlock lets the target go. The holder's description stays in the file
// until the next holder replaces it: the flock, not the file, says
// whether the target is held.
func (l *Lock) Unlock() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close() // closing the last descriptor drops the flock
	l.f = nil
	return err
}

// holderGrace is how long a refusal waits for the holder to describe
// itself: it takes the flock, then writes the file.
const holderGrace = 500 * time.Millisecond

// currentHolder reads what the lock file says of the process holding it
// now: a description not yet written (empty), or left by an earlier
// holder that has exited, is read again for up to holderGrace; a zero
// Holder after that.
func currentHolder(ctx context.Context, name string) Holder {
	deadline := time.Now().Add(holderGrace)
	for {
		h, _ := readHolder(name)
		if h.PID != 0 && syscall.Kill(h.PID, 0) != syscall.ESRCH {
			return h
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return Holder{}
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// readHolder reads what a lock file says; a zero Holder if it says
// nothing readable.
func readHolder(name string) (Holder, error) {
	var h Holder
	b, err := os.ReadFile(name)
	if err != nil {
		return h, err
	}
	if err := json.Unmarshal(b, &h); err != nil {
		return Holder{}, err
	}
	return h, nil
}

// commandLine is this process's command line as a holder describes
// itself: the program's base name and its arguments, shortened.
func commandLine() string {
	if len(os.Args) == 0 {
		return ""
	}
	args := append([]string{filepath.Base(os.Args[0])}, os.Args[1:]...)
	s := strings.Join(args, " ")
	const most = 120
	if r := []rune(s); len(r) > most {
		s = string(r[:most-3]) + "..."
	}
	return s
}
