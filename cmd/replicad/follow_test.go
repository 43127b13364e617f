package main

import (
	"bytes"
	"context"
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

// TestFollowRetriesFailedLoad: a load that fails because the source has
// the content nowhere does not end follow. It retries with backoff, says
// so on stderr, in its metrics and in status, and once the content is
// back it loads it and says it follows again.
func TestFollowRetriesFailedLoad(t *testing.T) {
	dir := t.TempDir()
	backing := filepath.Join(dir, "backing")
	state := filepath.Join(backing, statedir.Name)
	for _, d := range []string{state, filepath.Join(state, statedir.CMRootDir), filepath.Join(backing, "s.db", "t")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeRecord(t, state, backing)
	content := []byte("rows that are not there yet\n")
	f := journal.File{Path: "s.db/t/part-0", Size: int64(len(content)), XXH64: journal.Sum(content)}
	j, err := journal.Open(filepath.Join(state, statedir.JournalFile), journal.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Append(context.Background(), &journal.Event{Type: journal.Insert, Path: f.Path, DB: "s", Table: "t", Files: []journal.File{f}}); err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}

	srv, err := source.NewServer(source.Config{Backing: backing, State: state, Token: testToken(t)})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	wg.Add(2)
	go func() {
		defer wg.Done()
		srv.Serve(ctx, lis)
	}()
	target := filepath.Join(dir, "replica")
	var stdout, stderr lockedBuffer
	done := make(chan error, 1)
	go func() {
		defer wg.Done()
		g := &globalOptions{stdout: &stdout, stderr: &stderr}
		done <- runFollow(ctx, g, followOptions{source: lis.Addr().String(), target: target, interval: 50 * time.Millisecond}, nil)
	}()

	status := func() repl.FollowStatus {
		t.Helper()
		st, ok, err := repl.ReadFollowStatus(target)
		if err != nil || !ok {
			t.Fatalf("follow status: %v (found %v)", err, ok)
		}
		return st
	}
	await := func(what string, cond func() bool) {
		t.Helper()
		var ended error
		exited := false
		if !wait.Until(20*time.Second, func() bool {
			if cond() {
				return true
			}
			select {
			case ended = <-done:
				exited = true
			default:
			}
			return exited
		}) {
			t.Fatalf("timed out waiting for %s; stderr:\n%s", what, stderr.String())
		}
		if exited {
			t.Fatalf("follow ended (%v) while waiting for %s; stderr:\n%s", ended, what, stderr.String())
		}
	}
	await("two failed rounds", func() bool {
		_, ok, _ := repl.ReadFollowStatus(target)
		return ok && status().Failures >= 2
	})
	st := status()
	if st.State != repl.FollowRetrying || !st.Running || !strings.Contains(st.LastError, "s.db/t/part-0") || st.NextRetry.IsZero() {
		t.Errorf("status while failing: %+v", st)
	}
	if e := stderr.String(); !strings.Contains(e, "retrying in") || !strings.Contains(e, "not found") {
		t.Errorf("stderr does not say it retries the missing content:\n%s", e)
	}
	code, out, _ := runCLI(t, "status", "--target", target)
	if code != 0 || !strings.Contains(out, "follow:       retrying") || !strings.Contains(out, "last error:") {
		t.Errorf("status: exit %d:\n%s", code, out)
	}

	// The content comes back: the next retry loads it.
	if err := os.WriteFile(filepath.Join(backing, f.Path), content, 0o644); err != nil {
		t.Fatal(err)
	}
	await("the event loaded", func() bool {
		s, _, _ := repl.ReadState(target)
		return s.LastReplID == 1 && status().State == repl.FollowFollowing
	})
	if st := status(); st.Failures != 0 || st.LastError != "" {
		t.Errorf("status after recovering: %+v", st)
	}
	if b, err := os.ReadFile(filepath.Join(target, f.Path)); err != nil || !bytes.Equal(b, content) {
		t.Errorf("target: %q, %v", b, err)
	}
	if e := stderr.String(); !strings.Contains(e, "succeeded after") {
		t.Errorf("stderr does not say it recovered:\n%s", e)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("follow: %v", err)
	}
	if _, ok, _ := repl.ReadFollowStatus(target); ok {
		t.Errorf("follow left its status behind")
	}
}
