package extents

import (
	"slices"
	"testing"
)

func TestSame(t *testing.T) {
	const k = 4096
	for _, tc := range []struct {
		name string
		a, b []Extent
		want []Span
	}{
		{"identical", []Extent{{0, 100 * k, 10 * k, Last}}, []Extent{{0, 100 * k, 10 * k, Shared | Last}}, []Span{{0, 10 * k}}},
		{"one block moved", // a's block 4 was written: it lives elsewhere now
			[]Extent{{0, 100 * k, 4 * k, 0}, {4 * k, 500 * k, k, 0}, {5 * k, 105 * k, 5 * k, Last}},
			[]Extent{{0, 100 * k, 10 * k, Last}},
			[]Span{{0, 4 * k}, {5 * k, 10 * k}}},
		{"split differently, same addresses", // touching spans merge
			[]Extent{{0, 100 * k, 3 * k, 0}, {3 * k, 103 * k, 7 * k, Last}},
			[]Extent{{0, 100 * k, 6 * k, 0}, {6 * k, 106 * k, 4 * k, Last}},
			[]Span{{0, 10 * k}}},
		{"same length elsewhere", []Extent{{0, 100 * k, 10 * k, 0}}, []Extent{{0, 200 * k, 10 * k, 0}}, nil},
		{"shifted", []Extent{{k, 100 * k, 9 * k, 0}}, []Extent{{0, 100 * k, 10 * k, 0}}, nil},
		{"a hole in one", []Extent{{0, 100 * k, 2 * k, 0}, {5 * k, 105 * k, 5 * k, 0}}, []Extent{{0, 100 * k, 10 * k, 0}},
			[]Span{{0, 2 * k}, {5 * k, 10 * k}}},
		{"delayed allocation", []Extent{{0, 0, 10 * k, Delalloc | Unknown}}, []Extent{{0, 0, 10 * k, Delalloc | Unknown}}, nil},
		{"inline data", []Extent{{0, 100 * k, 100, DataInline | NotAligned}}, []Extent{{0, 100 * k, 100, DataInline | NotAligned}}, nil},
		{"encoded", []Extent{{0, 100 * k, 10 * k, Encoded}}, []Extent{{0, 100 * k, 10 * k, Encoded}}, nil},
		{"written in one only", []Extent{{0, 100 * k, 10 * k, Unwritten}}, []Extent{{0, 100 * k, 10 * k, 0}}, nil},
		{"unwritten in both", []Extent{{0, 100 * k, 10 * k, Unwritten}}, []Extent{{0, 100 * k, 10 * k, Unwritten}}, []Span{{0, 10 * k}}},
		{"empty", nil, []Extent{{0, 100 * k, 10 * k, 0}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Same(tc.a, tc.b); !slices.Equal(got, tc.want) {
				t.Errorf("Same = %v, want %v", got, tc.want)
			}
			if got := Same(tc.b, tc.a); !slices.Equal(got, tc.want) {
				t.Errorf("Same, the other way round = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestCovers(t *testing.T) {
	spans := []Span{{0, 100}, {200, 300}, {300, 400}, {500, 600}}
	k := 0
	for _, tc := range []struct {
		start, end uint64
		want       bool
	}{
		{0, 50, true},
		{50, 100, true},
		{90, 110, false}, // runs into a gap
		{150, 200, false},
		{200, 300, true},
		{250, 350, false}, // two spans that were not merged: not covered
		{300, 400, true},
		{450, 550, false},
		{500, 600, true},
		{600, 700, false},
	} {
		if got := Covers(spans, &k, tc.start, tc.end); got != tc.want {
			t.Errorf("Covers [%d, %d) = %v, want %v", tc.start, tc.end, got, tc.want)
		}
	}
}
