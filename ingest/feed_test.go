package ingest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/cmroot"
	"github.com/cmfs-project/cmfs/container"
	"github.com/cmfs-project/cmfs/internal/logtest"
	"github.com/cmfs-project/cmfs/internal/wait"
	"github.com/cmfs-project/cmfs/journal"
	"github.com/cmfs-project/cmfs/repl"
)

// journalEvents is an in-memory journal.
type journalEvents struct {
	mu  sync.Mutex
	evs []journal.Event
}

func (j *journalEvents) Last(ctx context.Context) (uint64, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return uint64(len(j.evs)), nil
}

func (j *journalEvents) Range(ctx context.Context, from, to uint64, fn func(*journal.Event) error) error {
	j.mu.Lock()
	evs := append([]journal.Event(nil), j.evs...)
	j.mu.Unlock()
	for i := from; i <= to && i <= uint64(len(evs)); i++ {
		e := evs[i-1]
		if err := fn(&e); err != nil {
			return err
		}
	}
	return nil
}

func (j *journalEvents) add(typ journal.Type, path string, files ...journal.File) uint64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	id := uint64(len(j.evs) + 1)
	j.evs = append(j.evs, journal.Event{ID: id, Type: typ, Path: path, Files: files})
	return id
}

// warehouse is a backing directory, its cmroot and its journal, for a
// Feed into a real container store.
type warehouse struct {
	t       *testing.T
	root    string
	cmroot  string
	state   string
	volume  string
	journal *journalEvents
	store   *container.Store
	opts    container.Options
	logs    *logtest.Recorder
	logger  *slog.Logger
	now     time.Time
}

func newWarehouse(t *testing.T, opts container.Options) *warehouse {
	t.Helper()
	dir := t.TempDir()
	w := &warehouse{t: t, root: filepath.Join(dir, "backing"), cmroot: filepath.Join(dir, "cmroot"),
		state: filepath.Join(dir, "state"), volume: filepath.Join(dir, "volume"),
		journal: &journalEvents{}, opts: opts, now: time.Unix(1e9, 0)}
	w.logs, w.logger = logtest.New()
	for _, d := range []string{w.root, w.cmroot, w.state} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	w.opts.NoSync = true
	w.openStore()
	t.Cleanup(func() { w.store.Close() })
	return w
}

func (w *warehouse) openStore() {
	w.t.Helper()
	s, err := container.OpenStore([]string{w.volume}, w.opts)
	if err != nil {
		w.t.Fatal(err)
	}
	w.store = s
}

// restart closes and reopens the store, as a restarted replicad does.
func (w *warehouse) restart() {
	w.t.Helper()
	if err := w.store.Close(); err != nil {
		w.t.Fatal(err)
	}
	w.openStore()
}

func (w *warehouse) feed(idle time.Duration) *Feed {
	w.t.Helper()
	f, err := New(Config{
		Store:   w.store,
		Events:  w.journal,
		Fetcher: &repl.LocalFetcher{Root: w.root, CMRoot: w.cmroot, Events: w.journal},
		Cursor:  filepath.Join(w.state, "ingest.json"),
		Idle:    idle,
		Logger:  w.logger,
		Now:     func() time.Time { return w.now },
	})
	if err != nil {
		w.t.Fatal(err)
	}
	return f
}

// write puts data at the live path rel and returns its file entry.
func (w *warehouse) write(rel string, data []byte) journal.File {
	w.t.Helper()
	p := filepath.Join(w.root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		w.t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		w.t.Fatal(err)
	}
	return journal.File{Path: rel, Size: int64(len(data)), XXH64: journal.Sum(data)}
}

// preserve moves the live file rel into cmroot, as cmfs does on delete,
// and returns the entry of the original.
func (w *warehouse) preserve(rel string) journal.File {
	w.t.Helper()
	p := filepath.Join(w.root, rel)
	data, err := os.ReadFile(p)
	if err != nil {
		w.t.Fatal(err)
	}
	f := journal.File{Path: rel, Size: int64(len(data)), XXH64: journal.Sum(data)}
	f.CM = cmroot.Name(f.XXH64, f.Size)
	w.putCM(f.CM, data)
	if err := os.Remove(p); err != nil {
		w.t.Fatal(err)
	}
	return f
}

func (w *warehouse) putCM(name string, data []byte) {
	w.t.Helper()
	p, err := cmroot.EntryPath(w.cmroot, name)
	if err != nil {
		w.t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		w.t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		w.t.Fatal(err)
	}
}

// block returns the bytes the store serves for data's block, failing t
// if it serves none.
func (w *warehouse) block(data []byte) []byte {
	w.t.Helper()
	rc, _, err := w.store.OpenBlock(container.BlockIDOf(data))
	if err != nil {
		w.t.Fatalf("block of %d bytes (%s): %v", len(data), journal.Sum(data), err)
	}
	defer rc.Close()
	got, err := io.ReadAll(rc)
	if err != nil {
		w.t.Fatal(err)
	}
	return got
}

func (w *warehouse) hasBlock(data []byte) bool {
	rc, _, err := w.store.OpenBlock(container.BlockIDOf(data))
	if err == nil {
		rc.Close()
	}
	return err == nil
}

func step(t *testing.T, f *Feed) Stats {
	t.Helper()
	st, err := f.Step(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func readCursor(t *testing.T, w *warehouse) cursor {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(w.state, "ingest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var c cursor
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

func TestStepIngestsNewContentAndOriginals(t *testing.T) {
	w := newWarehouse(t, container.Options{})
	f := w.feed(0)
	if st := step(t, f); st.Events != 0 || st.Files != 0 {
		t.Fatalf("empty journal: %+v", st)
	}
	v1 := []byte("version one of the partition file\n")
	v2 := bytes.Repeat([]byte("version two "), 100_000)
	other := []byte("another table's file")
	empty := []byte{}
	w.journal.add(journal.Insert, "s.db/t/p=1/part-0", w.write("s.db/t/p=1/part-0", v1))
	w.journal.add(journal.Insert, "s.db/u/part-0", w.write("s.db/u/part-0", other))
	w.journal.add(journal.Write, "empty", w.write("empty", empty))
	// An overwrite: the original preserved, then the new content.
	orig := w.preserve("s.db/t/p=1/part-0")
	w.journal.add(journal.Truncate, "s.db/t/p=1/part-0", orig)
	w.journal.add(journal.Insert, "s.db/t/p=1/part-0", w.write("s.db/t/p=1/part-0", v2))
	// A delete of a file whose content the node holds already.
	w.journal.add(journal.Delete, "s.db/u/part-0", w.preserve("s.db/u/part-0"))

	st := step(t, f)
	if st.Events != 6 || st.Last != 6 || st.Newest != 6 || st.Files != 4 || st.Held != 2 || st.Skipped != 0 {
		t.Errorf("step: %+v, want 6 events, 4 files put, 2 held", st)
	}
	if want := int64(len(v1) + len(v2) + len(other)); st.Bytes != want {
		t.Errorf("step put %d bytes, want %d", st.Bytes, want)
	}
	for _, data := range [][]byte{v1, v2, other, empty} {
		if got := w.block(data); !bytes.Equal(got, data) {
			t.Errorf("block %s: %d bytes, want %d", journal.Sum(data), len(got), len(data))
		}
	}
	ds := w.store.List()
	if len(ds) != 1 || ds[0].State != container.Open || ds[0].Blocks != 4 {
		t.Errorf("containers %+v, want one OPEN with 4 blocks", ds)
	}
	if c := readCursor(t, w); c.Last != 6 || c.Durable != 0 {
		t.Errorf("cursor %+v: want last 6, durable 0 (the container is open)", c)
	}
	if st := step(t, f); st.Events != 0 || st.Files != 0 {
		t.Errorf("a step with nothing new: %+v", st)
	}
}

// TestResumeAfterRestart checks that a new Feed resumes after the
// durable event, and that the events it reads again are found held.
func TestResumeAfterRestart(t *testing.T) {
	w := newWarehouse(t, container.Options{})
	a, b := []byte("a's content"), []byte("b's content")
	w.journal.add(journal.Write, "a", w.write("a", a))
	w.journal.add(journal.Write, "b", w.write("b", b))
	step(t, w.feed(0))
	// The store closes its open container on Close: a restart.
	w.restart()
	f := w.feed(0)
	if f.Last() != 0 {
		t.Errorf("resumed at %d, want 0 (nothing was durable)", f.Last())
	}
	st := step(t, f)
	if st.Events != 2 || st.Files != 0 || st.Held != 2 {
		t.Errorf("replay: %+v, want 2 events, both held", st)
	}
	if c := readCursor(t, w); c.Last != 2 || c.Durable != 2 {
		t.Errorf("cursor %+v, want 2 and 2", c)
	}
	if p, err := ReadProgress(filepath.Join(w.state, "ingest.json")); err != nil || p != (Progress{Last: 2, Durable: 2}) {
		t.Errorf("ReadProgress: %+v, %v, want 2 and 2", p, err)
	}
	c := []byte("c's content")
	w.journal.add(journal.Write, "c", w.write("c", c))
	w.restart()
	f = w.feed(0)
	if f.Last() != 2 {
		t.Errorf("resumed at %d, want 2", f.Last())
	}
	if st := step(t, f); st.Events != 1 || st.Files != 1 {
		t.Errorf("after the restart: %+v, want the one new event put", st)
	}
	if !w.hasBlock(a) || !w.hasBlock(b) || !w.hasBlock(c) {
		t.Error("a block is missing")
	}
	if n := len(w.store.List()); n != 2 {
		t.Errorf("%d containers, want 2 (the replay put nothing)", n)
	}
}

func TestIdleClose(t *testing.T) {
	w := newWarehouse(t, container.Options{})
	f := w.feed(time.Minute)
	w.journal.add(journal.Write, "a", w.write("a", []byte("a")))
	step(t, f)
	w.now = w.now.Add(59 * time.Second)
	if st := step(t, f); st.Closed != 0 {
		t.Fatalf("closed after 59s of a 1m idle timeout: %+v", st)
	}
	w.now = w.now.Add(time.Second)
	st := step(t, f)
	ds := w.store.List()
	if st.Closed == 0 || len(ds) != 1 || ds[0].ID != st.Closed || ds[0].State != container.Closed {
		t.Fatalf("after 1m idle: %+v, containers %+v; want it CLOSED", st, ds)
	}
	if c := readCursor(t, w); c.Durable != 1 {
		t.Errorf("cursor %+v, want durable 1 after the close", c)
	}
	// The next content opens a new container.
	w.journal.add(journal.Write, "b", w.write("b", []byte("b")))
	step(t, f)
	if n := len(w.store.List()); n != 2 {
		t.Errorf("%d containers, want 2", n)
	}
}

// TestSizeClose checks that containers close at the store's size and the
// durable event follows.
func TestSizeClose(t *testing.T) {
	w := newWarehouse(t, container.Options{ContainerSize: 1000})
	f := w.feed(0)
	var datas [][]byte
	for i := range 5 {
		d := bytes.Repeat([]byte{byte('a' + i)}, 600)
		datas = append(datas, d)
		w.journal.add(journal.Write, fmt.Sprint(i), w.write(fmt.Sprint(i), d))
	}
	st := step(t, f)
	if st.Files != 5 {
		t.Fatalf("%+v", st)
	}
	ds := w.store.List()
	closed := 0
	for _, d := range ds {
		if d.State == container.Closed {
			closed++
		}
	}
	if len(ds) != 3 || closed != 2 {
		t.Errorf("containers %+v: want 3, 2 of them CLOSED", ds)
	}
	if c := readCursor(t, w); c.Last != 5 || c.Durable != 4 {
		t.Errorf("cursor %+v, want last 5, durable 4 (event 5 is in the open container)", c)
	}
	for _, d := range datas {
		if !w.hasBlock(d) {
			t.Errorf("block %s missing", journal.Sum(d))
		}
	}
}

// TestStaleAndMissing: a live file that no longer holds the content is
// read from cmroot; content that is nowhere is skipped and logged.
func TestStaleAndMissing(t *testing.T) {
	w := newWarehouse(t, container.Options{})
	f := w.feed(0)
	old := []byte("the content the event names")
	e := w.write("p", old)
	w.journal.add(journal.Write, "p", e)
	w.putCM(cmroot.Name(e.XXH64, e.Size), old)
	w.write("p", []byte("same size, other bytes!!!!!")) // overwritten since
	if len(old) != len("same size, other bytes!!!!!") {
		t.Fatal("test data: sizes differ")
	}
	gone := journal.File{Path: "gone", Size: 3, XXH64: journal.Sum([]byte("abc"))}
	w.journal.add(journal.Write, "gone", gone)
	w.journal.add(journal.Write, "bad", journal.File{Path: "bad", Size: 1, XXH64: "xyz"})
	st := step(t, f)
	if st.Events != 3 || st.Files != 1 || st.Skipped != 2 {
		t.Errorf("step: %+v, want 1 file put, 2 skipped", st)
	}
	if got := w.block(old); !bytes.Equal(got, old) {
		t.Errorf("block holds %q", got)
	}
	skips := w.logs.Lines(slog.LevelInfo)
	if len(skips) != 2 || skips[0].Msg != "ingest: skipped content" || skips[0].Level != slog.LevelWarn ||
		skips[0].Attrs["event"] != "2" || skips[0].Attrs["path"] != "gone" || skips[0].Attrs["err"] == "" {
		t.Errorf("logs %v, want the two skips as warnings, event 2's first", skips)
	}
	if evs := w.logs.Find("ingest: event"); len(evs) != 3 || evs[0].Level != slog.LevelDebug {
		t.Errorf("event lines %v, want one per event, at debug", evs)
	}
}

func TestJournalBehindCursor(t *testing.T) {
	w := newWarehouse(t, container.Options{})
	w.journal.add(journal.Write, "a", w.write("a", []byte("a")))
	w.journal.add(journal.Write, "b", w.write("b", []byte("b")))
	f := w.feed(time.Second)
	step(t, f)
	w.now = w.now.Add(time.Second)
	if st := step(t, f); st.Closed == 0 {
		t.Fatalf("the idle container stayed open: %+v", st)
	}
	w.journal = &journalEvents{}
	_, err := w.feed(0).Step(context.Background())
	if !errors.Is(err, ErrJournal) {
		t.Errorf("a journal behind the cursor: %v, want ErrJournal", err)
	}
}

func TestDamagedCursor(t *testing.T) {
	w := newWarehouse(t, container.Options{})
	if err := os.WriteFile(filepath.Join(w.state, "ingest.json"), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := New(Config{Store: w.store, Events: w.journal, Fetcher: &repl.LocalFetcher{}, Cursor: filepath.Join(w.state, "ingest.json")})
	if err == nil || !strings.Contains(err.Error(), "damaged") {
		t.Errorf("New with a damaged cursor: %v", err)
	}
	if _, err := ReadProgress(filepath.Join(w.state, "ingest.json")); err == nil || !strings.Contains(err.Error(), "damaged") {
		t.Errorf("ReadProgress of a damaged cursor: %v", err)
	}
	if p, err := ReadProgress(filepath.Join(w.state, "none.json")); err != nil || p != (Progress{}) {
		t.Errorf("ReadProgress of no cursor: %+v, %v, want zero", p, err)
	}
}

// failingStore fails every Put, as a full volume does.
type failingStore struct{ *container.Store }

func (failingStore) PutReplication(io.Reader, string) (uint64, container.BlockID, error) {
	return 0, container.BlockID{}, errors.New("no space left on device")
}

// TestFailureStopsBeforeTheEvent: a Put that fails ends the Step before
// its event, which the next Step tries again.
func TestFailureStopsBeforeTheEvent(t *testing.T) {
	w := newWarehouse(t, container.Options{})
	a, b := []byte("a"), []byte("b")
	w.journal.add(journal.Write, "a", w.write("a", a))
	w.journal.add(journal.Write, "b", w.write("b", b))
	f := w.feed(0)
	step(t, f)
	w.journal.add(journal.Write, "c", w.write("c", []byte("c")))
	f.cfg.Store = failingStore{w.store}
	st, err := f.Step(context.Background())
	if err == nil || !strings.Contains(err.Error(), "event 3") || st.Last != 2 {
		t.Fatalf("step with a failing store: %+v, %v; want an error naming event 3, last 2", st, err)
	}
	f.cfg.Store = w.store
	if st := step(t, f); st.Events != 1 || st.Files != 1 || st.Last != 3 {
		t.Errorf("the retry: %+v", st)
	}
}

func TestRun(t *testing.T) {
	w := newWarehouse(t, container.Options{})
	f := w.feed(0)
	data := []byte("followed")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx, 10*time.Millisecond) }()
	w.journal.add(journal.Write, "a", w.write("a", data))
	wait.For(t, 10*time.Second, "Run to ingest the event", func() bool { return w.hasBlock(data) })
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}
