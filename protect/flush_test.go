package protect

import (
	"errors"
	"sync/atomic"
	"testing"
)

// TestRunPhases: every flush of the first phase has ended before any of
// the second starts, and a failure in the first skips the second.
func TestRunPhases(t *testing.T) {
	var firstDone, early atomic.Int32
	var first, then []func() error
	for range 20 {
		first = append(first, func() error { firstDone.Add(1); return nil })
		then = append(then, func() error {
			if firstDone.Load() != 20 {
				early.Add(1)
			}
			return nil
		})
	}
	if err := runPhases(first, then); err != nil {
		t.Fatal(err)
	}
	if n := early.Load(); n != 0 {
		t.Errorf("%d flushes of the second phase started before the first had ended", n)
	}

	boom := errors.New("boom")
	var ran atomic.Int32
	err := runPhases([]func() error{func() error { return boom }}, []func() error{func() error { ran.Add(1); return nil }})
	if !errors.Is(err, boom) || ran.Load() != 0 {
		t.Errorf("runPhases after a failed first phase = %v, second phase ran %d times; want boom and 0", err, ran.Load())
	}
}

// TestLeads: only the content of a file in the tree is flushed first.
func TestLeads(t *testing.T) {
	for _, tc := range []struct {
		p    place
		data bool
		want bool
	}{
		{place{"db.db/t/f", true}, true, true},
		{place{"db.db/t", true}, false, false},
		{place{"/state/cmroot/ab/abcd-4096", false}, true, false},
		{place{"/state/cmroot/ab", false}, false, false},
	} {
		if got := leads(tc.p, tc.data); got != tc.want {
			t.Errorf("leads(%+v, data %t) = %t, want %t", tc.p, tc.data, got, tc.want)
		}
	}
}
