package repl

import (
	"context"
	"errors"
	"iter"
	"os"
	"sync"

	"github.com/cmfs-project/cmfs/journal"
)

// A load fetches ahead. While the loader applies one event, a pool of
// workers stages the new content of the events after it, each file into
// its own temp file in the staging directory, verified as it streams.
// Staged files are invisible, so fetching ahead changes nothing the
// target shows: content still becomes visible one event at a time, in
// event order, by the loader's rename. What it buys is overlap: the
// source's reads, the transfer and the target's writes of several files
// are in flight at once instead of one after the other.

// DefaultFetchers is how many files a load fetches at once unless
// LoadOptions.Fetchers says otherwise.
const DefaultFetchers = 8

// staged is one file fetched ahead of the loader.
type staged struct {
	f     journal.File
	event uint64 // the event it is new content of; 0 in a BOOTSTRAP
	done  chan struct{}
	tmp   string // set with err == nil once done: the staging file
	err   error
}

// step is one unit a load applies in order: an event of an INCREMENTAL
// dump (e set), or one file of a BOOTSTRAP (e nil, adds holds the file).
type step struct {
	id   uint64
	e    *journal.Event
	adds []journal.File
	// dirs, for an arrival in a filtered dump (see filter.go), are the
	// directories of the tree that replaces what is at e.Path.
	dirs []string
	// links are the symlinks of that tree.
	links []Entry
	// jobs parallels adds: a file fetched ahead, or nil for one the
	// loader fetches itself (if it must: see fetchesAhead).
	jobs []*staged
	err  error // reading the step from the dump failed
}

// ahead runs the fetch-ahead of one load: a producer that reads the steps
// and hands their files to the workers, bounded by a window of files in
// flight, and the workers. The loader takes the steps from out, in order.
type ahead struct {
	l      *loader
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	out    chan step
	jobs   chan *staged
	window chan struct{} // a slot per file staged or in flight, not yet taken
}

// startAhead starts fetching ahead of the loader along steps, with n
// workers. Stop it with stop, always.
func (l *loader) startAhead(steps iter.Seq[step], n int) *ahead {
	if n <= 0 {
		n = DefaultFetchers
	}
	ctx, cancel := context.WithCancel(l.ctx)
	a := &ahead{
		l: l, ctx: ctx, cancel: cancel,
		out:    make(chan step, 2*n),
		jobs:   make(chan *staged, 2*n),
		window: make(chan struct{}, 2*n),
	}
	for range n {
		a.wg.Add(1)
		go a.work()
	}
	a.wg.Add(1)
	go a.produce(steps)
	return a
}

func (a *ahead) produce(steps iter.Seq[step]) {
	defer a.wg.Done()
	defer close(a.out)
	defer close(a.jobs)
	for s := range steps {
		if s.err == nil {
			s.jobs = make([]*staged, len(s.adds))
			var seen map[content]bool
			for i, f := range s.adds {
				if !a.l.fetchesAhead(s.e, f) {
					continue
				}
				// The other names of a hard-linked file are linked to
				// the first one (apply), not fetched.
				if seen[contentOf(f)] {
					continue
				}
				if len(s.adds) > 1 {
					if seen == nil {
						seen = map[content]bool{}
					}
					seen[contentOf(f)] = true
				}
				select {
				case a.window <- struct{}{}:
				case <-a.ctx.Done():
					return
				}
				j := &staged{f: f, event: s.id, done: make(chan struct{})}
				a.jobs <- j // never blocks: the window is no larger
				s.jobs[i] = j
			}
		}
		select {
		case a.out <- s:
		case <-a.ctx.Done():
			return
		}
		if s.err != nil {
			return
		}
	}
}

func (a *ahead) work() {
	defer a.wg.Done()
	buf := make([]byte, copyBuf)
	for j := range a.jobs {
		if a.ctx.Err() == nil {
			j.tmp, j.err = a.l.fetchTo(a.ctx, j.f, j.event, buf)
		} else {
			j.err = a.ctx.Err()
		}
		close(j.done)
	}
}

// take waits for j and returns its staging file, freeing its slot in the
// window: the caller renames the file into place or removes it.
func (a *ahead) take(j *staged) (string, error) {
	select {
	case <-j.done:
	case <-a.ctx.Done():
		return "", a.ctx.Err()
	}
	<-a.window
	return j.tmp, j.err
}

// stop cancels what is still in flight and waits for the producer and
// the workers to end. Files staged and never taken stay in the staging
// directory, which the load removes after.
func (a *ahead) stop() {
	a.cancel()
	for range a.out {
		// drain, so that the producer ends
	}
	a.wg.Wait()
}

// fetchesAhead says whether f, new content of event e (nil: a BOOTSTRAP
// file), is fetched ahead. Not the adds of a rename or link, which may
// find their content moved into place by the event itself, nor empty
// files, nor a file the target seems to hold already (same size: the
// loader checks it and fetches only if it must), so that a rerun fetches
// nothing twice.
func (l *loader) fetchesAhead(e *journal.Event, f journal.File) bool {
	if f.Size == 0 {
		return false
	}
	if e != nil {
		switch e.Type {
		case journal.Rename, journal.RenameDatabase, journal.RenameTable, journal.RenamePartition, journal.Link:
			return false
		}
	}
	p, err := l.abs(f.Path)
	if err != nil {
		return false // the loader refuses it, in order
	}
	fi, err := os.Lstat(p)
	return errors.Is(err, os.ErrNotExist) || err == nil && (!fi.Mode().IsRegular() || fi.Size() != f.Size)
}
