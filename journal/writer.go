package journal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"
)

// request is one Append call on its way through a group commit.
type request struct {
	events []*Event
	// tails holds the events' JSON from "type" on, encoded by the caller
	// so that the writer only adds id and time: tails[ends[i-1]:ends[i]].
	tails   []byte
	ends    []int
	stamped []bool // which events got their Time from the writer
	// flush makes durable what the events name; the writer runs it
	// beside the WAL's own sync, in the same group (AppendFlush).
	flush func() error
	err   error      // set when the request fails on its own
	done  chan error // buffered: the writer never blocks on it
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
	r.events, r.err, r.flush = nil, nil, nil
	r.tails, r.ends, r.stamped = r.tails[:0], r.ends[:0], r.stamped[:0]
	requestPool.Put(r)
}

// writer is the state of the leader (one at a time), reused across commits.
type writer struct {
	batch  []*request
	keys   []byte // 8 bytes per event of the batch
	arena  []byte // the records of the batch, back to back
	ends   []int  // ends[i] is where record i ends in arena
	failed error  // a commit whose outcome is unknown: refuse all others
}

// Group commit without a writer goroutine: Append queues its request; if
// no commit is under way its caller becomes the leader, takes every queued
// request (up to MaxBatch events), commits them together, answers them,
// and hands the lead to the first request queued meanwhile — whose caller
// commits the next group. A lone caller commits its own events in its own
// goroutine, with no handoff to wait for; a crowd shares each flush.

// errLead, sent on a queued request's done, makes its caller the leader.
var errLead = errors.New("journal: lead the next group")

// submit queues r and returns its result once its group is committed.
func (l *Log) submit(r *request) error {
	l.qmu.Lock()
	l.queue = append(l.queue, r)
	lead := !l.leading
	l.leading = true
	l.qmu.Unlock()
	if lead {
		l.lead()
	}
	err := <-r.done
	if err == errLead {
		l.lead()
		err = <-r.done
	}
	return err
}

// lead commits one group: the queued requests, its caller's among them.
func (l *Log) lead() {
	w := &l.w
	l.qmu.Lock()
	w.batch, l.queue = l.take(w.batch[:0], l.queue)
	l.qmu.Unlock()
	// Lingering shares a flush; under SyncInterval a commit flushes
	// nothing, and waiting would only add to each caller's wait.
	if !noLinger && l.opts.Sync == SyncAlways {
		l.linger()
	}
	l.commit(w.batch)
	for i, r := range w.batch {
		w.batch[i] = nil
		r.done <- r.err
	}
	l.qmu.Lock()
	if len(l.queue) > 0 {
		l.queue[0].done <- errLead
	} else {
		l.leading = false
	}
	l.qmu.Unlock()
}

// take moves requests from queue to batch, up to MaxBatch events (at
// least one request).
func (l *Log) take(batch, queue []*request) ([]*request, []*request) {
	n := 0
	for _, r := range batch {
		n += len(r.events)
	}
	k := 0
	for k < len(queue) && (len(batch) == 0 || n+len(queue[k].events) <= l.opts.MaxBatch) {
		batch = append(batch, queue[k])
		n += len(queue[k].events)
		k++
	}
	rest := queue[k:]
	if len(rest) == 0 {
		rest = queue[:0]
	}
	return batch, rest
}

// lingerMax bounds how long the leader waits for callers it just
// acknowledged to queue their next append.
const lingerMax = 200 * time.Microsecond

// linger lets the batch grow while more Append calls are under way than it
// holds: callers just acknowledged by the previous commit that are about to
// queue again. Without it, a steady crowd of writers splits into two
// halves that alternate, each commit carrying half of them; with it, one
// commit carries (nearly) all of them. A lone writer never waits.
func (l *Log) linger() {
	w := &l.w
	var start time.Time
	for int64(len(w.batch)) < l.inflight.Load() {
		l.qmu.Lock()
		before := len(w.batch)
		if len(l.queue) > 0 {
			w.batch, l.queue = l.take(w.batch, l.queue)
		}
		full := len(w.batch) == before && len(l.queue) > 0
		l.qmu.Unlock()
		if full {
			return
		}
		if len(w.batch) > before {
			continue
		}
		if start.IsZero() {
			start = time.Now()
		} else if time.Since(start) > lingerMax {
			return
		}
		runtime.Gosched()
	}
}

// commit writes the batch's events to the WAL, makes them durable with the
// flushes its requests carry (SyncAlways) or queues both for the flusher
// (SyncInterval), and sets each request's err. bbolt receives them later,
// from the applier.
func (l *Log) commit(batch []*request) {
	w := &l.w
	if w.failed == nil {
		w.failed = l.failure()
	}
	if w.failed != nil {
		for _, r := range batch {
			r.err = w.failed
		}
		return
	}
	now := time.Now().UTC()
	w.keys, w.arena, w.ends = w.keys[:0], w.arena[:0], w.ends[:0]
	id := l.written.Load()
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
		if r.err == nil && recordSize(len(r.events), len(w.arena)-arena) > l.wal.seg/4 {
			r.err = fmt.Errorf("append: %d events of %d bytes, more than a quarter of the WAL's segment: %w", len(r.events), len(w.arena)-arena, ErrInvalid)
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
	// The pages bbolt will add for these events, and for those still to
	// be applied, must be allocated already: an apply that failed writing
	// them would leave bbolt's outcome unknown.
	large, start := 0, 0
	for _, end := range w.ends {
		if end-start > l.pageSize/4 {
			large++
		}
		start = end
	}
	if err := l.room(len(w.arena), len(w.ends), large); err != nil {
		l.fail(batch, err)
		return
	}
	first := l.written.Load() + 1
	if err := l.writeWAL(first, w.arena, w.ends); err != nil {
		l.takeBack(first)
		l.fail(batch, err)
		return
	}
	l.mem.add(first, w.arena, w.ends, large)
	l.groups.Add(1)
	hit(fpWritten)
	if l.opts.Sync == SyncInterval {
		// The flusher takes the flushes and the newest id together, so
		// it never publishes events whose flushes it did not run.
		l.pendMu.Lock()
		for _, r := range batch {
			if r.err == nil && r.flush != nil && l.opts.FlushAll == nil {
				l.pendFns = append(l.pendFns, r.flush)
			}
		}
		l.written.Store(id)
		l.pendMu.Unlock()
		select {
		case l.dirty <- struct{}{}:
		default:
		}
		return
	}
	l.written.Store(id)
	var fns []func() error
	for _, r := range batch {
		if r.err == nil && r.flush != nil {
			fns = append(fns, r.flush)
		}
	}
	errs, werr := l.flush(fns)
	if werr != nil {
		// The WAL's own sync failed: what is on the device is unknown.
		w.failed = fmt.Errorf("journal: sync WAL: %w", werr)
		l.takeBack(first)
		l.fail(batch, w.failed)
		return
	}
	var failed bool
	k := 0
	for _, r := range batch {
		if r.err == nil && r.flush != nil {
			if errs[k] != nil {
				r.err, failed = errs[k], true
			}
			k++
		}
	}
	if failed {
		// What a request's events name could not be made durable: take
		// the group back and write it again without that request.
		if err := l.takeBack(first); err != nil {
			w.failed = fmt.Errorf("journal: retract a group from the WAL: %w", err)
			l.fail(batch, w.failed)
			return
		}
		var rest []*request
		for _, r := range batch {
			r.reset()
			if r.err == nil {
				rest = append(rest, r)
			}
		}
		l.commit(rest)
		return
	}
	hit(fpSynced)
	l.publish(id)
}

// room makes sure the reserve holds what bbolt needs to apply these
// records (bytes, n, large as commitNeed) and every record it does not
// hold yet. Short of room, it waits for the applier to catch up — what
// bbolt holds needs nothing more — and asks again.
func (l *Log) room(bytes, n, large int) error {
	for try := 0; ; try++ {
		pb, pn, pl := l.mem.pending()
		pn += n
		need := commitNeed(pb+bytes, pn, pl+large, l.pageSize) + int64(pn/applyChunk*8*l.pageSize)
		err := l.res.room(l.hwm.Load(), need)
		if err == nil || try > 0 || pn == n {
			return err
		}
		if l.last.Load() < l.written.Load() && l.opts.Sync == SyncInterval {
			l.syncPending()
		}
		if werr := l.waitApplied(l.last.Load()); werr != nil {
			return err
		}
	}
}

// fail fails every request of batch that has not failed on its own.
func (l *Log) fail(batch []*request, err error) {
	for _, r := range batch {
		if r.err == nil {
			r.reset()
			r.err = err
		}
	}
}

// writeWAL writes the events (records back to back in arena, ending at
// ends) as WAL records from id first on, starting the other segment when
// the current one is full, and returns each record's offset.
func (l *Log) writeWAL(first uint64, arena []byte, ends []int) error {
	w := l.wal
	start, at := 0, 0
	for at < len(ends) {
		// As many events as fit in a quarter segment go in one record.
		n := 0
		for at+n < len(ends) && (n == 0 || recordSize(n+1, ends[at+n]-start) <= w.seg/4) {
			n++
		}
		size := recordSize(n, ends[at+n-1]-start)
		if w.off+size > w.seg {
			if err := l.nextSegment(); err != nil {
				return err
			}
		}
		rel := make([]int, n)
		for i := range n {
			rel[i] = ends[at+i] - start
		}
		if at == 0 {
			l.groupSeg, l.groupOff = w.cur, w.off
		}
		rec := w.encode(first+uint64(at), l.last.Load(), arena[start:ends[at+n-1]], rel)
		if _, err := w.write(rec); err != nil {
			return fmt.Errorf("journal: write WAL: %w", err)
		}
		w.segLast[w.cur] = first + uint64(at+n) - 1
		start = ends[at+n-1]
		at += n
	}
	return nil
}

// nextSegment starts the other segment once bbolt holds every event it
// has: in SyncInterval it flushes first, so those events may be applied.
func (l *Log) nextSegment() error {
	w := l.wal
	other := 1 - w.cur
	hit(fpSegment)
	if need := w.segLast[other]; need > 0 {
		if l.opts.Sync == SyncInterval && l.last.Load() < need {
			l.syncPending()
		}
		if err := l.waitApplied(need); err != nil {
			return err
		}
	}
	w.start(other)
	return nil
}

// takeBack retracts the group whose first record was written at off, in
// the segment the group began in, and forgets its events. Nothing of it
// was acknowledged or applied.
func (l *Log) takeBack(first uint64) error {
	w := l.wal
	var err error
	if w.cur != l.groupSeg {
		// The group spilled into the next segment: empty that one too.
		err = w.retract(0)
		w.segLast[w.cur] = 0
		w.cur = l.groupSeg
	}
	if rerr := w.retract(l.groupOff); err == nil {
		err = rerr
	}
	w.segLast[w.cur] = 0
	if l.groupOff > 0 {
		w.segLast[w.cur] = first - 1
	}
	if err == nil && !l.opts.NoSync {
		err = w.sync()
	}
	l.mem.cut(first)
	l.written.Store(first - 1)
	return err
}

// publish makes the events up to id visible to readers: they are durable,
// with everything they name.
func (l *Log) publish(id uint64) {
	if id <= l.last.Load() {
		return
	}
	l.last.Store(id)
	l.commits.Add(1)
	l.wal.setDurable(id)
	l.broadcast()
	select {
	case l.applyCh <- struct{}{}:
	default:
	}
}

// reset undoes what the writer assigned to a request that failed.
func (r *request) reset() {
	for i, e := range r.events {
		e.ID = 0
		if i < len(r.stamped) && r.stamped[i] {
			e.Time = time.Time{}
		}
	}
	r.stamped = r.stamped[:0]
}

// noLinger turns linger off, for benchmarks that compare.
var noLinger bool
