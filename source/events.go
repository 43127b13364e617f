package source

import (
	"github.com/cmfs-project/cmfs/api/eventpb"

	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/grpc"

	"github.com/cmfs-project/cmfs/api/replpb"
	"github.com/cmfs-project/cmfs/control"
	"github.com/cmfs-project/cmfs/internal/backoff"
	"github.com/cmfs-project/cmfs/internal/statedir"
	"github.com/cmfs-project/cmfs/journal"
	"github.com/cmfs-project/cmfs/upkeep"
)

// Retrying while the journal is locked and the control socket does not
// answer (a mount starting or stopping): first after retryMin, then
// backing off to retryMax apart, and for a call that does not follow at
// most retryFor in all.
const (
	retryMin = 50 * time.Millisecond
	retryMax = time.Second
	retryFor = 5 * time.Second
)

// probeTimeout bounds asking the control socket whether a mount answers.
const probeTimeout = 2 * time.Second

// errNoMount: no mount answers on the control socket.
var errNoMount = errors.New("no mount answers")

// retryError says the journal cannot be read just now: a mount holds it
// whose socket does not answer (yet), a mount is creating it, or, while
// following, there is none yet.
type retryError struct{ err error }

func (e *retryError) Error() string { return e.err.Error() }
func (e *retryError) Unwrap() error { return e.err }

// fnError marks an error of the caller's fn, which ends a walk as it is.
type fnError struct{ err error }

func (e *fnError) Error() string { return e.err.Error() }
func (e *fnError) Unwrap() error { return e.err }

// Events implements replpb.SourceServer.
func (s *Server) Events(req *replpb.EventsRequest, stream grpc.ServerStreamingServer[eventpb.Event]) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	defer context.AfterFunc(s.life, cancel)()
	err := s.walk(ctx, req.From, req.To, req.Follow, func(e *journal.Event) error {
		if err := stream.Send(control.EventToProto(e)); err != nil {
			return err
		}
		s.stats.events.Add(1)
		return nil
	})
	if err != nil && s.life.Err() != nil && stream.Context().Err() == nil {
		// The server is going away, not the client: end the stream cleanly.
		return nil
	}
	return toStatus(err)
}

// Status implements replpb.SourceServer.
func (s *Server) Status(ctx context.Context, _ *replpb.StatusRequest) (*replpb.StatusResponse, error) {
	last, mounted, err := s.last(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	return &replpb.StatusResponse{
		SourceId:    s.cfg.SourceID,
		LastEventId: last,
		Backing:     s.cfg.Backing,
		Mounted:     mounted,
	}, nil
}

func (s *Server) socket() string      { return filepath.Join(s.cfg.State, statedir.SocketFile) }
func (s *Server) journalPath() string { return filepath.Join(s.cfg.State, statedir.JournalFile) }

// last returns the newest event id, from the mount when one answers.
func (s *Server) last(ctx context.Context) (last uint64, mounted bool, err error) {
	b, start := backoff.Backoff{Min: retryMin, Max: retryMax}, time.Now()
	for {
		if c, err := control.Dial(s.socket()); err == nil {
			pctx, cancel := context.WithTimeout(ctx, probeTimeout)
			st, err := c.Status(pctx)
			cancel()
			c.Close()
			if err == nil {
				return st.LastEventID, true, nil
			}
		}
		j, err := s.openJournal()
		var re *retryError
		switch {
		case errors.As(err, &re):
			if time.Since(start) > retryFor {
				return 0, false, re.err
			}
		case errors.Is(err, fs.ErrNotExist):
			return 0, false, nil // never mounted: nothing journaled yet
		case err != nil:
			return 0, false, err
		default:
			last := j.Last()
			return last, false, j.Close()
		}
		if err := backoff.Sleep(ctx, b.Next()); err != nil {
			return 0, false, err
		}
	}
}

// openJournal opens the journal read-only. The error wraps
// fs.ErrNotExist when there is none (never mounted), and is a
// *retryError while a mount holds or creates it.
func (s *Server) openJournal() (*journal.Log, error) {
	p := s.journalPath()
	j, err := journal.Open(p, journal.Options{ReadOnly: true, LockTimeout: time.Second})
	switch {
	case err == nil:
		return j, nil
	case errors.Is(err, journal.ErrLocked):
		return nil, &retryError{s.lockedErr()}
	case errors.Is(err, fs.ErrNotExist):
		return nil, err
	}
	if fi, serr := os.Stat(p); serr == nil && fi.Size() == 0 {
		// A mount has created the file and not yet written its first
		// pages (nor taken its lock).
		return nil, &retryError{err}
	}
	return nil, err
}

func (s *Server) lockedErr() error {
	return fmt.Errorf("journal %s is held by a mount whose control socket does not answer: %w", s.journalPath(), ErrUnavailable)
}

// walk calls fn for every event with from <= id <= to (to 0: up to the
// newest), and with follow for every new one until to is reached or ctx
// ends. It reads from the mount while one answers and from the journal
// otherwise, switching when a mount starts or stops, so each id is given
// to fn once, in order.
func (s *Server) walk(ctx context.Context, from, to uint64, follow bool, fn func(*journal.Event) error) error {
	next := max(from, 1)
	if to != 0 && to < next {
		return fmt.Errorf("range from %d to %d is empty: %w", from, to, ErrInvalid)
	}
	track := func(e *journal.Event) error {
		if e.ID < next {
			return nil // delivered by the other source already
		}
		if err := fn(e); err != nil {
			return &fnError{err}
		}
		next = e.ID + 1
		return nil
	}
	b, start := backoff.Backoff{Min: retryMin, Max: retryMax}, time.Now()
	var retry error // why the last round made no progress
	for {
		before := next
		err := s.walkMount(ctx, next, to, follow, track)
		if errors.Is(err, errNoMount) {
			err = s.walkJournal(ctx, next, to, follow, track)
		}
		var fe *fnError
		var re *retryError
		switch {
		case errors.As(err, &fe):
			return fe.err
		case err == nil && (!follow || (to != 0 && next > to)):
			return nil
		case errors.As(err, &re):
			retry = re.err
		case err != nil:
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		// A mount stopped under a follow (nil), or the journal cannot
		// be read just now (retryError): go round again.
		if next != before {
			b.Reset()
			start = time.Now()
		}
		if !follow && retry != nil && time.Since(start) > retryFor {
			return retry
		}
		if err := backoff.Sleep(ctx, b.Next()); err != nil {
			return err
		}
	}
}

// walkMount relays events from the mount's control socket; errNoMount
// when none answers (or it stopped answering).
func (s *Server) walkMount(ctx context.Context, from, to uint64, follow bool, fn func(*journal.Event) error) error {
	c, err := control.Dial(s.socket())
	if err != nil {
		return errNoMount
	}
	defer c.Close()
	err = c.Events(ctx, from, to, follow, func(e journal.Event) error { return fn(&e) })
	var fe *fnError
	if err != nil && !errors.As(err, &fe) && ctx.Err() == nil && errors.Is(err, control.ErrUnavailable) {
		return errNoMount
	}
	return err
}

// walkJournal reads the journal read-only; a *retryError when a mount
// holds or creates it, or while following one that does not exist yet.
func (s *Server) walkJournal(ctx context.Context, from, to uint64, follow bool, fn func(*journal.Event) error) error {
	j, err := s.openJournal()
	var re *retryError
	switch {
	case errors.As(err, &re):
		return err
	case errors.Is(err, fs.ErrNotExist) && !follow:
		return nil // never mounted: nothing journaled yet
	case errors.Is(err, fs.ErrNotExist):
		return &retryError{err}
	case err != nil:
		return err
	}
	defer j.Close()
	err = upkeep.Walk(ctx, j, from, to, follow, fn)
	var fe *fnError
	if !errors.As(err, &fe) && errors.Is(err, journal.ErrLocked) {
		return &retryError{s.lockedErr()}
	}
	return err
}

// serverEvents reads the server's journal as repl.Events, for following
// renames on the server's side.
type serverEvents struct{ s *Server }

func (e serverEvents) Last(ctx context.Context) (uint64, error) {
	last, _, err := e.s.last(ctx)
	return last, err
}

func (e serverEvents) Range(ctx context.Context, from, to uint64, fn func(*journal.Event) error) error {
	return e.s.walk(ctx, from, to, false, fn)
}

// Wait returns once the journal holds an event after after, and its id:
// woken by the mount's follow stream while one answers, by the journal
// file's own poll otherwise (a following Events stream's source, and its
// switching between the two). Errors: ctx's, the journal's.
func (e serverEvents) Wait(ctx context.Context, after uint64) (uint64, error) {
	var got uint64
	err := e.s.walk(ctx, after+1, 0, true, func(ev *journal.Event) error {
		got = ev.ID
		return errWoken
	})
	if got != 0 {
		return got, nil
	}
	return 0, err
}

// errWoken ends Wait's follow at the first new event.
var errWoken = errors.New("woken")
