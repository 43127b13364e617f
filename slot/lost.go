package slot

import (
	"context"
	"fmt"

	"github.com/cmfs-project/cmfs/cmroot"
	"github.com/cmfs-project/cmfs/journal"
)

// RangeFunc calls fn for every event with from <= id <= to in id order
// (to 0: up to the newest), as journal.Log.Range and the source's and
// control socket's clients do.
type RangeFunc func(ctx context.Context, from, to uint64, fn func(*journal.Event) error) error

// Lost describes the first event a destination can no longer reproduce.
type Lost struct {
	// Event is the event's id, Type its type.
	Event uint64
	Type  journal.Type
	// Path is the file of the event whose content is gone, and CM the
	// cmroot entry gc removed that held it.
	Path string
	CM   string
	// RemovedBy is the later event that preserved that content (the one
	// naming CM).
	RemovedBy uint64
}

// FirstLost returns the first event after pos, up to horizon, that needs
// content gc removed from cmroot (present says whether an entry is still
// there), or nil when every one can be reproduced. Content an event adds
// is needed from cmroot when a later event preserved it (and names it); it
// is lost when that entry is gone. Events after the horizon never need a
// removed entry: the scan ends there.
func FirstLost(ctx context.Context, events RangeFunc, pos, horizon uint64, present func(cm string) bool) (*Lost, error) {
	if pos >= horizon {
		return nil, nil
	}
	type added struct {
		event uint64
		typ   journal.Type
		path  string
	}
	// first[name]: the first event after pos that added that content.
	first := map[string]added{}
	var lost *Lost
	gone := map[string]bool{}
	err := events(ctx, pos+1, horizon, func(e *journal.Event) error {
		for _, f := range e.Files {
			if f.CM == "" {
				name := cmroot.Name(f.XXH64, f.Size)
				if _, ok := first[name]; !ok {
					first[name] = added{e.ID, e.Type, f.Path}
				}
				continue
			}
			a, ok := first[f.CM]
			if !ok || (lost != nil && a.event >= lost.Event) {
				continue // added at or before pos: the destination has it
			}
			missing, seen := gone[f.CM]
			if !seen {
				missing = !present(f.CM)
				gone[f.CM] = missing
			}
			if missing {
				lost = &Lost{Event: a.event, Type: a.typ, Path: a.path, CM: f.CM, RemovedBy: e.ID}
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("look for lost events after %d: %w", pos, err)
	}
	return lost, nil
}

// Pin is what one slot holds back from gc.
type Pin struct {
	Slot
	// Lag is how many events the source has past the slot's position.
	Lag uint64
	// Lost says the slot is behind the horizon (it pins nothing).
	Lost bool
	// Entries and Bytes count the cmroot entries (present ones, counted
	// once each) that events after the slot's position name.
	Entries int
	Bytes   int64
}

// Pins returns, for every slot of st, its lag behind last and what it
// pins: one scan of the events after the oldest slot's position.
func Pins(ctx context.Context, st State, last uint64, events RangeFunc, present func(cm string) bool) ([]Pin, error) {
	pins := make([]Pin, len(st.Slots))
	for i, s := range st.Slots {
		pins[i] = Pin{Slot: s, Lost: st.Lost(s)}
		if last > s.Position {
			pins[i].Lag = last - s.Position
		}
	}
	oldest, ok := st.Oldest()
	if !ok || oldest >= last {
		return pins, nil
	}
	// newest[name] is the newest event naming the entry: a slot pins it
	// when that event comes after its position.
	newest := map[string]uint64{}
	sizes := map[string]int64{}
	err := events(ctx, oldest+1, last, func(e *journal.Event) error {
		for _, f := range e.Files {
			if f.CM != "" {
				newest[f.CM] = e.ID
				sizes[f.CM] = f.Size
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the events after %d: %w", oldest, err)
	}
	for name, id := range newest {
		if !present(name) {
			continue
		}
		for i := range pins {
			if !pins[i].Lost && id > pins[i].Position {
				pins[i].Entries++
				pins[i].Bytes += sizes[name]
			}
		}
	}
	return pins, nil
}
