package journal

import (
	"fmt"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Behind the WAL: events are durable once their group's flush returns; bbolt
// receives them afterwards, from the applier goroutine, many groups per
// transaction. Until then readers find them in memory (memTail).

// applyChunk bounds the events of one bbolt transaction of the applier.
const applyChunk = 16384

// applyGather is how long the applier lets durable groups gather before it
// puts them into bbolt. A bbolt commit makes two device flushes; without
// the pause, operations made one at a time under --sync=always would each
// bring one commit of their own, whose flushes queue behind the next
// operation's on the same disk (on ext4 with a journal, 2.4 fdatasyncs per
// create and unlink with it, 4.0 without).
const applyGather = 50 * time.Millisecond

// memTail holds the records written to the WAL that bbolt does not hold yet,
// by id: recs[i] is event first+i.
type memTail struct {
	mu    sync.Mutex
	first uint64
	recs  [][]byte
	// groups are the groups the records came in, for the bytes they
	// hold (bytes: their sum).
	groups       []memGroup
	bytes, large int
}

type memGroup struct {
	last         uint64
	bytes, large int
}

// pending is the size and number of the records bbolt does not hold, and
// how many of them are large (commitNeed).
func (t *memTail) pending() (bytes, n, large int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.bytes, len(t.recs), t.large
}

// add appends the records of events first, first+1, … (back to back in
// arena, record i ending at ends[i]); it copies them.
func (t *memTail) add(first uint64, arena []byte, ends []int, large int) {
	buf := append([]byte(nil), arena...)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.groups = append(t.groups, memGroup{last: first + uint64(len(ends)) - 1, bytes: len(arena), large: large})
	t.bytes += len(arena)
	t.large += large
	if len(t.recs) == 0 {
		t.first = first
	}
	start := 0
	for _, end := range ends {
		t.recs = append(t.recs, buf[start:end:end])
		start = end
	}
}

// get returns up to max records from id from, through to, and the id of
// the first it returns (0 when it has none of them).
func (t *memTail) get(from, to uint64, max int) ([][]byte, uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.recs) == 0 || from < t.first || from >= t.first+uint64(len(t.recs)) || from > to {
		return nil, 0
	}
	i := from - t.first
	j := min(uint64(len(t.recs)), to-t.first+1, i+uint64(max))
	return append([][]byte(nil), t.recs[i:j]...), from
}

// trim forgets the records through id through: bbolt holds them.
func (t *memTail) trim(through uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.recs) == 0 || through < t.first {
		return
	}
	n := min(through-t.first+1, uint64(len(t.recs)))
	k := 0
	for k < len(t.groups) && t.groups[k].last <= through {
		t.bytes -= t.groups[k].bytes
		t.large -= t.groups[k].large
		k++
	}
	t.groups = t.groups[k:]
	clear(t.recs[:n])
	t.recs = t.recs[n:]
	t.first += n
	if len(t.recs) == 0 {
		t.recs = nil
	}
}

// cut forgets the records from id from on: a group taken back.
func (t *memTail) cut(from uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.recs) == 0 || from >= t.first+uint64(len(t.recs)) {
		return
	}
	k := len(t.groups)
	for k > 0 && t.groups[k-1].last >= from {
		k--
		t.bytes -= t.groups[k].bytes
		t.large -= t.groups[k].large
	}
	t.groups = t.groups[:k]
	if from <= t.first {
		t.recs = nil
		return
	}
	clear(t.recs[from-t.first:])
	t.recs = t.recs[:from-t.first]
}

// applyLoop is the applier goroutine: it puts the durable events bbolt
// lacks into bbolt, until stopApply is closed and nothing is left.
func (l *Log) applyLoop() {
	defer close(l.applyDone)
	gather := time.NewTimer(applyGather)
	gather.Stop()
	for {
		select {
		case <-l.applyCh:
		case <-l.stopApply:
			l.applyAll()
			return
		}
		// Under --sync=interval the groups come an interval apart
		// already. Someone waiting for bbolt (waitApplied: a writer
		// short of room, Verify) ends the pause.
		if l.opts.Sync == SyncAlways {
			gather.Reset(applyGather)
			select {
			case <-gather.C:
			case <-l.applyNow:
				gather.Stop()
			case <-l.stopApply:
				gather.Stop()
				l.applyAll()
				return
			}
		}
		if err := l.applyAll(); err != nil {
			// Retry after a pause; the writer refuses appends only when
			// the WAL fills up behind the failure.
			select {
			case <-time.After(100 * time.Millisecond):
			case <-l.stopApply:
				l.applyAll()
				return
			}
			select {
			case l.applyCh <- struct{}{}:
			default:
			}
		}
	}
}

// applyAll applies every durable event bbolt lacks.
func (l *Log) applyAll() error {
	for {
		from, to := l.applied.Load()+1, l.last.Load()
		if from > to {
			return nil
		}
		recs, first := l.mem.get(from, to, applyChunk)
		if first != from {
			return nil // not reached: the tail holds every unapplied event
		}
		if err := l.apply(from, recs); err != nil {
			l.applyErr.Store(&err)
			return err
		}
		l.applyErr.Store(nil)
	}
}

// apply puts recs, events from on, into bbolt in one transaction.
func (l *Log) apply(from uint64, recs [][]byte) error {
	l.applyMu.Lock()
	defer l.applyMu.Unlock()
	if err := l.put(from, recs); err != nil {
		// A transaction that failed may still have committed (its meta
		// page written, the sync failed): bbolt says where it stands.
		var last uint64
		if verr := l.db.View(func(tx *bolt.Tx) error {
			var err error
			last, err = lastID(tx)
			return err
		}); verr == nil && last > l.applied.Load() && last <= from+uint64(len(recs))-1 {
			l.advance(last)
		}
		return fmt.Errorf("journal: apply to %s: %w", l.path, err)
	}
	l.applies.Add(1)
	hit(fpApplied)
	l.advance(from + uint64(len(recs)) - 1)
	return nil
}

// put stores recs, events from on, in one bbolt transaction.
func (l *Log) put(from uint64, recs [][]byte) error {
	return l.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(eventsBucket)
		// Keys only ever grow: fill pages completely.
		b.FillPercent = 1.0
		var key [keyLen]byte
		for i, v := range recs {
			putKey(key[:], from+uint64(i))
			if err := b.Put(key[:], v); err != nil {
				return err
			}
		}
		return nil
	})
}

// advance records that bbolt holds every event through id.
func (l *Log) advance(id uint64) {
	l.applied.Store(id)
	l.mem.trim(id)
	var hwm int64
	l.db.View(func(tx *bolt.Tx) error { hwm = tx.Size(); return nil })
	l.hwm.Store(hwm)
	l.res.refill(hwm)
	l.appliedMu.Lock()
	close(l.appliedCh)
	l.appliedCh = make(chan struct{})
	l.appliedMu.Unlock()
}

// waitApplied waits until bbolt holds event id, or the applier fails.
func (l *Log) waitApplied(id uint64) error {
	for {
		l.appliedMu.Lock()
		ch := l.appliedCh
		l.appliedMu.Unlock()
		if l.applied.Load() >= id {
			return nil
		}
		if p := l.applyErr.Load(); p != nil {
			return fmt.Errorf("journal: the WAL is full and bbolt does not take its events: %w", *p)
		}
		for _, wake := range []chan struct{}{l.applyCh, l.applyNow} {
			select {
			case wake <- struct{}{}:
			default:
			}
		}
		select {
		case <-ch:
		case <-time.After(time.Second):
		}
	}
}

// flushAll waits until every durable event is in bbolt (Verify, Close).
func (l *Log) flushAll() error {
	if l.db == nil {
		return nil
	}
	if err := l.waitApplied(l.last.Load()); err != nil {
		return err
	}
	return nil
}

// failure is the error a failed background flush left: every later
// Append fails with it.
func (l *Log) failure() error {
	if p := l.failed.Load(); p != nil {
		return *p
	}
	return nil
}
