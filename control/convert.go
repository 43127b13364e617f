package control

import (
	"time"

	"github.com/cmfs-project/cmfs/api/controlpb"
	"github.com/cmfs-project/cmfs/journal"
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

func eventToProto(e *journal.Event) *controlpb.Event {
	p := &controlpb.Event{
		Id:           e.ID,
		TimeUnixNano: unixNano(e.Time),
		Type:         string(e.Type),
		Path:         e.Path,
		NewPath:      e.NewPath,
		Db:           e.DB,
		Table:        e.Table,
		Partition:    e.Partition,
		Target:       e.Target,
		Files:        make([]*controlpb.File, len(e.Files)),
	}
	for i, f := range e.Files {
		p.Files[i] = &controlpb.File{Path: f.Path, Size: f.Size, Xxh64: f.XXH64, Cm: f.CM}
	}
	return p
}

func eventFromProto(p *controlpb.Event) journal.Event {
	e := journal.Event{
		ID:        p.Id,
		Time:      fromUnixNano(p.TimeUnixNano),
		Type:      journal.Type(p.Type),
		Path:      p.Path,
		NewPath:   p.NewPath,
		DB:        p.Db,
		Table:     p.Table,
		Partition: p.Partition,
		Target:    p.Target,
		Files:     make([]journal.File, len(p.Files)),
	}
	for i, f := range p.Files {
		e.Files[i] = journal.File{Path: f.Path, Size: f.Size, XXH64: f.Xxh64, CM: f.Cm}
	}
	return e
}

func reportToProto(r Report) *controlpb.FsckResponse {
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

func reportFromProto(p *controlpb.FsckResponse) Report {
	return Report{
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
