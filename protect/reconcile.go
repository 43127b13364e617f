package protect

import (
	"context"
	"io/fs"
	"slices"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/cmfs-project/cmfs/cmroot"
	"github.com/cmfs-project/cmfs/journal"
)

// Reconciliation after a power loss. The in-flight table is written
// without fsync: it covers a process that dies, whose writes the kernel
// keeps, not a machine that loses power. After an unclean shutdown and a
// reboot a change to the tree can be durable with neither its event (in
// --sync=always an operation in flight; in interval mode the rest of the
// interval) nor its intent, and the journal's last word on its path no
// longer describes the tree (I3). Open then walks the backing tree — the
// state directory, cmroot and scratch space left out, as the link index
// walks — against journal.Replay of the whole journal, and journals,
// through the normal emit path (what each event names flushed first),
// events that make the journal describe the tree again:
//
//   - a file whose content is not its last word: WRITE (INSERT in a
//     table) of the content it holds, naming the last word's content as
//     the original when cmroot holds it;
//   - a file or symlink no event names: WRITE/INSERT or SYMLINK;
//   - a path whose last word is a file or symlink the tree lacks (or holds
//     as something else): DELETE, naming the cmroot entry of the last
//     word's content when cmroot holds it, checked by size and xxh64. A
//     file whose content is neither in cmroot nor anywhere in the tree is
//     counted as content lost (Recovery.Lost);
//   - a symlink with another target, or a file that became a symlink or
//     the other way round: DELETE, then what is there now.
//
// A change whose event a power loss took back was made after the newest
// event that survived, and after the lost mount started: the file it
// changed has a ctime no older than that. To stay fast on big trees only
// files whose size differs from their last word, or whose ctime is not
// older than that time less a margin (ReconcileMargin, 10 s by default:
// for clocks read on different cores and a write whose event was
// assigned its time a little later), are hashed; the rest are stat'ed and
// taken to hold their last word. A file no event names whose ctime is
// older than that is content that predates the journal (the backing
// directory's files before its first mount, or put there behind the
// mount's back) and is left alone, as a mount leaves it.
//
// Names that are not valid UTF-8, which no event can carry and the mount
// refuses, were made behind its back and are left out, as are special
// files (journal.Replay tracks files and symlinks).
//
// Known limits: a write handle left idle for longer than the margin before
// its close, whose event was lost, leaving the file at its old size, goes
// unseen; directories are not reconciled (journal.Replay does not track
// them, and a replica makes the directories a file needs), so a directory
// made or removed without its event stays unjournaled.

// DefaultReconcileMargin is how far before the newest surviving event a
// changed file's ctime may lie and still be hashed.
const DefaultReconcileMargin = 10 * time.Second

// reconcileBatch bounds the events of one commit of the reconciliation.
const reconcileBatch = 256

// reconciled is what a reconciliation found and journaled.
type reconciled struct {
	walked, hashed                int
	changed, added, removed, lost int
}

// reconcile makes the journal describe the tree; recovered are the
// events this Open journaled for the in-flight table, newest is the time
// of the newest event that survived the power loss, since when the mount
// that lost it started (zero: unknown).
func (c *Core) reconcile(ctx context.Context, recovered []*journal.Event, newest, since time.Time, margin time.Duration) (reconciled, error) {
	var r reconciled
	rp := journal.NewReplayer()
	var seenID uint64
	err := c.log.Range(1, 0, func(e *journal.Event) error {
		rp.Apply(e)
		seenID = e.ID
		return nil
	})
	if err != nil {
		return r, err
	}
	// Under --sync=interval Range shows flushed events only: the ones
	// recovery just wrote may not be yet.
	for _, e := range recovered {
		if e.ID > seenID {
			rp.Apply(e)
		}
	}
	words := rp.Words()
	if margin <= 0 {
		margin = DefaultReconcileMargin
	}
	after := newest
	if since.After(after) {
		after = since
	}
	after = after.Add(-margin)

	// replaced are the paths whose last word the tree holds as something
	// else (another kind, another target), removed before what is there
	// now is journaled; unheld are the last words of changed files that
	// cmroot does not hold.
	var replaced []string
	var unheld []journal.LastWord
	var changes []*journal.Event
	seen := map[string]bool{}
	// present is the content the tree holds, as reconciled: a last word
	// missing at its path but found here was moved, not lost.
	present := map[journal.LastWord]bool{}
	err = c.fs.WalkDir("", func(rel string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // raced with a removal, or unreadable: skip it
		}
		if rel == "" {
			return nil
		}
		if c.isHidden(rel) || c.excluded(rel) {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if !utf8.ValidString(rel) {
			// No event can carry the name, and the mount refuses it: it
			// was made behind the mount's back.
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		typ := d.Type()
		if !typ.IsRegular() && typ&fs.ModeSymlink == 0 {
			return nil
		}
		var st syscall.Stat_t
		if c.fs.Lstat(rel, &st) != nil {
			return nil
		}
		r.walked++
		w, named := words[rel]
		recent := !time.Unix(st.Ctim.Sec, st.Ctim.Nsec).Before(after)
		if typ&fs.ModeSymlink != 0 {
			target, err := c.fs.Readlink(rel)
			if err != nil || !utf8.ValidString(target) {
				return nil
			}
			seen[rel] = true
			switch {
			case named && w.Symlink && w.Target == target:
				return nil
			case named:
				replaced = append(replaced, rel)
				r.changed++
			case !recent:
				return nil // predates the journal
			default:
				r.added++
			}
			e := fileEvent(journal.Symlink, rel)
			e.Target = target
			changes = append(changes, e)
			return nil
		}
		if named && !w.Symlink && st.Size == w.Size && !recent {
			seen[rel] = true
			present[w] = true
			return nil // stat'ed: taken to hold its last word
		}
		if !named && !recent {
			return nil // predates the journal
		}
		sum, cur, err := c.sumPath(rel)
		if err != nil {
			return nil // gone or unreadable since the walk: left as it is
		}
		r.hashed++
		seen[rel] = true
		now := journal.LastWord{Size: cur.Size, XXH64: sum}
		present[now] = true
		files := []journal.File{{Path: rel, Size: cur.Size, XXH64: sum}}
		switch {
		case named && w == now:
			return nil
		case named && w.Symlink:
			replaced = append(replaced, rel)
			r.changed++
		case named:
			if orig, ok := c.held(rel, w); ok {
				files = append(files, orig)
			} else {
				unheld = append(unheld, w)
			}
			r.changed++
		default:
			r.added++
		}
		changes = append(changes, fileEvent(journal.Write, rel, files...))
		return nil
	})
	if err != nil {
		return r, err
	}
	for _, w := range unheld {
		if w.Size > 0 && !present[w] {
			r.lost++
		}
	}
	var missing []string
	for rel := range words {
		if !seen[rel] && !c.isHidden(rel) && !c.excluded(rel) {
			missing = append(missing, rel)
		}
	}
	r.removed = len(missing)
	gone := append(replaced, missing...)
	slices.Sort(gone)
	var events []*journal.Event
	for _, rel := range gone {
		events = append(events, c.gone(rel, words[rel], present, &r))
	}
	events = append(events, changes...)
	for len(events) > 0 {
		n := min(len(events), reconcileBatch)
		if err := c.emit(ctx, events[:n]...); err != nil {
			return r, err
		}
		events = events[n:]
	}
	return r, nil
}

// gone returns the DELETE of rel, whose last word w the tree no longer
// holds there, naming w's content in cmroot when the store holds it; a
// file whose content is neither there nor elsewhere in the tree (present)
// is counted lost.
func (c *Core) gone(rel string, w journal.LastWord, present map[journal.LastWord]bool, r *reconciled) *journal.Event {
	if w.Symlink {
		return fileEvent(journal.Delete, rel)
	}
	if orig, ok := c.held(rel, w); ok {
		return fileEvent(journal.Delete, rel, orig)
	}
	if w.Size > 0 && !present[w] {
		r.lost++
	}
	return fileEvent(journal.Delete, rel)
}

// held returns the cmroot entry holding the content w, as an original of
// rel, if the store has it with that size and xxh64.
func (c *Core) held(rel string, w journal.LastWord) (journal.File, bool) {
	f := journal.File{Path: rel, Size: w.Size, XXH64: w.XXH64, CM: cmroot.Name(w.XXH64, w.Size)}
	if _, err := c.cm.Lookup(f.CM); err != nil {
		return journal.File{}, false
	}
	if checkEntry(c.cm.Dir(), f) != "" {
		return journal.File{}, false
	}
	return f, true
}
