package source

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"runtime"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/cmroot"
	"github.com/cmfs-project/cmfs/control"
	"github.com/cmfs-project/cmfs/internal/wait"
	"github.com/cmfs-project/cmfs/journal"
)

// appendEvents appends events to the journal in state as an unmounted
// writer would: open, append, close.
func appendEvents(t *testing.T, state string, events ...*journal.Event) {
	t.Helper()
	j, err := journal.Open(filepath.Join(state, "journal.db"), journal.Options{NoSync: true, LockTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if err := j.Append(context.Background(), events...); err != nil {
		t.Fatal(err)
	}
}

// mkdirs returns n MKDIR events named from the first id they will get.
func mkdirs(first, n int) []*journal.Event {
	var es []*journal.Event
	for i := first; i < first+n; i++ {
		es = append(es, &journal.Event{Type: journal.Mkdir, Path: fmt.Sprintf("d%d", i)})
	}
	return es
}

func ids(es []*journal.Event) []uint64 {
	out := []uint64{}
	for _, e := range es {
		out = append(out, e.ID)
	}
	return out
}

func seq(from, to uint64) []uint64 {
	out := []uint64{}
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}

// mount stands in for a live cmfs mount: it holds the journal for
// writing and serves the control socket in the state directory.
type mount struct {
	j    *journal.Log
	stop func()
}

func startMount(t *testing.T, state string) *mount {
	t.Helper()
	j, err := journal.Open(filepath.Join(state, "journal.db"), journal.Options{NoSync: true, LockTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	store, err := cmroot.Open(filepath.Join(state, "cmroot"), cmroot.Options{NoSync: true})
	if err != nil {
		j.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- control.NewServer(j, store, control.Info{State: state}).Serve(ctx, filepath.Join(state, "control.sock"))
	}()
	stopped := false
	m := &mount{j: j, stop: func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("control Serve: %v", err)
		}
		store.Close()
		j.Close()
	}}
	t.Cleanup(m.stop)
	return m
}

func (s *testSource) collect(t *testing.T, from, to uint64) ([]*journal.Event, error) {
	t.Helper()
	var got []*journal.Event
	err := s.c.Range(context.Background(), from, to, func(e *journal.Event) error {
		got = append(got, e)
		return nil
	})
	return got, err
}

func TestEventsUnmounted(t *testing.T) {
	s := newSource(t, Config{})
	f := journal.File{Path: "sales.db/orders/p=1/part-0", Size: 5, XXH64: journal.Sum([]byte("rows\n"))}
	cm := f
	cm.CM = cmroot.Name(cm.XXH64, cm.Size)
	appendEvents(t, s.state,
		&journal.Event{Type: journal.CreateDatabase, Path: "sales.db", DB: "sales"},
		&journal.Event{Type: journal.CreateTable, Path: "sales.db/orders", DB: "sales", Table: "orders"},
		&journal.Event{Type: journal.Insert, Path: f.Path, DB: "sales", Table: "orders", Partition: "p=1", Files: []journal.File{f}},
		&journal.Event{Type: journal.Rename, Path: "a", NewPath: "b"},
		&journal.Event{Type: journal.DropPartition, Path: "sales.db/orders/p=1", DB: "sales", Table: "orders", Partition: "p=1", Files: []journal.File{cm}},
	)

	last, err := s.c.Last(context.Background())
	if err != nil || last != 5 {
		t.Fatalf("Last: got %d, %v; want 5", last, err)
	}
	st, err := s.c.Status(context.Background())
	if err != nil || st.Mounted || st.LastEventID != 5 || st.SourceID == "" {
		t.Fatalf("Status: got %+v, %v; want unmounted at 5 with an id", st, err)
	}

	tests := []struct {
		name     string
		from, to uint64
		want     []uint64
		wantErr  error
	}{
		{"all", 0, 0, seq(1, 5), nil},
		{"from 1", 1, 0, seq(1, 5), nil},
		{"middle", 2, 3, seq(2, 3), nil},
		{"tail", 4, 0, seq(4, 5), nil},
		{"past the end", 6, 0, seq(1, 0), nil},
		{"to past the end", 3, 99, seq(3, 5), nil},
		{"empty range", 5, 2, nil, ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := s.collect(t, tt.from, tt.to)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("got %v, want %v", err, tt.wantErr)
			}
			if tt.wantErr == nil && !reflect.DeepEqual(ids(got), tt.want) {
				t.Errorf("got ids %v, want %v", ids(got), tt.want)
			}
		})
	}

	// The events arrive as the journal holds them.
	var want []*journal.Event
	j, err := journal.Open(filepath.Join(s.state, "journal.db"), journal.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Range(1, 0, func(e *journal.Event) error { want = append(want, e); return nil }); err != nil {
		t.Fatal(err)
	}
	j.Close()
	got, err := s.collect(t, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range min(len(got), len(want)) {
		if !got[i].Time.Equal(want[i].Time) {
			t.Errorf("event %d: time %v, want %v", i+1, got[i].Time, want[i].Time)
		}
		got[i].Time, want[i].Time = time.Time{}, time.Time{}
	}
	if !reflect.DeepEqual(got, want) {
		for i := range got {
			t.Errorf("event %d: got %+v, want %+v", i+1, got[i], want[i])
		}
	}

	stop := errors.New("enough")
	n := 0
	err = s.c.Range(context.Background(), 0, 0, func(*journal.Event) error {
		if n++; n == 2 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || n != 2 {
		t.Errorf("fn failing at the 2nd event: got %v after %d, want its error after 2", err, n)
	}
}

func TestEventsNoJournal(t *testing.T) {
	s := newSource(t, Config{})
	if last, err := s.c.Last(context.Background()); err != nil || last != 0 {
		t.Errorf("Last: got %d, %v; want 0", last, err)
	}
	if got, err := s.collect(t, 0, 0); err != nil || len(got) != 0 {
		t.Errorf("Range: got %v, %v; want nothing", ids(got), err)
	}
}

// follower runs Follow in the background and hands over what it gets.
type follower struct {
	events chan *journal.Event
	cancel context.CancelFunc
	done   chan error
}

func follow(s *testSource, from uint64) *follower {
	ctx, cancel := context.WithCancel(context.Background())
	f := &follower{events: make(chan *journal.Event, 100), cancel: cancel, done: make(chan error, 1)}
	go func() {
		f.done <- s.c.Follow(ctx, from, func(e *journal.Event) error {
			f.events <- e
			return nil
		})
	}()
	return f
}

// expect waits for the events with the ids want, in order.
func (f *follower) expect(t *testing.T, want ...uint64) {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for _, id := range want {
		select {
		case e := <-f.events:
			if e.ID != id || e.Path != fmt.Sprintf("d%d", id) {
				t.Fatalf("got event %d (%s), want %d", e.ID, e.Path, id)
			}
		case err := <-f.done:
			t.Fatalf("Follow ended waiting for event %d: %v", id, err)
		case <-timeout:
			t.Fatalf("no event %d", id)
		}
	}
}

func (f *follower) end(t *testing.T) {
	t.Helper()
	f.cancel()
	if err := <-f.done; !errors.Is(err, context.Canceled) {
		t.Errorf("Follow: got %v, want context.Canceled", err)
	}
	select {
	case e := <-f.events:
		t.Errorf("unexpected event %d", e.ID)
	default:
	}
}

func TestFollowUnmounted(t *testing.T) {
	s := newSource(t, Config{})
	appendEvents(t, s.state, mkdirs(1, 5)...)
	f := follow(s, 4)
	f.expect(t, 4, 5)
	appendEvents(t, s.state, mkdirs(6, 1)...)
	f.expect(t, 6)
	appendEvents(t, s.state, mkdirs(7, 2)...)
	f.expect(t, 7, 8)
	f.end(t)
}

// Following before the first mount: the journal appears later.
func TestFollowNoJournalYet(t *testing.T) {
	s := newSource(t, Config{})
	f := follow(s, 0)
	appendEvents(t, s.state, mkdirs(1, 2)...)
	f.expect(t, 1, 2)
	f.end(t)
}

// A follow survives a mount starting and stopping under it, without a gap
// or a repeat.
func TestFollowAcrossMounts(t *testing.T) {
	s := newSource(t, Config{})
	appendEvents(t, s.state, mkdirs(1, 2)...)
	f := follow(s, 0)
	f.expect(t, 1, 2)

	m := startMount(t, s.state)
	if err := m.j.Append(context.Background(), mkdirs(3, 2)...); err != nil {
		t.Fatal(err)
	}
	f.expect(t, 3, 4)
	st, err := s.c.Status(context.Background())
	if err != nil || !st.Mounted || st.LastEventID != 4 {
		t.Errorf("Status while mounted: got %+v, %v; want mounted at 4", st, err)
	}
	if got, err := s.collect(t, 2, 3); err != nil || !reflect.DeepEqual(ids(got), seq(2, 3)) {
		t.Errorf("Range while mounted: got %v, %v", ids(got), err)
	}
	if err := m.j.Append(context.Background(), mkdirs(5, 1)...); err != nil {
		t.Fatal(err)
	}
	f.expect(t, 5)
	m.stop()

	appendEvents(t, s.state, mkdirs(6, 1)...)
	f.expect(t, 6)

	m = startMount(t, s.state)
	if err := m.j.Append(context.Background(), mkdirs(7, 1)...); err != nil {
		t.Fatal(err)
	}
	f.expect(t, 7)
	f.end(t)
	m.stop()
}

// settle waits until the goroutine count is back to at most base.
func settle(t *testing.T, base int) {
	t.Helper()
	if !wait.Until(10*time.Second, func() bool { return runtime.NumGoroutine() <= base }) {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines, want at most %d:\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
	}
}

// Streams the client gives up on end on both sides.
func TestCancelEndsGoroutines(t *testing.T) {
	s := newSource(t, Config{})
	appendEvents(t, s.state, mkdirs(1, 3)...)
	big := randomBytes(5<<20, 3)
	s.preserve(t, big)
	s.write(t, "live/big", big)
	if _, err := s.c.Status(context.Background()); err != nil {
		t.Fatal(err) // the connection is up: its goroutines are in base
	}

	t.Run("follow unmounted", func(t *testing.T) {
		base := runtime.NumGoroutine()
		f := follow(s, 0)
		f.expect(t, 1, 2, 3)
		f.end(t)
		settle(t, base)
	})
	t.Run("follow mounted", func(t *testing.T) {
		base := runtime.NumGoroutine()
		m := startMount(t, s.state)
		f := follow(s, 3)
		f.expect(t, 3)
		if err := m.j.Append(context.Background(), mkdirs(4, 1)...); err != nil {
			t.Fatal(err)
		}
		f.expect(t, 4)
		f.end(t)
		m.stop()
		settle(t, base)
	})
	for _, path := range []string{"", "live/big"} {
		t.Run("fetch closed early "+path, func(t *testing.T) {
			base := runtime.NumGoroutine()
			file := fileOf(path, big)
			r, err := s.c.Fetch(context.Background(), file)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := r.Read(make([]byte, 10)); err != nil {
				t.Fatal(err)
			}
			r.Close()
			settle(t, base)
		})
	}
	t.Run("fetch cancelled", func(t *testing.T) {
		base := runtime.NumGoroutine()
		ctx, cancel := context.WithCancel(context.Background())
		r, err := s.c.Fetch(ctx, fileOf("", big))
		if err != nil {
			t.Fatal(err)
		}
		cancel()
		if _, err := readAll(r); !errors.Is(err, context.Canceled) {
			t.Errorf("got %v, want context.Canceled", err)
		}
		r.Close()
		settle(t, base)
	})
}

func readAll(r interface{ Read([]byte) (int, error) }) (int, error) {
	buf := make([]byte, 64<<10)
	total := 0
	for {
		n, err := r.Read(buf)
		total += n
		if err != nil {
			return total, err
		}
	}
}
