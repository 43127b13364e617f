package ingest

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/cmroot"
	"github.com/cmfs-project/cmfs/container"
	"github.com/cmfs-project/cmfs/control"
	"github.com/cmfs-project/cmfs/internal/statedir"
	"github.com/cmfs-project/cmfs/internal/wait"
	"github.com/cmfs-project/cmfs/journal"
	"github.com/cmfs-project/cmfs/repl"
	"github.com/cmfs-project/cmfs/source"
)

// TestRunFollowsJournal runs a Feed on the journal as serve --ingest
// reads it (source.Server.Journal), with a poll interval of an hour:
// events appended while it runs are ingested within well under a second.
// The second is appended once the first is in the store, that is after
// the Step that put it read the journal's end, so only a Step after a
// wait can take it: Run was woken by the journal, not by its poll. Mounted: a control
// socket serves the journal (the mount's event stream); unmounted: the
// journal file, appended to by open, append, close.
func TestRunFollowsJournal(t *testing.T) {
	for _, mounted := range []bool{true, false} {
		name := map[bool]string{true: "mounted", false: "unmounted"}[mounted]
		t.Run(name, func(t *testing.T) {
			backing := t.TempDir()
			state := filepath.Join(backing, statedir.Name)
			cmr := filepath.Join(state, statedir.CMRootDir)
			if err := os.MkdirAll(cmr, 0o755); err != nil {
				t.Fatal(err)
			}
			jpath := filepath.Join(state, statedir.JournalFile)
			appendEvent := startJournal(t, jpath)
			if mounted {
				appendEvent = startControl(t, state, jpath, cmr)
			}
			src, err := source.NewServer(source.Config{Backing: backing, State: state, CMRoot: cmr})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { src.Close() })
			store, err := container.OpenStore([]string{filepath.Join(t.TempDir(), "vol")}, container.Options{NoSync: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { store.Close() })
			events := src.Journal()
			if _, ok := events.(Waiter); !ok {
				t.Fatal("source.Server.Journal is not a Waiter")
			}
			f, err := New(Config{
				Store:   store,
				Events:  events,
				Fetcher: &repl.LocalFetcher{Root: backing, CMRoot: cmr, Events: events},
				Cursor:  filepath.Join(state, "ingest.json"),
			})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- f.Run(ctx, time.Hour) }()
			t.Cleanup(func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("Run: %v", err)
				}
			})

			for i, data := range [][]byte{[]byte("first event"), []byte("second event, later"), []byte("third")} {
				rel := filepath.Join("t", string(rune('a'+i)))
				if err := os.MkdirAll(filepath.Join(backing, "t"), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(backing, rel), data, 0o644); err != nil {
					t.Fatal(err)
				}
				start := time.Now()
				appendEvent(&journal.Event{Type: journal.Write, Path: rel,
					Files: []journal.File{{Path: rel, Size: int64(len(data)), XXH64: journal.Sum(data)}}})
				// The old loop looked once a second; a poll of an hour
				// would never get there.
				if !wait.Until(time.Until(start.Add(800*time.Millisecond)), func() bool { return holds(store, data) }) {
					t.Fatalf("event %d not ingested within 800ms of its append", i+1)
				}
				t.Logf("event %d ingested %v after its append", i+1, time.Since(start).Round(time.Millisecond))
			}
		})
	}
}

func holds(s *container.Store, data []byte) bool {
	rc, _, err := s.OpenBlock(container.BlockIDOf(data))
	if err == nil {
		rc.Close()
	}
	return err == nil
}

// startJournal creates the journal at path and returns a function that
// appends to it as an unmounted writer would: open, append, close.
func startJournal(t *testing.T, path string) func(...*journal.Event) {
	t.Helper()
	open := func() *journal.Log {
		j, err := journal.Open(path, journal.Options{NoSync: true, LockTimeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	if err := open().Close(); err != nil {
		t.Fatal(err)
	}
	return func(es ...*journal.Event) {
		t.Helper()
		j := open()
		defer j.Close()
		if err := j.Append(context.Background(), es...); err != nil {
			t.Fatal(err)
		}
	}
}

// startControl stands in for a live mount: it holds the journal for
// writing and serves the control socket in state until the test ends. It
// returns a function that appends to the journal.
func startControl(t *testing.T, state, jpath, cmr string) func(...*journal.Event) {
	t.Helper()
	j, err := journal.Open(jpath, journal.Options{NoSync: true, LockTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	store, err := cmroot.Open(cmr, cmroot.Options{NoSync: true})
	if err != nil {
		j.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- control.NewServer(j, store, control.Info{State: state}).Serve(ctx, filepath.Join(state, statedir.SocketFile))
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("control Serve: %v", err)
		}
		store.Close()
		j.Close()
	})
	// Answering, as a mount is once its mount point is ready.
	wait.For(t, 10*time.Second, "the control socket to answer", func() bool { return answers(filepath.Join(state, statedir.SocketFile)) })
	return func(es ...*journal.Event) {
		t.Helper()
		if err := j.Append(context.Background(), es...); err != nil {
			t.Fatal(err)
		}
	}
}

func answers(sock string) bool {
	c, err := control.Dial(sock)
	if err != nil {
		return false
	}
	defer c.Close()
	_, err = c.Status(context.Background())
	return err == nil
}
