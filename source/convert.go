package source

import (
	"time"

	"github.com/cmfs-project/cmfs/api/replpb"
	"github.com/cmfs-project/cmfs/journal"
)

func eventToProto(e *journal.Event) *replpb.Event {
	p := &replpb.Event{
		Id:        e.ID,
		Type:      string(e.Type),
		Path:      e.Path,
		NewPath:   e.NewPath,
		Db:        e.DB,
		Table:     e.Table,
		Partition: e.Partition,
		Target:    e.Target,
		Files:     make([]*replpb.File, len(e.Files)),
	}
	if !e.Time.IsZero() {
		p.TimeUnixNano = e.Time.UnixNano()
	}
	for i, f := range e.Files {
		p.Files[i] = &replpb.File{Path: f.Path, Size: f.Size, Xxh64: f.XXH64, Cm: f.CM}
	}
	return p
}

func eventFromProto(p *replpb.Event) *journal.Event {
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
	// The journal keeps an event without files as nil ("files":null in
	// its JSON); so does the relay.
	if len(p.Files) > 0 {
		e.Files = make([]journal.File, len(p.Files))
	}
	if p.TimeUnixNano != 0 {
		e.Time = time.Unix(0, p.TimeUnixNano).UTC()
	}
	for i, f := range p.Files {
		e.Files[i] = journal.File{Path: f.Path, Size: f.Size, XXH64: f.Xxh64, CM: f.Cm}
	}
	return e
}
