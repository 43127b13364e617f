package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/internal/statedir"
	"github.com/cmfs-project/cmfs/internal/wait"
	"github.com/cmfs-project/cmfs/journal"
	"github.com/cmfs-project/cmfs/repl"
	"github.com/cmfs-project/cmfs/source"
)

// lockedBuffer is a bytes.Buffer that goroutines may write while a test
// reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// followFixture is a source served on loopback whose journal has one
// event, the insert of file, and a follow of it started in-process.
type followFixture struct {
	backing string
	file    journal.File
	content []byte
	target  string

	stdout, stderr lockedBuffer
	done           chan int // follow's exit code
	cancel         context.CancelFunc
}

// startFollow serves the source (with the event's content in place when
// present) and runs 'replicad follow' of it with the extra args; the
// test's end stops both.
func startFollow(t *testing.T, present bool, args ...string) *followFixture {
	t.Helper()
	dir := t.TempDir()
	x := &followFixture{backing: filepath.Join(dir, "backing"), content: []byte("rows that are not there yet\n"),
		target: filepath.Join(dir, "replica"), done: make(chan int, 1)}
	state := filepath.Join(x.backing, statedir.Name)
	for _, d := range []string{state, filepath.Join(state, statedir.CMRootDir), filepath.Join(x.backing, "s.db", "t")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeRecord(t, state, x.backing)
	x.file = journal.File{Path: "s.db/t/part-0", Size: int64(len(x.content)), XXH64: journal.Sum(x.content)}
	if present {
		x.putContent(t)
	}
	j, err := journal.Open(filepath.Join(state, statedir.JournalFile), journal.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Append(context.Background(), &journal.Event{Type: journal.Insert, Path: x.file.Path, DB: "s", Table: "t", Files: []journal.File{x.file}}); err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}

	srv, err := source.NewServer(source.Config{Backing: x.backing, State: state, Token: testToken(t)})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	x.cancel = cancel
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	wg.Add(2)
	go func() {
		defer wg.Done()
		srv.Serve(ctx, lis)
	}()
	go func() {
		defer wg.Done()
		x.done <- program.Run(ctx, &x.stdout, &x.stderr, append([]string{"follow", "--source", lis.Addr().String(), "--target", x.target, "--interval", "50ms"}, args...))
	}()
	return x
}

// putContent puts the event's content in place at the source.
func (x *followFixture) putContent(t *testing.T) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(x.backing, x.file.Path), x.content, 0o644); err != nil {
		t.Fatal(err)
	}
}

// wait polls cond until it holds, failing the test after 20s or if
// follow ends first.
func (x *followFixture) wait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	ended, code := false, 0
	if !wait.Until(20*time.Second, func() bool {
		select {
		case code = <-x.done:
			ended = true
			return true
		default:
			return cond()
		}
	}) {
		t.Fatalf("timed out waiting for %s; stderr:\n%s", what, x.stderr.String())
	}
	if ended {
		t.Fatalf("follow ended (exit %d) while waiting for %s; stderr:\n%s", code, what, x.stderr.String())
	}
}

// stop interrupts follow, which must exit 0.
func (x *followFixture) stop(t *testing.T) {
	t.Helper()
	x.cancel()
	if code := <-x.done; code != 0 {
		t.Errorf("follow: exit %d after the interrupt; stderr:\n%s", code, x.stderr.String())
	}
}

// loaded says whether the target holds the event.
func (x *followFixture) loaded() bool {
	s, _, _ := repl.ReadState(x.target)
	return s.LastReplID == 1
}

// TestFollowRetriesFailedLoad: a load that fails because the source has
// the content nowhere does not end follow. It retries with backoff, says
// so on stderr, in its metrics and in status, and once the content is
// back it loads it and says it follows again.
func TestFollowRetriesFailedLoad(t *testing.T) {
	x := startFollow(t, false)
	status := func() repl.FollowStatus {
		t.Helper()
		st, ok, err := repl.ReadFollowStatus(x.target)
		if err != nil || !ok {
			t.Fatalf("follow status: %v (found %v)", err, ok)
		}
		return st
	}
	x.wait(t, "two failed rounds", func() bool {
		_, ok, _ := repl.ReadFollowStatus(x.target)
		return ok && status().Failures >= 2
	})
	st := status()
	if st.State != repl.FollowRetrying || !st.Running || !strings.Contains(st.LastError, "s.db/t/part-0") || st.NextRetry.IsZero() {
		t.Errorf("status while failing: %+v", st)
	}
	if e := x.stderr.String(); !strings.Contains(e, `level=WARN msg="a round failed; retrying"`) || !strings.Contains(e, "not found") {
		t.Errorf("stderr does not say it retries the missing content:\n%s", e)
	}
	code, out, _ := runCLI(t, "status", "--target", x.target)
	if code != 0 || !strings.Contains(out, "follow:       retrying") || !strings.Contains(out, "last error:") {
		t.Errorf("status: exit %d:\n%s", code, out)
	}

	// The content comes back: the next retry loads it.
	x.putContent(t)
	x.wait(t, "the event loaded", func() bool { return x.loaded() && status().State == repl.FollowFollowing })
	if st := status(); st.Failures != 0 || st.LastError != "" {
		t.Errorf("status after recovering: %+v", st)
	}
	if b, err := os.ReadFile(filepath.Join(x.target, x.file.Path)); err != nil || !bytes.Equal(b, x.content) {
		t.Errorf("target: %q, %v", b, err)
	}
	if e := x.stderr.String(); !strings.Contains(e, `level=INFO msg="a round succeeded after failures"`) {
		t.Errorf("stderr does not say it recovered:\n%s", e)
	}
	x.stop(t)
	if _, ok, _ := repl.ReadFollowStatus(x.target); ok {
		t.Errorf("follow left its status behind")
	}
}

// TestFollowLogs: follow's log is text lines by default, JSON lines with
// --log-format json; at the default level a follow that applies events
// and never fails says nothing, while at debug each round is a line.
func TestFollowLogs(t *testing.T) {
	for _, tt := range []struct {
		name       string
		args       []string
		wantRounds bool // a "round" line at debug
		json       bool
	}{
		{"default: text, info", nil, false, false},
		{"json, debug", []string{"--log-format", "json", "--log-level", "debug"}, true, true},
		{"text, debug", []string{"--log-level", "debug"}, true, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			x := startFollow(t, true, tt.args...)
			x.wait(t, "the event loaded", x.loaded)
			x.stop(t)
			logged := x.stderr.String()
			if !tt.wantRounds {
				if logged != "" {
					t.Errorf("stderr at the default level:\n%s\nwant nothing: no line per round or event", logged)
				}
				return
			}
			var rounds int
			for _, line := range strings.Split(strings.TrimSuffix(logged, "\n"), "\n") {
				if !tt.json {
					if strings.HasPrefix(line, "time=") && strings.Contains(line, ` level=DEBUG msg=round `) {
						rounds++
					}
					continue
				}
				var rec map[string]any
				if err := json.Unmarshal([]byte(line), &rec); err != nil {
					t.Fatalf("stderr line %q is not JSON: %v", line, err)
				}
				if rec["time"] == nil || rec["level"] == nil || rec["msg"] == nil {
					t.Errorf("log line %q lacks time, level or msg", line)
				}
				if rec["level"] == "DEBUG" && rec["msg"] == "round" {
					rounds++
					if rec["from"] != 1.0 || rec["applied"] != 1.0 || rec["source"] == nil {
						t.Errorf("round line %q: want from 1, applied 1 and the source", line)
					}
				}
			}
			if rounds == 0 {
				t.Errorf("no debug line for the round that applied event 1:\n%s", logged)
			}
		})
	}
}

// TestLogFlagsRefused: a bad --log-format or --log-level is one line.
func TestLogFlagsRefused(t *testing.T) {
	for _, args := range [][]string{
		{"follow", "--source", "127.0.0.1:1", "--target", "t", "--log-format", "xml"},
		{"serve", "--log-level", "verbose"},
	} {
		expectRefusal(t, args, "want ")
	}
}

// TestFollowServiceStatus: what a follow tells a service manager as its
// rounds go: ready at the first round that leaves the target caught up
// (not at one that leaves it behind), a status line at once at each new
// state or error, new numbers in the same state at most every
// statusEvery.
func TestFollowServiceStatus(t *testing.T) {
	u := newFollowUI(io.Discard, "src:1", "/replica")
	// received takes a signal from ch, or says it is closed.
	received := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	// round is a round that found the source at event source and took
	// the target from event from to event to.
	round := func(source, from, to uint64) {
		u.Positions(source, from)
		if to > from {
			u.Applied(to, time.Time{})
		}
		u.Succeeded()
	}
	errAway, errGone := errors.New("source away"), errors.New("content gone")
	for _, step := range []struct {
		name       string
		do         func()
		told       bool   // the manager is to be told
		ready      bool   // READY=1 is due (or was)
		wantStatus string // in the status line
	}{
		{"started", func() {}, true, false, "following src:1 into /replica: first round"},
		{"a failure", func() { u.Failed(1, errAway) }, true, false, "retrying (1 failed in a row): source away"},
		{"the same failure again", func() { u.Failed(2, errAway) }, false, false, "retrying (2 failed in a row): source away"},
		{"another error", func() { u.Failed(3, errGone) }, true, false, "content gone"},
		{"a round that leaves the target behind", func() { round(5, 0, 3) }, true, false, "at event 3, the source at 5"},
		{"caught up", func() { round(5, 3, 5) }, false, true, "following src:1 into /replica: caught up, at event 5"},
		{"caught up further, soon after", func() { round(6, 5, 6) }, false, true, "caught up, at event 6"},
		{"caught up further, a while after", func() {
			u.smu.Lock()
			u.toldAt = u.toldAt.Add(-statusEvery)
			u.smu.Unlock()
			round(7, 6, 7)
		}, true, true, "caught up, at event 7"},
		{"nothing new", func() { round(7, 7, 7) }, false, true, "caught up, at event 7"},
		{"a failure once ready", func() { u.Failed(1, errAway) }, true, true, "at event 7; retrying (1 failed in a row): source away"},
		{"recovered", func() { round(7, 7, 7) }, true, true, "caught up, at event 7"},
	} {
		step.do()
		if got := received(u.changed); got != step.told {
			t.Errorf("%s: told the manager %v, want %v (status %q)", step.name, got, step.told, u.statusLine())
		}
		if got := received(u.ready); got != step.ready {
			t.Errorf("%s: ready %v, want %v", step.name, got, step.ready)
		}
		if got := u.statusLine(); !strings.Contains(got, step.wantStatus) {
			t.Errorf("%s: status %q, want it to say %q", step.name, got, step.wantStatus)
		}
	}
}
