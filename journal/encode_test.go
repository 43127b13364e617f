package journal

import (
	"encoding/json"
	"testing"
	"time"
)

// The hand-written encoder must produce exactly what encoding/json does.
func TestAppendJSONMatchesEncodingJSON(t *testing.T) {
	odd := "a\"b\\c\n\r\t\b\f\x00\x1f<>&é€𝄞\u2028\u2029\x7f/"
	tests := []Event{
		{},
		{ID: 1, Time: time.Date(2024, 1, 2, 3, 4, 5, 6, time.UTC), Type: Insert, Path: "sales.db/orders/part-0"},
		{ID: 1 << 62, Time: time.Date(2024, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600)), Type: Rename,
			Path: odd, NewPath: odd, DB: odd, Table: odd, Partition: odd, Target: odd,
			Files: []File{{Path: odd, Size: -1, XXH64: odd, CM: odd}, {Size: 1 << 40}}},
		{Files: []File{}},
		{Path: "bad \xff utf-8 \xe2\x82"},
	}
	for _, e := range tests {
		want, err := json.Marshal(&e)
		if err != nil {
			t.Fatal(err)
		}
		got, err := appendJSON([]byte("prefix"), &e)
		if err != nil {
			t.Fatal(err)
		}
		if string(got[6:]) != string(want) {
			t.Errorf("appendJSON:\n got %s\nwant %s", got[6:], want)
		}
	}
	if _, err := appendJSON(nil, &Event{Time: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}); err == nil {
		t.Error("appendJSON of year 10000: no error")
	}
}

func BenchmarkEncode(b *testing.B) {
	e := testEvent(1)
	e.ID, e.Time = 1, time.Now()
	var buf []byte
	for b.Loop() {
		buf, _ = appendJSON(buf[:0], e)
	}
}
