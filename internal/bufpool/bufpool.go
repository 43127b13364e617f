// Package bufpool is a gRPC buffer pool (google.golang.org/grpc/mem) that
// does not zero the buffers it hands out.
//
// gRPC's default pool clears every buffer on Get. gRPC fills each buffer
// it gets to the length it asked for before anything reads it (a frame's
// payload, a message made contiguous), so the clearing buys nothing in
// this use, and on a bulk stream of 1 MiB messages it was about a tenth
// of the receiving process's CPU. gRPC keeps non-zeroing ("dirty") pools
// of its own for internal use; this is one for ours.
package bufpool

import (
	"math/bits"
	"sync"

	"google.golang.org/grpc/mem"
)

// Buffers of 2^minShift to 2^maxShift bytes are pooled, by power of two;
// others are allocated and dropped.
const (
	minShift = 8  // 256 B
	maxShift = 24 // 16 MiB
)

// Pool is a mem.BufferPool that does not zero what Get returns.
type Pool struct {
	tiers [maxShift + 1]sync.Pool
}

var _ mem.BufferPool = (*Pool)(nil)

// New returns an empty pool.
func New() *Pool { return &Pool{} }

// Get returns a buffer of the given length, whose bytes are whatever they
// were.
func (p *Pool) Get(length int) *[]byte {
	shift := bits.Len(uint(max(length, 1) - 1)) // the smallest power of two ≥ length
	if shift > maxShift {
		b := make([]byte, length)
		return &b
	}
	shift = max(shift, minShift)
	if b, ok := p.tiers[shift].Get().(*[]byte); ok {
		*b = (*b)[:length]
		return b
	}
	b := make([]byte, length, 1<<shift)
	return &b
}

// Put returns a buffer to the pool; one not obtained from Get (of another
// capacity than a power of two in range) is dropped.
func (p *Pool) Put(b *[]byte) {
	c := cap(*b)
	if c == 0 || c&(c-1) != 0 {
		return
	}
	shift := bits.Len(uint(c)) - 1
	if shift < minShift || shift > maxShift {
		return
	}
	p.tiers[shift].Put(b)
}
