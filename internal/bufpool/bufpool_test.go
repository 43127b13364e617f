package bufpool

import "testing"

func TestPool(t *testing.T) {
	p := New()
	for _, n := range []int{0, 1, 255, 256, 257, 1 << 20, 1<<20 + 1, 1 << 24, 1<<24 + 1} {
		b := p.Get(n)
		if len(*b) != n {
			t.Fatalf("Get(%d): len %d", n, len(*b))
		}
		if n > 0 && n <= 1<<24 && cap(*b)&(cap(*b)-1) != 0 {
			t.Fatalf("Get(%d): capacity %d is not a power of two", n, cap(*b))
		}
		p.Put(b)
	}
	// A buffer comes back with the capacity it had, cut to the length asked.
	b := p.Get(1000)
	(*b)[0] = 7
	p.Put(b)
	c := p.Get(900)
	if len(*c) != 900 || cap(*c) != 1024 {
		t.Fatalf("Get(900) after Put: len %d cap %d, want 900 1024", len(*c), cap(*c))
	}
	// Buffers of other capacities are dropped, not reused at a wrong size.
	odd := make([]byte, 1000)
	p.Put(&odd)
	if d := p.Get(1000); cap(*d) != 1024 {
		t.Fatalf("Get(1000) after Put of a 1000-byte buffer: cap %d, want 1024", cap(*d))
	}
}
