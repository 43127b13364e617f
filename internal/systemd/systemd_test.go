package systemd

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/internal/wait"
)

// manager is a fake service manager: the unixgram socket NOTIFY_SOCKET
// names, and the datagrams it received.
type manager struct {
	conn *net.UnixConn
	got  chan string
}

func newManager(t *testing.T) *manager {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	m := &manager{conn: conn, got: make(chan string, 1000)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			m.got <- string(buf[:n])
		}
	}()
	t.Cleanup(func() { conn.Close(); <-done })
	t.Setenv(socketEnv, path)
	return m
}

// next returns the next datagram, failing t if none comes within a
// second.
func (m *manager) next(t *testing.T) string {
	t.Helper()
	select {
	case s := <-m.got:
		return s
	case <-time.After(time.Second):
		t.Fatal("no datagram within 1s")
		return ""
	}
}

// drain returns what has arrived so far.
func (m *manager) drain() []string {
	var out []string
	for {
		select {
		case s := <-m.got:
			out = append(out, s)
		default:
			return out
		}
	}
}

func TestNoSocketIsNoOp(t *testing.T) {
	t.Setenv(socketEnv, "")
	t.Setenv(watchdogEnv, "1000")
	if Enabled() {
		t.Fatal("Enabled without NOTIFY_SOCKET")
	}
	for _, f := range []func(string) error{Ready, Status, Stopping} {
		if err := f("x"); err != nil {
			t.Errorf("without NOTIFY_SOCKET: %v", err)
		}
	}
	if d, err := WatchdogInterval(); d != 0 || err != nil {
		t.Errorf("WatchdogInterval without NOTIFY_SOCKET = %v, %v; want 0, nil", d, err)
	}
}

func TestMessages(t *testing.T) {
	m := newManager(t)
	for _, tc := range []struct {
		name string
		send func() error
		want string
	}{
		{"ready", func() error { return Ready("mounted /b on /m") }, "READY=1\nSTATUS=mounted /b on /m"},
		{"ready without status", func() error { return Ready("") }, "READY=1"},
		{"status on one line", func() error { return Status("two\nlines") }, "STATUS=two lines"},
		{"stopping", func() error { return Stopping("unmounting /m") }, "STOPPING=1\nSTATUS=unmounting /m"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.send(); err != nil {
				t.Fatal(err)
			}
			if got := m.next(t); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
	if err := Status(""); err != nil {
		t.Fatal(err)
	}
	if got := m.drain(); len(got) != 0 {
		t.Errorf("an empty status sent %q", got)
	}
}

func TestSocketGone(t *testing.T) {
	t.Setenv(socketEnv, filepath.Join(t.TempDir(), "none.sock"))
	if err := Ready(""); err == nil {
		t.Error("Ready to a socket nobody listens on: no error")
	}
}

func TestWatchdog(t *testing.T) {
	const usec = 40_000 // pings every 20ms
	t.Run("pings while the probe succeeds", func(t *testing.T) {
		m := newManager(t)
		t.Setenv(watchdogEnv, strconv.Itoa(usec))
		ctx, cancel := context.WithCancel(context.Background())
		var probes atomic.Int32
		var deadlineOK atomic.Bool
		deadlineOK.Store(true)
		done := make(chan error)
		go func() {
			done <- Watchdog(ctx, func(ctx context.Context) error {
				probes.Add(1)
				if d, ok := ctx.Deadline(); !ok || time.Until(d) > usec*time.Microsecond/2 {
					deadlineOK.Store(false)
				}
				return nil
			}, nil)
		}()
		var pings []string
		wait.For(t, 5*time.Second, "three pings", func() bool {
			pings = append(pings, m.drain()...)
			return len(pings) >= 3
		})
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		for _, p := range pings {
			if p != "WATCHDOG=1" {
				t.Errorf("got %q, want WATCHDOG=1", p)
			}
		}
		if !deadlineOK.Load() {
			t.Error("a probe ran without a deadline of at most half the watchdog interval")
		}
	})
	t.Run("silent while the probe fails", func(t *testing.T) {
		m := newManager(t)
		t.Setenv(watchdogEnv, strconv.Itoa(usec))
		ctx, cancel := context.WithCancel(context.Background())
		var probes atomic.Int32
		done := make(chan error)
		go func() {
			done <- Watchdog(ctx, func(context.Context) error { probes.Add(1); return errors.New("stuck") }, nil)
		}()
		wait.For(t, 5*time.Second, "five probes", func() bool { return probes.Load() >= 5 })
		cancel()
		<-done
		if got := m.drain(); len(got) != 0 {
			t.Errorf("a failing probe sent %q", got)
		}
	})
	t.Run("off", func(t *testing.T) {
		for _, tc := range []struct{ name, usec, pid string }{
			{"no WATCHDOG_USEC", "", ""},
			{"WATCHDOG_PID of another process", strconv.Itoa(usec), "1"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				newManager(t)
				t.Setenv(watchdogEnv, tc.usec)
				t.Setenv(watchdogPIDEnv, tc.pid)
				done := make(chan error)
				go func() {
					done <- Watchdog(context.Background(), func(context.Context) error {
						t.Error("probe ran with the watchdog off")
						return nil
					}, nil)
				}()
				select {
				case err := <-done:
					if err != nil {
						t.Error(err)
					}
				case <-time.After(time.Second):
					t.Fatal("Watchdog did not return with the watchdog off")
				}
			})
		}
	})
	t.Run("bad WATCHDOG_USEC", func(t *testing.T) {
		newManager(t)
		t.Setenv(watchdogEnv, "soon")
		if err := Watchdog(context.Background(), func(context.Context) error { return nil }, nil); err == nil {
			t.Error("WATCHDOG_USEC=soon: no error")
		}
	})
}

// TestExtendStart: before READY=1 the same probes extend the start
// timeout by the watchdog interval, and a failing one does not.
func TestExtendStart(t *testing.T) {
	const usec = 40_000
	m := newManager(t)
	t.Setenv(watchdogEnv, strconv.Itoa(usec))
	ctx, cancel := context.WithCancel(context.Background())
	var failing atomic.Bool
	var failed atomic.Int32
	done := make(chan error)
	go func() {
		done <- ExtendStart(ctx, func(context.Context) error {
			if failing.Load() {
				failed.Add(1)
				return errors.New("stuck")
			}
			return nil
		}, nil)
	}()
	var got []string
	wait.For(t, 5*time.Second, "three extensions", func() bool {
		got = append(got, m.drain()...)
		return len(got) >= 3
	})
	failing.Store(true)
	// The probe running as it fails may have passed: what it sent is
	// drained after the next, failing, one.
	wait.For(t, 5*time.Second, "a failed probe", func() bool { return failed.Load() >= 1 })
	got = append(got, m.drain()...)
	wait.For(t, 5*time.Second, "three more failed probes", func() bool { return failed.Load() >= 4 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, d := range got {
		if d != "EXTEND_TIMEOUT_USEC=40000" {
			t.Errorf("got %q, want EXTEND_TIMEOUT_USEC=40000", d)
		}
	}
	if extra := m.drain(); len(extra) != 0 {
		t.Errorf("failing probes sent %q", extra)
	}
}

func TestEnviron(t *testing.T) {
	env := []string{"PATH=/bin", "NOTIFY_SOCKET=/run/x", "WATCHDOG_USEC=1", "WATCHDOG_PID=2", "NOTIFY_SOCKETS=keep"}
	got := Environ(env)
	if want := []string{"PATH=/bin", "NOTIFY_SOCKETS=keep"}; !slices.Equal(got, want) {
		t.Errorf("Environ = %q, want %q", got, want)
	}
	if len(env) != 5 {
		t.Error("Environ changed its argument")
	}
}
