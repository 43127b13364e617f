package slot

import "time"

// Report is one slot as the commands and the metrics show it: where its
// destination is, how far behind the journal's last event, and what it
// keeps from gc.
type Report struct {
	Name     string    `json:"name"`
	Position uint64    `json:"position"`
	Lag      uint64    `json:"lag"`
	Lost     bool      `json:"lost"`
	Entries  int       `json:"pinned_entries"`
	Bytes    int64     `json:"pinned_bytes"`
	Created  time.Time `json:"created"`
	Updated  time.Time `json:"updated"`
}
