package wait

import (
	"testing"
	"time"
)

func TestUntil(t *testing.T) {
	start := time.Now()
	n := 0
	if !Until(time.Second, func() bool { n++; return n == 3 }) {
		t.Fatal("Until gave up on a condition that holds at the third look")
	}
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("three looks took %v", d)
	}
	if Until(20*time.Millisecond, func() bool { return false }) {
		t.Error("Until reported a condition that never holds")
	}
}
