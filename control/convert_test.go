package control

import (
	"reflect"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/journal"
)

// TestEventProto: an event crosses the wire and comes back as it was,
// without files as nil Files (as the journal keeps it) and without a time
// as the zero time.
func TestEventProto(t *testing.T) {
	for _, tc := range []struct {
		name string
		e    journal.Event
	}{
		{"full", journal.Event{ID: 7, Type: journal.Rename, Path: "d.db/t/a", NewPath: "d.db/t/b", DB: "d", Table: "t", Partition: "p=1", Target: "x",
			Time: time.Unix(0, 1700000000123456789).UTC(), Files: []journal.File{{Path: "d.db/t/b", Size: 3, XXH64: journal.Sum([]byte("abc")), CM: "cm"}}}},
		{"no files, no time", journal.Event{ID: 1, Type: journal.Mkdir, Path: "d.db"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := EventFromProto(EventToProto(&tc.e)); !reflect.DeepEqual(*got, tc.e) {
				t.Errorf("round trip = %+v, want %+v", *got, tc.e)
			}
		})
	}
}
