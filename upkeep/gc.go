package upkeep

import (
	"context"
	"fmt"
	"time"

	"github.com/cmfs-project/cmfs/cmroot"
	"github.com/cmfs-project/cmfs/journal"
	"github.com/cmfs-project/cmfs/slot"
)

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
