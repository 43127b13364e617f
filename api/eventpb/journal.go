package eventpb

import (
	"time"

	"github.com/cmfs-project/cmfs/journal"
)

// FromJournal returns e as it travels.
func FromJournal(e *journal.Event) *Event {
	p := &Event{
		Id:        e.ID,
		Type:      string(e.Type),
		Path:      e.Path,
		NewPath:   e.NewPath,
		Db:        e.DB,
		Table:     e.Table,
		Partition: e.Partition,
		Target:    e.Target,
		Files:     make([]*File, len(e.Files)),
	}
	if !e.Time.IsZero() {
		p.TimeUnixNano = e.Time.UnixNano()
	}
	for i, f := range e.Files {
		p.Files[i] = &File{Path: f.Path, Size: f.Size, Xxh64: f.XXH64, Cm: f.CM}
	}
	return p
}

// Journal returns the journal event p carries. An event without files has
// nil Files, as the journal keeps it ("files":null in its JSON).
func (p *Event) Journal() *journal.Event {
	e := &journal.Event{
		ID:        p.Id,
		Type:      journal.Type(p.Type),
		Path:      p.Path,
		NewPath:   p.NewPath,
		DB:        p.Db,
		Table:     p.Table,
		Partition: p.Partition,
		Target:    p.Target,
	}
	if p.TimeUnixNano != 0 {
		e.Time = time.Unix(0, p.TimeUnixNano).UTC()
	}
	if len(p.Files) > 0 {
		e.Files = make([]journal.File, len(p.Files))
	}
	for i, f := range p.Files {
		e.Files[i] = journal.File{Path: f.Path, Size: f.Size, XXH64: f.Xxh64, CM: f.Cm}
	}
	return e
}
