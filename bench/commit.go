package bench

import (
	"encoding/json"
	"fmt"
)

// Commit is what a cmfs mount says of its commit path: the "commit" object
// of `cmfs status --json`. The counters run from the mount's start, so a
// workload's share is the difference of two readings.
type Commit struct {
	Sync       string  `json:"sync"`    // always, interval:DUR
	Groups     uint64  `json:"groups"`  // group commits
	Events     uint64  `json:"events"`  // events committed
	Flushes    uint64  `json:"flushes"` // device flushes (fsync, fdatasync, syncfs) the commit path issued
	FlushP50us float64 `json:"flush_p50_us"`
	FlushP99us float64 `json:"flush_p99_us"`
}

// ParseCommit reads the commit object out of the output of `cmfs status
// --json`. It returns nil, without error, when the status has none: a cmfs
// that does not report its commit path.
func ParseCommit(status []byte) (*Commit, error) {
	var s struct {
		Commit *Commit `json:"commit"`
	}
	if err := json.Unmarshal(status, &s); err != nil {
		return nil, fmt.Errorf("status --json: %w", err)
	}
	return s.Commit, nil
}
