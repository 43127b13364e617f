package journal

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"
	bolt "go.etcd.io/bbolt"
)

// request is one Append call on its way through the writer.
type request struct {
	events []*Event
	// tails holds the events' JSON from "type" on, encoded by the caller
	// so that the writer only adds id and time: tails[ends[i-1]:ends[i]].
	tails   []byte
	ends    []int
	stamped []bool     // which events got their Time from the writer
	err     error      // set when the request fails on its own
	done    chan error // buffered: the writer never blocks on it
}

var requestPool = sync.Pool{New: func() any { return &request{done: make(chan error, 1)} }}

func newRequest(events []*Event) *request {
	r := requestPool.Get().(*request)
	r.events = events
	for _, e := range events {
		r.tails = appendTail(r.tails, e)
		r.ends = append(r.ends, len(r.tails))
	}
	return r
}

// free returns r to the pool; only after its answer was received.
func (r *request) free() {
	r.events, r.err = nil, nil
	r.tails, r.ends, r.stamped = r.tails[:0], r.ends[:0], r.stamped[:0]
	requestPool.Put(r)
}

// writer is the state of the writer goroutine, reused across commits.
type writer struct {
	batch  []*request
	keys   []byte // 8 bytes per event of the batch
	arena  []byte // the records of the batch, back to back
	ends   []int  // ends[i] is where record i ends in arena
	failed error  // a commit whose outcome is unknown: refuse all others
}

// run is the writer goroutine: it takes every pending request, up to
// MaxBatch events, commits them together and answers them. It returns when
// Close has closed reqs and the queue is drained.
func (l *Log) run() {
	defer close(l.stopped)
	w := &l.w
	for {
		r, ok := <-l.reqs
		if !ok {
			return
		}
		w.batch = append(w.batch[:0], r)
		n := len(r.events)
	drain:
		for n < l.opts.MaxBatch {
			select {
			case r, ok := <-l.reqs:
				if !ok {
					break drain
				}
				w.batch = append(w.batch, r)
				n += len(r.events)
			default:
				break drain
			}
		}
		if !noLinger {
			n = l.linger(n)
		}
		l.commit(w.batch)
		for i, r := range w.batch {
			w.batch[i] = nil
			r.done <- r.err
		}
	}
}

// lingerMax bounds how long the writer waits for callers it just
// acknowledged to queue their next append.
const lingerMax = 200 * time.Microsecond

// linger lets the batch grow while more Append calls are under way than it
// holds: callers just acknowledged by the previous commit that are about to
// queue again. Without it, a steady crowd of writers splits into two
// halves that alternate, each commit carrying half of them; with it, one
// commit carries (nearly) all of them. A lone writer never waits. It
// returns the number of events in the batch.
func (l *Log) linger(n int) int {
	w := &l.w
	var start time.Time
	for n < l.opts.MaxBatch && int64(len(w.batch)) < l.inflight.Load() {
		select {
		case r, ok := <-l.reqs:
			if !ok {
				return n
			}
			w.batch = append(w.batch, r)
			n += len(r.events)
			continue
		default:
		}
		if start.IsZero() {
			start = time.Now()
		} else if time.Since(start) > lingerMax {
			break
		}
		runtime.Gosched()
	}
	return n
}

// commit stores the batch in one transaction and sets each request's err.
func (l *Log) commit(batch []*request) {
	w := &l.w
	if w.failed != nil {
		for _, r := range batch {
			r.err = w.failed
		}
		return
	}
	now := time.Now().UTC()
	w.keys, w.arena, w.ends = w.keys[:0], w.arena[:0], w.ends[:0]
	id := l.last.Load()
	for _, r := range batch {
		keys, arena, ends, from := len(w.keys), len(w.arena), len(w.ends), id
		tail := 0
		for i, e := range r.events {
			id++
			e.ID = id
			stamp := e.Time.IsZero()
			if stamp {
				e.Time = now
			}
			r.stamped = append(r.stamped, stamp)
			start := len(w.arena)
			w.arena = append(w.arena, make([]byte, sumLen)...)
			var err error
			if w.arena, err = appendHead(w.arena, id, e.Time); err != nil {
				// Append checked the time: not reached.
				r.err = fmt.Errorf("append %s %q: %v: %w", e.Type, e.Path, err, ErrInvalid)
				break
			}
			w.arena = append(w.arena, r.tails[tail:r.ends[i]]...)
			tail = r.ends[i]
			binary.BigEndian.PutUint64(w.arena[start:], xxhash.Sum64(w.arena[start+sumLen:]))
			w.keys = binary.BigEndian.AppendUint64(w.keys, id)
			w.ends = append(w.ends, len(w.arena))
		}
		if r.err != nil {
			// Only this request fails: take back its ids.
			r.reset()
			w.keys, w.arena, w.ends, id = w.keys[:keys], w.arena[:arena], w.ends[:ends], from
		}
	}
	if len(w.ends) == 0 {
		return
	}
	// The pages this commit may add must be allocated already: a commit
	// that failed writing them would leave bbolt's outcome unknown.
	if err := l.res.room(l.hwm.Load(), commitNeed(len(w.arena), len(w.ends), l.pageSize)); err != nil {
		for _, r := range batch {
			if r.err == nil {
				r.reset()
				r.err = err
			}
		}
		return
	}
	err := l.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(eventsBucket)
		// Keys only ever grow: fill pages completely.
		b.FillPercent = 1.0
		start := 0
		for i, end := range w.ends {
			if err := b.Put(w.keys[i*keyLen:(i+1)*keyLen], w.arena[start:end]); err != nil {
				return err
			}
			start = end
		}
		return nil
	})
	if err != nil {
		err = fmt.Errorf("journal commit: %w", err)
		for _, r := range batch {
			if r.err == nil {
				r.reset()
				r.err = err
			}
		}
		// A commit that failed before writing its meta page left the
		// database as it was, and the next one may try again. If the
		// database shows anything else, the outcome is unknown: refuse
		// every later append rather than reuse or skip ids.
		var last uint64
		if verr := l.db.View(func(tx *bolt.Tx) error {
			var err error
			last, err = lastID(tx)
			return err
		}); verr != nil || last != l.last.Load() {
			w.failed = err
		}
		return
	}
	l.last.Store(id)
	l.commits.Add(1)
	l.broadcast()
	var hwm int64
	l.db.View(func(tx *bolt.Tx) error { hwm = tx.Size(); return nil })
	l.hwm.Store(hwm)
	l.res.refill(hwm)
}

// reset undoes what the writer assigned to a request that failed.
func (r *request) reset() {
	for i, e := range r.events {
		e.ID = 0
		if i < len(r.stamped) && r.stamped[i] {
			e.Time = time.Time{}
		}
	}
}

// noLinger turns linger off, for benchmarks that compare.
var noLinger bool
