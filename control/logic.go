package control

import (
	"context"
	"fmt"
	"time"

	"github.com/cmfs-project/cmfs/cmroot"
	"github.com/cmfs-project/cmfs/journal"
	"github.com/cmfs-project/cmfs/slot"
)

// walkBatch bounds how many events one read transaction collects: events
// are delivered outside the transaction, so a slow reader never holds the
// journal's database open against its writer.
const walkBatch = 512

// Walk calls fn for every event with from <= id <= to in id order (from 0
// means 1; to 0 means the newest). With follow it then waits for new
// events and delivers them too, until to is reached, fn fails or ctx ends
// (returning ctx.Err()).
func Walk(ctx context.Context, j *journal.Log, from, to uint64, follow bool, fn func(*journal.Event) error) error {
	if from == 0 {
		from = 1
	}
	if to != 0 && to < from {
		return fmt.Errorf("%w: range from %d to %d is empty", ErrInvalid, from, to)
	}
	next := from
	for {
		last := j.Last()
		if to != 0 && last > to {
			last = to
		}
		for next <= last {
			end := min(next+walkBatch-1, last)
			batch := make([]*journal.Event, 0, end-next+1)
			if err := j.Range(next, end, func(e *journal.Event) error {
				batch = append(batch, e)
				return nil
			}); err != nil {
				return err
			}
			for _, e := range batch {
				if err := ctx.Err(); err != nil {
					return err
				}
				if err := fn(e); err != nil {
					return err
				}
			}
			next = end + 1
		}
		if !follow || (to != 0 && next > to) {
			return nil
		}
		if _, err := j.Wait(ctx, next-1); err != nil {
			return err
		}
	}
}

// Report is the outcome of Fsck.
type Report struct {
	// Entries is the number of entries in cmroot.
	Entries int `json:"entries"`
	// Referenced is the number of distinct cmroot names the journal's
	// events reference.
	Referenced int `json:"referenced"`
	// Orphans are entries no event references.
	Orphans []string `json:"orphans"`
	// Missing are names events reference that cmroot lacks, although an
	// event younger than the retention references them: lost originals.
	Missing []string `json:"missing"`
	// Expired are names cmroot lacks that only events older than the
	// retention reference: gc may remove those, so they are no failure.
	Expired []string `json:"expired"`
	// Corrupt are entries whose content does not match their name.
	Corrupt []string `json:"corrupt"`
	// IndexFixed counts index records a repair rewrote.
	IndexFixed int `json:"index_fixed"`
	// Repaired says a repair ran; Remaining then lists the missing or
	// corrupt entries still there after it.
	Repaired  bool     `json:"repaired"`
	Remaining []string `json:"remaining"`
}

// OK says whether every referenced original is present and sound (after
// the repair, when one ran). Orphans are not a failure: they are kept
// until gc removes them.
func (r Report) OK() bool {
	if r.Repaired {
		return len(r.Remaining) == 0
	}
	return len(r.Missing) == 0 && len(r.Corrupt) == 0
}

// Clean says whether fsck found nothing at all worth reporting.
func (r Report) Clean() bool {
	return len(r.Orphans) == 0 && len(r.Missing) == 0 && len(r.Corrupt) == 0 && r.IndexFixed == 0
}

// Referenced returns every cmroot name the journal's events reference,
// with the time of the newest event that references it.
func Referenced(j *journal.Log) (map[string]time.Time, error) {
	refs := make(map[string]time.Time)
	err := j.Range(1, 0, func(e *journal.Event) error {
		for _, f := range e.Files {
			if f.CM == "" {
				continue
			}
			if t, ok := refs[f.CM]; !ok || e.Time.After(t) {
				refs[f.CM] = e.Time
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read journal: %w", err)
	}
	return refs, nil
}

// Fsck is FsckRetain with the default retention.
func Fsck(j *journal.Log, store *cmroot.Store, repair bool) (Report, error) {
	return FsckRetain(j, store, repair, cmroot.DefaultRetain, time.Now())
}

// FsckRetain checks the store against every name the journal references.
// A missing entry that only events older than retain reference is
// reported as expired (gc's doing), not missing. With repair it lets the
// store fix what it can, then checks again so the report says what is
// still wrong.
func FsckRetain(j *journal.Log, store *cmroot.Store, repair bool, retain time.Duration, now time.Time) (Report, error) {
	refTimes, err := Referenced(j)
	if err != nil {
		return Report{}, err
	}
	refs := make(map[string]bool, len(refTimes))
	for name := range refTimes {
		refs[name] = true
	}
	// lost splits missing names into lost ones and expired ones.
	lost := func(missing []string) (lost, expired []string) {
		for _, name := range missing {
			if now.Sub(refTimes[name]) > retain {
				expired = append(expired, name)
			} else {
				lost = append(lost, name)
			}
		}
		return lost, expired
	}
	r, err := store.Fsck(refs, repair)
	if err != nil {
		return Report{}, fmt.Errorf("fsck cmroot: %w", err)
	}
	rep := Report{
		Entries:    r.Entries,
		Referenced: len(refs),
		Orphans:    r.Orphans,
		Corrupt:    r.Corrupt,
		IndexFixed: r.IndexFixed,
	}
	rep.Missing, rep.Expired = lost(r.Missing)
	if repair {
		after, err := store.Fsck(refs, false)
		if err != nil {
			return Report{}, fmt.Errorf("fsck cmroot after repair: %w", err)
		}
		rep.Repaired = true
		remaining, _ := lost(after.Missing)
		rep.Remaining = append(remaining, after.Corrupt...)
	}
	return rep, nil
}

// DefaultRetainMax bounds how long gc keeps an entry for a replication
// slot past the retention: a destination that has been away longer must
// be bootstrapped again.
const DefaultRetainMax = 7 * 24 * time.Hour

// GCOptions says what GC keeps.
type GCOptions struct {
	// Retain is the retention: younger entries are always kept.
	Retain time.Duration
	// RetainMax bounds what slots pin: an entry older than it is removed
	// even if a slot still needs it (0: DefaultRetainMax).
	RetainMax time.Duration
	// Slots are the replication slots (nil: none, gc by age alone).
	Slots *slot.Store
}

// GCResult is the outcome of GC.
type GCResult struct {
	Removed int   `json:"removed"`
	Bytes   int64 `json:"bytes"`
	// Pinned and PinnedBytes count the entries past the retention that
	// were kept because a slot's destination still needs them.
	Pinned      int   `json:"pinned"`
	PinnedBytes int64 `json:"pinned_bytes"`
	// Horizon is the slots' horizon after the run (slot.State.Horizon).
	Horizon uint64 `json:"horizon"`
}

// GC removes the store's entries older than the retention (measured from
// their latest preservation), except those a replication slot pins: every
// entry an event after the oldest slot's position names, unless it is
// older than the retain-max too. Before it removes anything it raises the
// slots' horizon past every event that names what it will remove, so that
// a destination behind it is told, even after a crash in the middle.
//
// With slots, GC reads the events after the oldest slot's position once.
func GC(ctx context.Context, j *journal.Log, store *cmroot.Store, opts GCOptions, now time.Time) (GCResult, error) {
	if opts.Retain < 0 || opts.RetainMax < 0 {
		return GCResult{}, fmt.Errorf("%w: negative retention %s or retain-max %s", ErrInvalid, opts.Retain, opts.RetainMax)
	}
	if opts.Retain == 0 {
		opts.Retain = store.Retain()
	}
	if opts.RetainMax == 0 {
		opts.RetainMax = DefaultRetainMax
	}
	last := j.Last()
	var st slot.State
	if opts.Slots != nil {
		var err error
		if st, err = opts.Slots.Load(); err != nil {
			return GCResult{}, err
		}
	}
	// newest[name]: the newest event after the oldest slot naming it.
	newest := map[string]uint64{}
	oldest, slots := st.Oldest()
	if slots && oldest < last {
		err := j.Range(oldest+1, last, func(e *journal.Event) error {
			for _, f := range e.Files {
				if f.CM != "" {
					newest[f.CM] = e.ID
				}
			}
			return ctx.Err()
		})
		if err != nil {
			return GCResult{}, fmt.Errorf("gc: read the events slots need: %w", err)
		}
	}
	// The first pass decides; the second removes only what it decided.
	var res GCResult
	var horizon uint64
	remove := map[string]bool{}
	err := store.List(func(e cmroot.Entry) error {
		age := now.Sub(e.Refreshed)
		if age < opts.Retain {
			return nil
		}
		id, pinned := newest[e.Name]
		switch {
		case pinned && age < opts.RetainMax:
			res.Pinned++
			res.PinnedBytes += e.Size
			return nil
		case pinned:
			horizon = max(horizon, id)
		case slots:
			horizon = max(horizon, oldest) // no event after it names e
		default:
			horizon = max(horizon, last)
		}
		remove[e.Name] = true
		return nil
	})
	if err != nil {
		return GCResult{}, fmt.Errorf("gc cmroot: %w", err)
	}
	res.Horizon = st.Horizon
	if len(remove) == 0 {
		return res, nil
	}
	if opts.Slots != nil && horizon > st.Horizon {
		if err := opts.Slots.RaiseHorizon(horizon); err != nil {
			return GCResult{}, fmt.Errorf("gc: %w", err)
		}
		res.Horizon = horizon
	}
	removed, err := store.GC(opts.Retain, now, func(e cmroot.Entry) bool { return !remove[e.Name] })
	for _, e := range removed {
		res.Removed++
		res.Bytes += e.Size
	}
	if err != nil {
		return res, fmt.Errorf("gc cmroot: %w", err)
	}
	return res, nil
}
