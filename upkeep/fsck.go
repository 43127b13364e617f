package upkeep

import (
	"fmt"
	"time"

	"github.com/cmfs-project/cmfs/cmroot"
	"github.com/cmfs-project/cmfs/journal"
)

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
