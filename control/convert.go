package control

import (
	"time"

	"github.com/cmfs-project/cmfs/api/controlpb"
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
