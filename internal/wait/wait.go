// Package wait is the tests' one way to wait for a condition: poll it
// with a deadline, never sleep a fixed time and hope. It imports testing
// and is for tests only.
package wait

import (
	"testing"
	"time"
)

// maxPause bounds the pause between two looks at a condition; the first
// look is immediate and the pauses grow from a millisecond, so a
// condition that holds soon is seen soon.
const maxPause = 10 * time.Millisecond

// Until reports whether cond came to hold within timeout.
func Until(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	pause := time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(pause)
		pause = min(2*pause, maxPause)
	}
	return true
}

// For polls cond until it holds, and fails t with what it waited for
// when timeout passes first.
func For(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Until(timeout, cond) {
		t.Fatalf("timed out after %v waiting for %s", timeout, what)
	}
}
