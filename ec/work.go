package ec

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// bufs keeps batch buffers from one call to the next: a fresh 4 MiB
// buffer costs its page faults again on every call, about as much as
// copying the bytes into it.
var bufs sync.Pool // of *[]byte

// getBuf returns a buffer of n bytes, not zeroed.
func getBuf(n int64) []byte {
	if p, ok := bufs.Get().(*[]byte); ok && int64(cap(*p)) >= n {
		return (*p)[:n]
	}
	return make([]byte, n)
}

// putBuf gives b back; the caller no longer holds any part of it.
func putBuf(b []byte) {
	if cap(b) >= 64<<10 {
		bufs.Put(&b)
	}
}

// parallel runs f(0)…f(n-1) on up to limit goroutines (GOMAXPROCS if
// limit < 1) and returns when every call has.
func parallel(n, limit int, f func(k int)) {
	if limit < 1 {
		limit = runtime.GOMAXPROCS(0)
	}
	g := min(n, limit)
	if g <= 1 {
		for k := range n {
			f(k)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range g {
		wg.Go(func() {
			for k := int(next.Add(1) - 1); k < n; k = int(next.Add(1) - 1) {
				f(k)
			}
		})
	}
	wg.Wait()
}
