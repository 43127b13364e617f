package repl

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/cmfs-project/cmfs/internal/backoff"
	"github.com/cmfs-project/cmfs/internal/checksum"
	"github.com/cmfs-project/cmfs/journal"
)

// Content moves while a fetcher looks for it. Once an event named it at a
// path, cmfs only ever moves it forward, in journal order: along the
// renames (RENAME*, LINK) that take the path elsewhere, and finally into
// cmroot, when the name that holds it is overwritten or deleted (or
// before an in-place write, by a copy). cmroot is the end: an entry stays
// until gc, after the retention. So the places a content can be in are a
// sequence — the path, the names later renames gave it in journal order,
// then cmroot — and the content's place only advances along it.
//
// A lookup that visits the places in that same order cannot pass the
// content: if it is not at the place looked at, it is further on, and
// still ahead when the next place is looked at. Looking in any other
// order can miss content that is there all along, e.g. cmroot before the
// renamed name (the defect this fixes): cmroot is checked, then the name
// is overwritten, which moves the content into cmroot, then the name
// is checked and holds other bytes. After a pass over every known place
// found nothing, the content can only be at a place the journal does not
// name yet: cmfs moves the file first and commits the event that says so
// right after. Locate then reads the events journaled since and looks at
// the new places (the older ones cannot hold it any more) and at cmroot
// again, until the journal has been quiet for locateQuiet or locateFor
// has passed: content still not found then is gone (gc, or a failed
// preservation cmfs undid), or kept out of reach longer than a lookup
// waits (an event not committed yet); the caller's retry covers the
// latter.

// Places are where Locate looks for content, and how.
type Places struct {
	// Events is the source's journal: Locate follows the renames it lists.
	Events Events
	// Live opens the regular file at rel, a path relative to the
	// warehouse root, if one of the given size is there; nil and no error
	// when none is.
	Live func(rel string, size int64) (*os.File, error)
	// CMRoot opens cmroot entry name; an error wrapping fs.ErrNotExist
	// when there is none.
	CMRoot func(name string) (*os.File, error)
	// Sleep waits between two passes; default: a timer that ends with ctx.
	Sleep func(ctx context.Context, d time.Duration) error
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// How long Locate keeps looking after a pass over every known place
// found nothing: until the journal has had no new event for locateQuiet,
// at most locateFor, with pauses growing from locatePause.
const (
	locateFor   = 2 * time.Second
	locateQuiet = 250 * time.Millisecond
	locatePause = 5 * time.Millisecond
)

// Where says where Locate found the content.
type Where int

const (
	// AtPath: at f.Path or a name later renames gave it (the live tree).
	AtPath Where = iota + 1
	// InCMRoot: the cmroot entry CMName(f).
	InCMRoot
)

// Locate finds the content f names (f.Path, f.Size, f.XXH64), which event
// after (0: unknown) named: at f.Path, at the names later events renamed
// it to, or in cmroot, looking in the order the content moves through
// them (see above). skipPath leaves f.Path itself out: the caller read it
// and found other bytes. A file found in the live tree has been read
// through and matched; it is returned positioned at its start. A cmroot
// entry is returned unread (it cannot change; the caller checks it as it
// reads). Without an event, or without p.Events, Locate looks at f.Path
// and cmroot once.
//
// Errors: fs.ErrNotExist (wrapped) when no place held the content; an
// error of p.Events or p.CMRoot; ctx's error.
func Locate(ctx context.Context, p Places, f journal.File, after uint64, skipPath bool) (*os.File, Where, error) {
	sleep, now := p.Sleep, p.Now
	if sleep == nil {
		sleep = backoff.Sleep
	}
	if now == nil {
		now = time.Now
	}
	chase := p.Events != nil && after > 0 && f.Path != ""
	var cands chain
	if f.Path != "" {
		cands = chain{f.Path}
	}
	checked := 0
	if skipPath {
		checked = 1
	}
	next := after + 1 // the first event not read yet
	start := now()
	heard := start // when the journal last had news
	// No jitter: the pauses wait for the local journal, not a shared server,
	// and tests replay them exactly.
	pause := backoff.Backoff{Min: locatePause, Max: locateQuiet / 2, NoJitter: true}
	buf := make([]byte, 256<<10)
	for {
		if err := ctx.Err(); err != nil {
			return nil, 0, err
		}
		if chase {
			last, err := p.Events.Last(ctx)
			if err != nil {
				return nil, 0, err
			}
			if last >= next {
				if err := p.Events.Range(ctx, next, last, cands.follow); err != nil {
					return nil, 0, err
				}
				next, heard = last+1, now()
			}
		}
		for ; checked < len(cands); checked++ {
			if file := matchLive(p.Live, cands[checked], f, buf); file != nil {
				return file, AtPath, nil
			}
		}
		file, err := p.CMRoot(CMName(f))
		if err == nil {
			return file, InCMRoot, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, 0, err
		}
		t := now()
		if !chase || t.Sub(start) >= locateFor || t.Sub(heard) >= locateQuiet {
			return nil, 0, err
		}
		if err := sleep(ctx, pause.Next()); err != nil {
			return nil, 0, err
		}
	}
}

// chain is the names a content may have had since the event that named
// it, in the order events gave them; a name may appear twice (renamed
// away and back).
type chain []string

// follow adds the names event e gives to names in the chain.
func (c *chain) follow(e *journal.Event) error {
	switch e.Type {
	case journal.Rename, journal.RenameDatabase, journal.RenameTable, journal.RenamePartition, journal.Link:
	default:
		return nil
	}
	n := len(*c)
	for _, name := range (*c)[:n] {
		c.move(name, e.Path, e.NewPath)
		if e.Target == "exchange" {
			c.move(name, e.NewPath, e.Path)
		}
	}
	return nil
}

// move adds where renaming old to new takes name, if it does.
func (c *chain) move(name, old, new string) {
	if len(*c) < maxFollow && (name == old || strings.HasPrefix(name, old+"/")) {
		*c = append(*c, new+name[len(old):])
	}
}

// matchLive opens the live file rel and returns it, at its start, if it
// holds f's content; nil if it does not, is not there, or cannot be
// opened or read (a name a rename gave may lead anywhere by now: one that
// is refused, or fails, is passed, not served).
func matchLive(live func(string, int64) (*os.File, error), rel string, f journal.File, buf []byte) *os.File {
	if checkRel(rel) != nil {
		return nil
	}
	file, err := live(rel, f.Size)
	if err != nil || file == nil {
		return nil
	}
	n, sum, err := checksum.Reader(io.LimitReader(file, f.Size+1), buf)
	if err != nil || n != f.Size || sum != f.XXH64 {
		file.Close()
		return nil
	}
	if _, err := file.Seek(0, io.SeekStart); err != nil {
		file.Close()
		return nil
	}
	return file
}
