package fusefs

import (
	"slices"
	"syscall"
	"testing"
)

// TestStatsOps: every operation reports "ok", 0 included; an error
// appears once it has happened, by its errno's name; numbers the kernel
// does not name, and those past every errno, add up under one "other".
func TestStatsOps(t *testing.T) {
	s := NewStats()
	got := s.Ops()
	if len(got) != int(numOps) {
		t.Fatalf("fresh Stats: %d counts, want one ok per operation (%d): %v", len(got), numOps, got)
	}
	for i, c := range got {
		if c != (OpCount{Op: opNames[i], Result: "ok"}) {
			t.Errorf("fresh Stats: %+v, want %s ok 0", c, opNames[i])
		}
	}

	s.done(opCreate, 0)
	s.done(opCreate, 0)
	s.done(opUnlink, syscall.ENOENT)
	s.done(opUnlink, syscall.ENOENT)
	s.done(opUnlink, syscall.EACCES)
	s.done(opRename, syscall.EXDEV)
	s.done(opRename, syscall.Errno(41)) // no errno 41 on Linux
	s.done(opRename, syscall.Errno(500))
	s.done(opRename, syscall.Errno(1<<20))
	var errno syscall.Errno = syscall.ENOSPC
	s.count(opRelease, &errno)

	want := map[[2]string]uint64{
		{"create", "ok"}:      2,
		{"unlink", "ENOENT"}:  2,
		{"unlink", "EACCES"}:  1,
		{"rename", "EXDEV"}:   1,
		{"rename", "other"}:   3,
		{"release", "ENOSPC"}: 1,
	}
	seen := map[[2]string]bool{}
	for _, c := range s.Ops() {
		k := [2]string{c.Op, c.Result}
		if seen[k] {
			t.Errorf("%s %s listed twice", c.Op, c.Result)
		}
		seen[k] = true
		if c.N != want[k] {
			t.Errorf("%s %s: %d, want %d", c.Op, c.Result, c.N, want[k])
		}
		delete(want, k)
	}
	for k, n := range want {
		t.Errorf("%s %s missing (want %d)", k[0], k[1], n)
	}
}

// TestResultNames: the names are the kernel's, and bounded.
func TestResultNames(t *testing.T) {
	names := map[string]bool{}
	for i := range numResults {
		names[resultName(i)] = true
	}
	for _, n := range []string{"ok", "ENOENT", "EEXIST", "ENOTEMPTY", "EXDEV", "ENOSPC", "EIO", "EACCES", "EPERM", "other"} {
		if !names[n] {
			t.Errorf("no result is named %s", n)
		}
	}
	if len(names) > numResults {
		t.Errorf("%d result names from %d counters", len(names), numResults)
	}
	if u := slices.Compact(slices.Sorted(slices.Values(opNames[:]))); len(u) != int(numOps) {
		t.Errorf("operation names repeat: %v", opNames)
	}
}

// countedOp and uncountedOp are an operation's shape with and without the
// deferred count, for BenchmarkOpCount.
//
//go:noinline
func countedOp(s *Stats, fail bool) (errno syscall.Errno) {
	defer s.count(opCreate, &errno)
	if fail {
		return syscall.ENOENT
	}
	return 0
}

//go:noinline
func uncountedOp(s *Stats, fail bool) (errno syscall.Errno) {
	if fail {
		return syscall.ENOENT
	}
	return 0
}

// BenchmarkOpCount measures what counting adds to each operation: the
// deferred atomic add, alone and with both cores counting the same
// operation (one cache line between them), against the same call
// uncounted.
func BenchmarkOpCount(b *testing.B) {
	s := NewStats()
	b.Run("uncounted", func(b *testing.B) {
		for b.Loop() {
			uncountedOp(s, false)
		}
	})
	b.Run("counted", func(b *testing.B) {
		for b.Loop() {
			countedOp(s, false)
		}
	})
	b.Run("counted-error", func(b *testing.B) {
		for b.Loop() {
			countedOp(s, true)
		}
	})
	b.Run("counted-parallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				countedOp(s, false)
			}
		})
	})
}
