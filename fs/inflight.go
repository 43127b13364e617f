package fs

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/cmfs-project/cmfs/cmroot"
	"github.com/cmfs-project/cmfs/journal"
)

// The in-flight table closes the window between a change taking effect and
// its event being journaled. Before a change, its intent is written into a
// slot of a file in the state directory; after the event is durable, the
// slot is cleared. If the mount process dies in between, the next mount
// finds the intent, looks at the tree, and journals the event of a change
// that did take effect. The table is written without fsync: it guards
// against the process dying, whose writes the kernel keeps; against power
// loss the journal's own fsync is the guarantee (an acknowledged change has
// its event).

// InflightFile is the in-flight table's name in the state directory.
const InflightFile = "inflight"

const slotSize = 16 << 10 // two paths of PATH_MAX and the rest, as JSON

// intent is a change under way: what to journal if it took effect.
type intent struct {
	// After is the journal's last id when the change began (or when a
	// write handle last journaled): an event for it can only come later.
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

// inflight is the table.
type inflight struct {
	f    *os.File
	mu   sync.Mutex
	free []int
	next int // slots in use or freed so far
}

// openInflight opens the table at p, returns the intents a previous mount
// left, and empties it.
func openInflight(p string) (*inflight, []intent, error) {
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, nil, err
	}
	var left []intent
	buf := make([]byte, slotSize)
	for off := int64(0); ; off += slotSize {
		n, err := f.ReadAt(buf, off)
		if n < 4 {
			if err != nil && !errors.Is(err, io.EOF) {
				f.Close()
				return nil, nil, err
			}
			break
		}
		size := binary.LittleEndian.Uint32(buf)
		if size == 0 || int(size) > n-4 {
			continue
		}
		var in intent
		if json.Unmarshal(buf[4:4+size], &in) == nil {
			left = append(left, in)
		}
	}
	if err := f.Truncate(0); err != nil {
		f.Close()
		return nil, nil, err
	}
	return &inflight{f: f}, left, nil
}

// begin records in and returns its slot.
func (t *inflight) begin(in *intent) int {
	t.mu.Lock()
	slot := t.next
	if n := len(t.free); n > 0 {
		slot, t.free = t.free[n-1], t.free[:n-1]
	} else {
		t.next++
	}
	t.mu.Unlock()
	t.write(slot, in)
	return slot
}

// update rewrites the intent in slot.
func (t *inflight) update(slot int, in *intent) {
	if t != nil && slot >= 0 {
		t.write(slot, in)
	}
}

// end clears slot: the change is journaled, or did not happen.
func (t *inflight) end(slot int) {
	t.f.WriteAt(make([]byte, 4), int64(slot)*slotSize)
	t.mu.Lock()
	t.free = append(t.free, slot)
	t.mu.Unlock()
}

func (t *inflight) write(slot int, in *intent) {
	b, err := json.Marshal(in)
	if err != nil || len(b) > slotSize-4 {
		return // cannot happen for names the kernel passes: PATH_MAX each
	}
	rec := make([]byte, 4+len(b))
	binary.LittleEndian.PutUint32(rec, uint32(len(b)))
	copy(rec[4:], b)
	t.f.WriteAt(rec, int64(slot)*slotSize)
}

func (t *inflight) close() error { return t.f.Close() }

// intend records a change about to be made and returns the function that
// clears it; call that once the change is journaled or known not to have
// happened.
func (r *root) intend(in *intent) (slot int, done func()) {
	if r.inflight == nil {
		return -1, func() {}
	}
	// in keeps After: the caller rewrites the slot from it (intendOrig).
	in.After = r.log.Last()
	slot = r.inflight.begin(in)
	return slot, func() { r.inflight.end(slot) }
}

// intendOrig adds the original just preserved for the change in slot to
// its intent, before the change goes ahead.
func (r *root) intendOrig(slot int, in *intent, rel string, p preserved) {
	o := p.File
	o.Path = rel
	in.Orig = &o
	r.inflight.update(slot, in)
}

// recover journals the changes that intents left by a dead mount describe
// and that took effect without their event. It runs before the mount
// serves anything. Every event it writes describes the tree as it is.
func (r *root) recover(ctx context.Context, left []intent) (int, error) {
	var events []*journal.Event
	// pending is the content of each path the events so far give it, so
	// that two intents for one path journal it once.
	pending := map[string]journal.File{}
	for _, in := range left {
		e := r.recovered(in)
		if e == nil {
			continue
		}
		if f, ok := contentOf(e, in.Path); ok {
			if p, seen := pending[in.Path]; seen && p.Size == f.Size && p.XXH64 == f.XXH64 {
				continue
			}
		}
		if journaled, err := r.journaledSince(in, e); err != nil {
			return 0, err
		} else if journaled {
			continue
		}
		if f, ok := contentOf(e, in.Path); ok {
			pending[in.Path] = f
		}
		events = append(events, e)
	}
	return len(events), r.emit(ctx, events...)
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
func (r *root) journaledSince(in intent, e *journal.Event) (bool, error) {
	want, content := contentOf(e, in.Path)
	content = content && (in.Type == journal.Write || in.Type == journal.Truncate)
	found, latest, named := false, journal.File{}, false
	err := r.log.Range(in.After+1, 0, func(got *journal.Event) error {
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
func sameKind(got, want journal.Type) bool {
	kinds := map[journal.Type]journal.Type{
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
	if k, ok := kinds[got]; ok {
		got = k
	}
	return got == want
}

// recovered returns the event of in's change if the tree shows it took
// effect, built from the tree as it is now; nil if it did not.
func (r *root) recovered(in intent) *journal.Event {
	var st syscall.Stat_t
	exists := func(rel string) bool { return syscall.Lstat(r.abs(rel), &st) == nil }
	content := func(rel string) (journal.File, bool) {
		if !exists(rel) || !isReg(&st) {
			return journal.File{}, false
		}
		sum, cur, err := r.sumPath(r.abs(rel))
		if err != nil {
			return journal.File{}, false
		}
		return journal.File{Path: rel, Size: cur.Size, XXH64: sum}, true
	}
	orig := func() []journal.File {
		if in.Orig == nil || in.Orig.CM == "" {
			return nil
		}
		if _, err := r.cm.Lookup(in.Orig.CM); err != nil {
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

// Recover brings the journal up to date with changes a mount that died
// left without their events, for a state directory nothing has mounted:
// `cmfs fsck` runs it. It returns how many events it journaled.
func Recover(ctx context.Context, cfg Config, j *journal.Log, store *cmroot.Store) (int, error) {
	t, left, err := openInflight(filepath.Join(cfg.State, InflightFile))
	if err != nil {
		return 0, fmt.Errorf("in-flight table: %w", err)
	}
	defer t.close()
	r := &root{backing: cfg.Backing, cm: store, log: j, exclude: cfg.Exclude}
	return r.recover(ctx, left)
}
