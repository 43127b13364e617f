package ingest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"strconv"
	"time"

	"github.com/cmfs-project/cmfs/container"
	"github.com/cmfs-project/cmfs/internal/backoff"
	"github.com/cmfs-project/cmfs/internal/durable"
	"github.com/cmfs-project/cmfs/journal"
	"github.com/cmfs-project/cmfs/repl"
)

// Store is what a Feed needs of the node's containers; *container.Store
// is the one implementation.
type Store interface {
	PutReplication(r io.Reader, replication string) (uint64, container.BlockID, error)
	CloseContainer(id uint64) (container.Descriptor, error)
	Descriptor(id uint64) (container.Descriptor, error)
	OpenBlock(b container.BlockID) (io.ReadCloser, int64, error)
	List() []container.Descriptor
	WaitScan(ctx context.Context, id uint64) (container.Descriptor, error)
}

var _ Store = (*container.Store)(nil)

// Waiter is a journal (Config.Events) that can say when it grows: Wait
// returns once it holds an event after after. Run follows such a journal
// instead of polling it; source.Server.Journal is one.
type Waiter interface {
	Wait(ctx context.Context, after uint64) (uint64, error)
}

// DefaultBatch bounds the events one Step reads, so that a Feed far
// behind records its progress as it goes.
const DefaultBatch = 1000

// Config says what a Feed reads and where it writes.
type Config struct {
	Store Store
	// Events is the journal (source.Server.Journal in replicad serve).
	Events repl.Events
	// Fetcher reads the content a journal.File names
	// (*repl.LocalFetcher on the mount's backing directory and cmroot).
	Fetcher repl.Fetcher
	// Cursor is the file that records the progress; created if missing.
	Cursor string
	// Replication is the replication config of the containers the Feed
	// fills; "" means the store's default.
	Replication string
	// Idle closes the container the Feed last put into once no Put has
	// come for this long; 0 never does.
	Idle time.Duration
	// Batch bounds the events of one Step; 0 means DefaultBatch.
	Batch int
	// Logger, if set, is told of content that was skipped (warn) and, at
	// debug, of every event ingested. Run also reports failed Steps
	// through it.
	Logger *slog.Logger
	// Now is the clock of the idle close; nil means time.Now.
	Now func() time.Time
}

// Stats is what one Step did.
type Stats struct {
	// Events counts the events read; Last is the newest ingested after
	// the Step, Newest the journal's newest.
	Events       int
	Last, Newest uint64
	// Files counts the files put as new blocks, Bytes their bytes; Held
	// the files whose content the node held already; Skipped those whose
	// content is nowhere.
	Files, Held, Skipped int
	Bytes                int64
	// Closed is the container the Step closed for being idle; 0 if none.
	Closed uint64
}

// cursor is the content of Config.Cursor.
type cursor struct {
	// Last is the newest event ingested.
	Last uint64 `json:"last"`
	// Durable is the newest event whose blocks are all in closed
	// containers: a Feed resumes after it.
	Durable uint64 `json:"durable"`
}

// Feed ingests a journal into a store. Its methods are not safe for
// concurrent use: one goroutine runs Step (or Run).
type Feed struct {
	cfg    Config
	cur    cursor
	saved  cursor
	open   uint64    // the container last put into, while it may be open
	put    time.Time // when that was
	waited bool      // the first Step waited for the store's scans
}

// New reads the cursor (if any) and returns a Feed that resumes after its
// durable event.
//
// Errors: a configuration that lacks Store, Events, Fetcher or Cursor; a
// cursor file that cannot be read or parsed.
func New(cfg Config) (*Feed, error) {
	switch {
	case cfg.Store == nil || cfg.Events == nil || cfg.Fetcher == nil:
		return nil, errors.New("ingest: a store, a journal and a fetcher are needed")
	case cfg.Cursor == "":
		return nil, errors.New("ingest: no cursor file")
	case cfg.Idle < 0:
		return nil, fmt.Errorf("ingest: idle timeout %v is negative", cfg.Idle)
	}
	if cfg.Batch <= 0 {
		cfg.Batch = DefaultBatch
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	f := &Feed{cfg: cfg}
	b, err := os.ReadFile(cfg.Cursor)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("ingest: cursor: %w", err)
	default:
		if err := json.Unmarshal(b, &f.cur); err != nil || f.cur.Durable > f.cur.Last {
			return nil, fmt.Errorf("ingest: cursor %s is damaged (%q): remove it to ingest the journal from its start", cfg.Cursor, b)
		}
	}
	f.saved = f.cur
	// Resume after what is durable; the rest is read again and found held.
	f.cur.Last = f.cur.Durable
	return f, nil
}

// Last returns the newest event ingested.
func (f *Feed) Last() uint64 { return f.cur.Last }

// Progress is what a cursor file records, as ReadProgress reads it.
type Progress struct {
	// Last is the newest event ingested; Durable the newest whose blocks
	// are all in closed containers (a restart resumes after it).
	Last, Durable uint64
}

// ReadProgress reads the cursor file at path without a Feed: what a Feed
// running in another goroutine or process last recorded. A missing file
// is no progress (zero, nil).
//
// Errors: the file's, or a damaged cursor.
func ReadProgress(path string) (Progress, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Progress{}, nil
	} else if err != nil {
		return Progress{}, fmt.Errorf("ingest: cursor: %w", err)
	}
	var c cursor
	if err := json.Unmarshal(b, &c); err != nil || c.Durable > c.Last {
		return Progress{}, fmt.Errorf("ingest: cursor %s is damaged (%q)", path, b)
	}
	return Progress{Last: c.Last, Durable: c.Durable}, nil
}

// Step ingests the events after the last one ingested, at most
// Config.Batch of them, closes the container if it has been idle, and
// records the progress durably. It returns what it did; after an error,
// what it did before it (the progress is recorded all the same).
//
// Errors: the journal's, the store's (a full volume), the fetcher's other
// than for content that is nowhere, the cursor file's; a journal whose
// newest event is before the last ingested (ErrJournal).
func (f *Feed) Step(ctx context.Context) (st Stats, err error) {
	defer func() {
		st.Last = f.cur.Last
		if serr := f.save(); err == nil {
			err = serr
		}
	}()
	if !f.waited {
		if err := f.waitScans(ctx); err != nil {
			return st, err
		}
		f.waited = true
	}
	newest, err := f.cfg.Events.Last(ctx)
	if err != nil {
		return st, fmt.Errorf("ingest: journal: %w", err)
	}
	st.Newest = newest
	if newest < f.cur.Last {
		return st, fmt.Errorf("ingest: the journal's newest event is %d, but %d were ingested (cursor %s): %w", newest, f.cur.Last, f.cfg.Cursor, ErrJournal)
	}
	if newest > f.cur.Last {
		to := min(newest, f.cur.Last+uint64(f.cfg.Batch))
		err = f.cfg.Events.Range(ctx, f.cur.Last+1, to, func(e *journal.Event) error {
			if e.ID != f.cur.Last+1 {
				return fmt.Errorf("ingest: event %d follows %d: %w", e.ID, f.cur.Last, ErrJournal)
			}
			if err := f.event(ctx, e, &st); err != nil {
				return err
			}
			st.Events++
			f.cur.Last = e.ID
			return nil
		})
		if err != nil {
			return st, err
		}
	}
	return st, f.checkOpen(&st)
}

// ErrJournal is returned when the journal does not continue where the
// cursor says the Feed stopped (another journal, or one rebuilt).
var ErrJournal = errors.New("ingest: journal does not match the cursor")

// waitScans waits for the scans OpenStore started (of containers a dead
// process left open, which are CLOSING while scanned, or imported ones,
// RECOVERING): until they pass, the store does not serve their blocks,
// and the replay would put them again. WaitScan returns at once for a
// container no scan runs on.
func (f *Feed) waitScans(ctx context.Context) error {
	for _, d := range f.cfg.Store.List() {
		if d.State != container.Open && d.State != container.Closed {
			if _, err := f.cfg.Store.WaitScan(ctx, d.ID); err != nil && !errors.Is(err, container.ErrNotFound) {
				return fmt.Errorf("ingest: %w", err)
			}
		}
	}
	return nil
}

// event ingests the files of e.
func (f *Feed) event(ctx context.Context, e *journal.Event, st *Stats) error {
	ctx = repl.WithEvent(ctx, e.ID)
	for _, file := range e.Files {
		err := f.file(ctx, file, st)
		if skippable(err) {
			st.Skipped++
			f.cfg.Logger.Warn("ingest: skipped content", slog.Uint64("event", e.ID), slog.String("type", string(e.Type)),
				slog.String("path", e.Path), slog.String("file", describe(file)), slog.Any("err", err))
			continue
		}
		if err != nil {
			return fmt.Errorf("ingest: event %d (%s %s): %s: %w", e.ID, e.Type, e.Path, describe(file), err)
		}
	}
	f.cfg.Logger.Debug("ingest: event", slog.Uint64("event", e.ID), slog.String("type", string(e.Type)),
		slog.String("path", e.Path), slog.Int("files", len(e.Files)))
	return nil
}

// errBadEntry marks a file entry whose size or checksum cannot be right.
var errBadEntry = errors.New("bad size or xxh64 in the event")

// skippable says whether err means the content is nowhere to be had, so
// that waiting will not help.
func skippable(err error) bool {
	return errors.Is(err, repl.ErrNoCopy) || errors.Is(err, repl.ErrChecksum) ||
		errors.Is(err, repl.ErrUnsafePath) || errors.Is(err, errBadEntry)
}

func describe(f journal.File) string {
	what := f.Path
	if f.CM != "" {
		what = "original of " + f.Path
	}
	return fmt.Sprintf("%s (%d bytes, xxh64 %s)", what, f.Size, f.XXH64)
}

// file puts one file's content unless the node holds it.
func (f *Feed) file(ctx context.Context, file journal.File, st *Stats) error {
	sum, err := strconv.ParseUint(file.XXH64, 16, 64)
	if err != nil || len(file.XXH64) != 16 || file.Size < 0 {
		return errBadEntry
	}
	want := container.BlockID{Sum: sum, Size: file.Size}
	if held, err := f.holds(want); err != nil || held {
		if held {
			st.Held++
		}
		return err
	}
	id, b, err := f.putFrom(ctx, file)
	if errors.Is(err, repl.ErrStale) && file.CM == "" {
		// The live file changed while it was read: its original is in
		// cmroot by now.
		file.CM = repl.CMName(file)
		id, b, err = f.putFrom(ctx, file)
	}
	if err != nil {
		return err
	}
	if b != want {
		return fmt.Errorf("stored as block %s, want %s: %w", b, want, repl.ErrChecksum)
	}
	if f.open != 0 && id != f.open {
		// The store has one open container: the one put into before is
		// closed, with every block of the events before this one.
		f.cur.Durable = f.cur.Last
	}
	f.open, f.put = id, f.cfg.Now()
	st.Files++
	st.Bytes += b.Size
	return nil
}

// holds says whether the store serves block b.
func (f *Feed) holds(b container.BlockID) (bool, error) {
	rc, _, err := f.cfg.Store.OpenBlock(b)
	switch {
	case err == nil:
		rc.Close()
		return true, nil
	case errors.Is(err, container.ErrBlockNotFound):
		return false, nil
	}
	return false, err
}

func (f *Feed) putFrom(ctx context.Context, file journal.File) (uint64, container.BlockID, error) {
	rc, err := f.cfg.Fetcher.Fetch(ctx, file)
	if err != nil {
		return 0, container.BlockID{}, err
	}
	defer rc.Close()
	return f.cfg.Store.PutReplication(rc, f.cfg.Replication)
}

// checkOpen follows the container last put into: closed (by its size, by
// someone else) it makes every event so far durable; idle, it closes it.
func (f *Feed) checkOpen(st *Stats) error {
	if f.open == 0 {
		// Nothing put since the last close: every block is held in a
		// closed container.
		f.cur.Durable = f.cur.Last
		return nil
	}
	d, err := f.cfg.Store.Descriptor(f.open)
	if err != nil && !errors.Is(err, container.ErrNotFound) {
		return fmt.Errorf("ingest: %w", err)
	}
	if err == nil && (d.State == container.Open || d.State == container.Closing) {
		if f.cfg.Idle == 0 || f.cfg.Now().Sub(f.put) < f.cfg.Idle {
			return nil
		}
		if _, err := f.cfg.Store.CloseContainer(f.open); err != nil {
			return fmt.Errorf("ingest: close idle container: %w", err)
		}
		st.Closed = f.open
	}
	f.open = 0
	f.cur.Durable = f.cur.Last
	return nil
}

// save writes the cursor if it moved.
func (f *Feed) save() error {
	if f.cur == f.saved {
		return nil
	}
	b, err := json.Marshal(f.cur)
	if err != nil {
		return err
	}
	if err := durable.WriteFile(f.cfg.Cursor, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("ingest: cursor: %w", err)
	}
	f.saved = f.cur
	return nil
}

// Backoff bounds of Run after a failed Step.
const (
	minBackoff = 250 * time.Millisecond
	maxBackoff = 30 * time.Second
)

// Run calls Step until ctx ends: again at once while the journal is
// ahead; else, when Config.Events is a Waiter, as soon as it reports a new
// event, and otherwise (or if its Wait fails) after poll; and in time for
// an idle close either way. After a failure (reported through
// Config.Logger, once until it changes) it waits a growing backoff. It
// returns nil when ctx ends.
func (f *Feed) Run(ctx context.Context, poll time.Duration) error {
	if poll <= 0 {
		return fmt.Errorf("ingest: poll interval %v is not positive", poll)
	}
	b := backoff.Backoff{Min: minBackoff, Max: maxBackoff}
	var lastErr string
	for {
		st, err := f.Step(ctx)
		if ctx.Err() != nil {
			return nil
		}
		switch {
		case err != nil:
			if msg := err.Error(); msg != lastErr {
				f.cfg.Logger.Warn("ingest: a step failed; retrying", slog.Any("err", err))
				lastErr = msg
			}
			backoff.Sleep(ctx, b.Next())
		default:
			if lastErr != "" {
				f.cfg.Logger.Info("ingest: resumed", slog.Uint64("event", st.Last))
			}
			b.Reset()
			lastErr = ""
			if st.Events > 0 && st.Last < st.Newest {
				continue
			}
			f.await(ctx, min(poll, f.idleIn()))
		}
		if ctx.Err() != nil {
			return nil
		}
	}
}

// idleIn is how long until the container last put into is due for its
// idle close; forever when none is.
func (f *Feed) idleIn() time.Duration {
	if f.open == 0 || f.cfg.Idle == 0 {
		return math.MaxInt64
	}
	return max(f.put.Add(f.cfg.Idle).Sub(f.cfg.Now()), time.Millisecond)
}

// await waits up to d for an event after the last ingested, or until ctx
// ends.
func (f *Feed) await(ctx context.Context, d time.Duration) {
	w, ok := f.cfg.Events.(Waiter)
	if !ok {
		backoff.Sleep(ctx, d)
		return
	}
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	if _, err := w.Wait(wctx, f.cur.Last); err != nil && wctx.Err() == nil {
		// The journal cannot say (the next Step reports why): poll.
		<-wctx.Done()
	}
}
