package control

import (
	"time"

	"github.com/cmfs-project/cmfs/api/controlpb"
	"github.com/cmfs-project/cmfs/api/eventpb"
	"github.com/cmfs-project/cmfs/journal"
	"github.com/cmfs-project/cmfs/upkeep"
)

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromUnixNano(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns).UTC()
}

func reportToProto(r upkeep.Report) *controlpb.FsckResponse {
	return &controlpb.FsckResponse{
		Entries:    int64(r.Entries),
		Orphans:    r.Orphans,
		Missing:    r.Missing,
		Corrupt:    r.Corrupt,
		IndexFixed: int64(r.IndexFixed),
		Referenced: int64(r.Referenced),
		Repaired:   r.Repaired,
		Remaining:  r.Remaining,
		Expired:    r.Expired,
	}
}

func reportFromProto(p *controlpb.FsckResponse) upkeep.Report {
	return upkeep.Report{
		Entries:    int(p.Entries),
		Orphans:    p.Orphans,
		Missing:    p.Missing,
		Corrupt:    p.Corrupt,
		IndexFixed: int(p.IndexFixed),
		Referenced: int(p.Referenced),
		Repaired:   p.Repaired,
		Remaining:  p.Remaining,
		Expired:    p.Expired,
	}
}

// EventToProto returns e as it travels, on the control socket and from
// replicad's Source service alike.
func EventToProto(e *journal.Event) *eventpb.Event {
	p := &eventpb.Event{
		Id:        e.ID,
		Type:      string(e.Type),
		Path:      e.Path,
		NewPath:   e.NewPath,
		Db:        e.DB,
		Table:     e.Table,
		Partition: e.Partition,
		Target:    e.Target,
		Files:     make([]*eventpb.File, len(e.Files)),
	}
	if !e.Time.IsZero() {
		p.TimeUnixNano = e.Time.UnixNano()
	}
	for i, f := range e.Files {
		p.Files[i] = &eventpb.File{Path: f.Path, Size: f.Size, Xxh64: f.XXH64, Cm: f.CM}
	}
	return p
}

// EventFromProto returns the journal event p carries. An event without
// files has nil Files, as the journal keeps it ("files":null in its JSON).
func EventFromProto(p *eventpb.Event) *journal.Event {
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
