package protect

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/cmfs-project/cmfs/internal/mapped"
	"github.com/cmfs-project/cmfs/journal"
	"golang.org/x/sys/unix"
)

// The in-flight table closes the window between a change taking effect and
// its event being journaled. Before a change, its intent is written into a
// slot of a file in the state directory; after the event is durable, the
// slot is cleared. If the mount process dies in between, the next mount
// finds the intent, looks at the tree, and journals the event of a change
// that did take effect. The table is written without fsync: it guards
// against the process dying, whose writes the kernel keeps; against power
// loss the journal's own fsync is the guarantee (an acknowledged change has
// its event). The one exception is a write handle's fsync, which promises
// durable content before any event names it: the first fsync of a handle
// flushes the table too (sync), so that after a power loss the handle's
// intent is there for the next mount to journal the content the file then
// holds. An intent made durable and cleared later may come back after a
// power loss, as one the kernel's own writeback of the table reached the
// disk with may: recovery finds its change journaled, or journals the
// tree as it is.
//
// An intent that fits in its slot's allocated head is stored through a
// shared mapping of the table (internal/mapped), its JSON first and its
// length last, in one 4-byte store: a process killed between the two
// leaves the slot empty, before its change began. Clearing a slot is one
// such store of 0. A rewrite of a slot's intent (update), and an intent
// too long for the head, use pwrite, which lands within a page whole or
// not at all: stores could leave the old intent half overwritten.

const slotSize = 16 << 10 // two paths of PATH_MAX and the rest, as JSON

// intent is a change under way: what to journal if it took effect.
type intent struct {
	// After is the newest id the journal had written when the change
	// began (or when a write handle last journaled): an event for it can
	// only come later. Written, not durable: under --sync=interval an
	// earlier change of the same path may be written and not yet
	// flushed, and its event must not pass for this one's.
	After   uint64       `json:"after"`
	Type    journal.Type `json:"type"`
	Path    string       `json:"path"`
	NewPath string       `json:"new_path,omitempty"`
	Target  string       `json:"target,omitempty"`
	// Orig is the preserved original, once preserved.
	Orig *journal.File `json:"orig,omitempty"`
	// Base is the content a write handle started from or last journaled
	// ("" for a file it created).
	Base string `json:"base,omitempty"`
}

// slotHead is the part of each slot that is allocated ahead
// (fallocate), so that writing an intent of ordinary names, and clearing
// it, never meets a full file system: a change is refused before it
// starts if its intent cannot be written. slotsGrow slots are allocated at
// a time.
const (
	slotHead  = 4 << 10
	slotsGrow = 32
	// mappedSlots are the slots the mapping spans (1 GiB of address
	// space, none of memory until used); slots past them use pwrite.
	mappedSlots = 1 << 16
)

// inflight is the table.
type inflight struct {
	f    *os.File
	mu   sync.Mutex
	free []int
	next int // slots in use or freed so far
	// alloc is how many slots have their head allocated; noAlloc says
	// the file system cannot preallocate.
	alloc   int
	noAlloc bool
	// held are slots whose intent must outlive their change: its event
	// could not be journaled (root.keep). end leaves them.
	held map[int]bool
	// syncs counts the flushes of the table to stable storage.
	syncs atomic.Int64
	// m maps the table; nil where the file system cannot map it
	// (pwrite then serves every slot).
	m *mapped.Region
}

// openInflight opens the table at p, returns the intents a previous mount
// left, and empties it.
func openInflight(p string) (*inflight, []intent, int, error) {
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, nil, 0, err
	}
	var left []intent
	damaged := 0
	buf := make([]byte, slotSize)
	for off := int64(0); ; off += slotSize {
		n, err := f.ReadAt(buf, off)
		if n < 4 {
			if err != nil && !errors.Is(err, io.EOF) {
				f.Close()
				return nil, nil, 0, err
			}
			break
		}
		size := binary.LittleEndian.Uint32(buf)
		if size == 0 {
			continue
		}
		var in intent
		if int(size) > n-4 || json.Unmarshal(buf[4:4+size], &in) != nil || in.Type == "" {
			damaged++
			continue
		}
		left = append(left, in)
	}
	if err := f.Truncate(0); err != nil {
		f.Close()
		return nil, nil, 0, err
	}
	t := &inflight{f: f, held: map[int]bool{}}
	t.m, _ = mapped.Map(f, mappedSlots*slotSize)
	t.mu.Lock()
	t.ensure(slotsGrow - 1) // a full file system: the first begin says so
	t.mu.Unlock()
	return t, left, damaged, nil
}

// ensure allocates the heads of the slots up to slot. t.mu must be held.
func (t *inflight) ensure(slot int) error {
	for !t.noAlloc && t.alloc <= slot {
		err := unix.Fallocate(int(t.f.Fd()), 0, int64(t.alloc)*slotSize, slotHead)
		if errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.ENOSYS) {
			t.noAlloc = true
			return nil
		}
		if err != nil {
			return fmt.Errorf("in-flight table: %w", err)
		}
		t.alloc++
	}
	return nil
}

// begin records in and returns its slot. It fails, having recorded
// nothing, when the table cannot hold the intent (ENOSPC, EIO).
func (t *inflight) begin(in *intent) (int, error) {
	t.mu.Lock()
	slot := t.next
	if n := len(t.free); n > 0 {
		slot, t.free = t.free[n-1], t.free[:n-1]
	} else {
		t.next++
	}
	err := t.ensure(slot + slotsGrow - 1)
	if err != nil && slot >= t.alloc && !t.noAlloc {
		t.free = append(t.free, slot)
		t.mu.Unlock()
		return -1, err
	}
	store := t.mappedHead(slot)
	t.mu.Unlock()
	rec, err := encodeIntent(in)
	if err == nil {
		if store && len(rec) <= slotHead {
			err = t.publish(slot, rec)
		} else {
			err = t.writeRec(slot, rec)
		}
	}
	if err != nil {
		t.end(slot)
		return -1, err
	}
	return slot, nil
}

// mappedHead says whether slot's head is allocated and mapped: stores
// there need no room and fault on nothing. t.mu must be held.
func (t *inflight) mappedHead(slot int) bool {
	return t.m != nil && !t.noAlloc && slot < t.alloc && slot < mappedSlots
}

// publish stores rec (encodeIntent's) into the empty slot through the
// mapping: the intent, then its length, so that the slot holds all of it
// or, to a process reading it after this one died, nothing.
func (t *inflight) publish(slot int, rec []byte) error {
	off := int64(slot) * slotSize
	if err := t.m.Write(off+4, rec[4:]); err != nil {
		return fmt.Errorf("in-flight table: %w", err)
	}
	if err := t.m.StoreUint32(off, binary.LittleEndian.Uint32(rec)); err != nil {
		return fmt.Errorf("in-flight table: %w", err)
	}
	return nil
}

// update rewrites the intent in slot.
func (t *inflight) update(slot int, in *intent) error {
	if t != nil && slot >= 0 {
		return t.write(slot, in)
	}
	return nil
}

// end clears slot: the change is journaled, or did not happen. A held
// slot stays.
func (t *inflight) end(slot int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.held[slot] {
		return
	}
	if !t.mappedHead(slot) || t.m.StoreUint32(int64(slot)*slotSize, 0) != nil {
		t.f.WriteAt(make([]byte, 4), int64(slot)*slotSize)
	}
	t.free = append(t.free, slot)
}

// inUse is how many slots hold an intent: changes under way, write
// handles open, and intents held for a later event.
func (t *inflight) inUse() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.next - len(t.free)
}

// hold keeps slot's intent past end, until release.
func (t *inflight) hold(slot int) {
	t.mu.Lock()
	t.held[slot] = true
	t.mu.Unlock()
}

// release ends a held slot.
func (t *inflight) release(slot int) {
	t.mu.Lock()
	delete(t.held, slot)
	t.mu.Unlock()
	t.end(slot)
}

// write rewrites slot's intent with one pwrite.
func (t *inflight) write(slot int, in *intent) error {
	rec, err := encodeIntent(in)
	if err != nil {
		return err
	}
	return t.writeRec(slot, rec)
}

func (t *inflight) writeRec(slot int, rec []byte) error {
	if _, err := t.f.WriteAt(rec, int64(slot)*slotSize); err != nil {
		return fmt.Errorf("in-flight table: %w", err)
	}
	return nil
}

// encodeIntent is a slot's record of in: its length (4 bytes,
// little-endian), then its JSON.
func encodeIntent(in *intent) ([]byte, error) {
	b, err := json.Marshal(in)
	if err != nil || len(b) > slotSize-4 {
		return nil, fmt.Errorf("in-flight intent of %d bytes: %w", len(b), syscall.ENAMETOOLONG)
	}
	rec := make([]byte, 4+len(b))
	binary.LittleEndian.PutUint32(rec, uint32(len(b)))
	copy(rec[4:], b)
	return rec, nil
}

// sync makes every intent written so far durable: the table is otherwise
// written without fsync (see above), and a handle's fsync needs its
// intent to survive a power loss with the data (Handle.Fsync).
func (t *inflight) sync() error {
	if err := unix.Fdatasync(int(t.f.Fd())); err != nil {
		return fmt.Errorf("in-flight table: %w", err)
	}
	t.syncs.Add(1)
	return nil
}

// close closes the table, fsynced first: what a clean shutdown leaves in
// it (changes kept for a later event) must outlive a power loss, since the
// mount record then says no reconciliation is needed.
func (t *inflight) close() error {
	err := t.f.Sync()
	if t.m != nil {
		if merr := t.m.Close(); err == nil {
			err = merr
		}
	}
	if cerr := t.f.Close(); err == nil {
		err = cerr
	}
	return err
}

// intend admits a change and records it before it is made, and returns
// the function that clears it; call that once the change is journaled or
// known not to have happened. It refuses the change (ENOSPC, wrapped) when
// the journal's reserve is short or the in-flight table cannot hold it:
// nothing has changed yet, and nothing will.
func (c *Core) intend(in *intent) (slot int, done func(), err error) {
	if c.log != nil {
		if err := c.log.Admit(); err != nil {
			return -1, nil, err
		}
	}
	return c.record(in)
}

// record is intend for a change admitted already.
func (c *Core) record(in *intent) (slot int, done func(), err error) {
	if c.inflight == nil {
		return -1, func() {}, nil
	}
	// in keeps After: the caller rewrites the slot from it (intendOrig).
	in.After = c.log.Written()
	if slot, err = c.inflight.begin(in); err != nil {
		return -1, nil, err
	}
	hit(in.Type, stepIntended)
	return slot, func() { c.inflight.end(slot) }, nil
}

// intendOrig adds the original just preserved for the change in slot to
// its intent, before the change goes ahead. On error the caller undoes
// the preservation and refuses the change.
func (c *Core) intendOrig(slot int, in *intent, rel string, p preserved) error {
	o := p.File
	o.Path = rel
	if in.Orig == nil || *in.Orig != o {
		// Not the entry the intent named before (or none was).
		in.Orig = &o
		if err := c.inflight.update(slot, in); err != nil {
			return err
		}
	}
	hit(in.Type, stepPreserved)
	return nil
}

// keep is for a change that took effect, could not be undone, and whose
// event could not be journaled: its intent stays in the in-flight table,
// so the next event this mount journals, or else the next mount's
// recovery, journals it as the tree then shows it (I3, I4).
func (c *Core) keep(slot int, in intent) {
	if c.inflight == nil || slot < 0 {
		return
	}
	c.inflight.hold(slot)
	c.pendMu.Lock()
	c.pending = append(c.pending, kept{slot, in})
	c.pendN.Store(int32(len(c.pending)))
	c.pendMu.Unlock()
}

// kept is a change whose event is still to be journaled.
type kept struct {
	slot int
	in   intent
}

// takePending returns the events of the kept changes, built from the tree
// as it is, and the changes themselves; a change journaled meanwhile, or
// that the tree shows did not happen, is released at once.
func (c *Core) takePending() ([]*journal.Event, []kept) {
	c.pendMu.Lock()
	ks := c.pending
	c.pending = nil
	c.pendN.Store(0)
	c.pendMu.Unlock()
	var events []*journal.Event
	var left []kept
	for _, k := range ks {
		e := c.recovered(k.in)
		if e == nil {
			c.inflight.release(k.slot)
			continue
		}
		journaled, err := c.journaledSince(k.in, e)
		if err != nil {
			left = append(left, k)
			continue
		}
		if journaled {
			c.inflight.release(k.slot)
			continue
		}
		events = append(events, e)
		left = append(left, k)
	}
	return events, left
}

// settle releases kept changes once their events are journaled, or
// puts them back.
func (c *Core) settle(ks []kept, journaled bool) {
	if journaled {
		for _, k := range ks {
			c.inflight.release(k.slot)
		}
		return
	}
	c.pendMu.Lock()
	c.pending = append(ks, c.pending...)
	c.pendN.Store(int32(len(c.pending)))
	c.pendMu.Unlock()
}

// recover journals the changes that intents left by a dead mount describe
// and that took effect without their event. It runs before the mount
// serves anything. Every event it writes describes the tree as it is; it
// returns them.
func (c *Core) recover(ctx context.Context, left []intent) ([]*journal.Event, error) {
	var events []*journal.Event
	// pending is the content of each path the events so far give it, so
	// that two intents for one path journal it once.
	pending := map[string]journal.File{}
	for _, in := range left {
		e := c.recovered(in)
		if e == nil {
			continue
		}
		if f, ok := contentOf(e, in.Path); ok {
			if p, seen := pending[in.Path]; seen && p.Size == f.Size && p.XXH64 == f.XXH64 {
				continue
			}
		}
		if journaled, err := c.journaledSince(in, e); err != nil {
			return nil, err
		} else if journaled {
			continue
		}
		if f, ok := contentOf(e, in.Path); ok {
			pending[in.Path] = f
		}
		events = append(events, e)
	}
	if err := c.emit(ctx, events...); err != nil {
		return nil, err
	}
	return events, nil
}

// contentOf returns the new content e gives rel (the first file of that
// path: events list the new content before preserved originals).
func contentOf(e *journal.Event, rel string) (journal.File, bool) {
	for _, f := range e.Files {
		if f.Path == rel && f.CM == "" {
			return f, true
		}
	}
	return journal.File{}, false
}

// journaledSince says whether the journal already holds e, the event the
// tree shows for in's change, after in.After. For content changes it asks
// whether the latest event naming the path gives it the content the tree
// holds: a later event for another change of the path (another handle's
// close) does not stand in for this one unless the content agrees.
func (c *Core) journaledSince(in intent, e *journal.Event) (bool, error) {
	want, content := contentOf(e, in.Path)
	content = content && (in.Type == journal.Write || in.Type == journal.Truncate)
	found, latest, named := false, journal.File{}, false
	err := c.log.Range(in.After+1, 0, func(got *journal.Event) error {
		if content {
			if f, ok := contentOf(got, in.Path); ok {
				latest, named = f, true
			} else if got.Path == in.Path || got.NewPath == in.Path {
				named = false // deleted or renamed away since
			}
			return nil
		}
		if got.Path == in.Path && (in.NewPath == "" || got.NewPath == in.NewPath) && sameKind(got.Type, in.Type) {
			found = true
		}
		return nil
	})
	if content {
		return named && latest.Size == want.Size && latest.XXH64 == want.XXH64, err
	}
	return found, err
}

// sameKind says whether an event of type got records a change of type want
// (an intent records the generic type; the event may carry the warehouse one).
func sameKind(got, want journal.Type) bool { return generic(got) == want }

// genericTypes maps each warehouse event type to the generic type of the
// change it records.
var genericTypes = map[journal.Type]journal.Type{
	journal.Insert:          journal.Write,
	journal.Restore:         journal.Write,
	journal.CreateDatabase:  journal.Mkdir,
	journal.CreateTable:     journal.Mkdir,
	journal.AddPartition:    journal.Mkdir,
	journal.DropDatabase:    journal.Rmdir,
	journal.DropTable:       journal.Rmdir,
	journal.DropPartition:   journal.Rmdir,
	journal.RenameDatabase:  journal.Rename,
	journal.RenameTable:     journal.Rename,
	journal.RenamePartition: journal.Rename,
}

// generic returns the generic type of a change an event of type t records.
func generic(t journal.Type) journal.Type {
	if k, ok := genericTypes[t]; ok {
		return k
	}
	return t
}

// recovered returns the event of in's change if the tree shows it took
// effect, built from the tree as it is now; nil if it did not.
func (c *Core) recovered(in intent) *journal.Event {
	var st syscall.Stat_t
	exists := func(rel string) bool { return c.fs.Lstat(rel, &st) == nil }
	content := func(rel string) (journal.File, bool) {
		if !exists(rel) || !isReg(&st) {
			return journal.File{}, false
		}
		sum, cur, err := c.sumPath(rel)
		if err != nil {
			return journal.File{}, false
		}
		return journal.File{Path: rel, Size: cur.Size, XXH64: sum}, true
	}
	orig := func() []journal.File {
		if in.Orig == nil || in.Orig.CM == "" {
			return nil
		}
		if _, err := c.cm.Lookup(in.Orig.CM); err != nil {
			return nil // never preserved: the change cannot have happened past it
		}
		return []journal.File{*in.Orig}
	}
	switch in.Type {
	case journal.Mkdir:
		if exists(in.Path) && st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
			return dirEvent(true, in.Path)
		}
	case journal.Rmdir:
		if !exists(in.Path) {
			return dirEvent(false, in.Path)
		}
	case journal.Symlink:
		if exists(in.Path) && st.Mode&syscall.S_IFMT == syscall.S_IFLNK {
			e := fileEvent(journal.Symlink, in.Path)
			e.Target = in.Target
			return e
		}
	case journal.Link:
		if f, ok := content(in.NewPath); ok {
			e := fileEvent(journal.Link, in.Path, f)
			e.NewPath = in.NewPath
			return e
		}
	case journal.Delete:
		if !exists(in.Path) {
			return fileEvent(journal.Delete, in.Path, orig()...)
		}
	case journal.Rename:
		if !exists(in.Path) && exists(in.NewPath) {
			e := renameEvent(in.Path, in.NewPath, &st)
			if f, ok := content(in.NewPath); ok {
				e.Files = append(e.Files, f)
			}
			e.Files = append(e.Files, orig()...)
			return e
		}
	case journal.Truncate, journal.Write:
		f, ok := content(in.Path)
		changed := ok && (in.Orig == nil || f.XXH64 != in.Orig.XXH64 || f.Size != in.Orig.Size)
		if in.Type == journal.Write {
			changed = ok && (in.Base == "" || f.XXH64 != in.Base)
		}
		if changed {
			return fileEvent(in.Type, in.Path, append([]journal.File{f}, orig()...)...)
		}
	}
	return nil
}
