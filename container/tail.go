package container

import (
	"errors"
	"io"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// punchEvery is how much of the tarball the extraction consumes before
// the consumed part is punched out of the file.
const punchEvery = 8 << 20

// tail is the tarball of an import while it is received: the receiver
// appends to the file and the extraction reads behind it, waiting for
// bytes not yet there, so that the two run at once. What the extraction
// has consumed is punched out of the file (FALLOC_FL_PUNCH_HOLE), so its
// pages are dropped instead of written back. A tarball received whole
// before its extraction would, beyond the page cache's dirty limits, go to
// the disk in full before it is deleted — every byte written twice — and
// the extraction could not begin before the last byte came (docs/bench.md,
// "Containers", has the numbers). Punching is advisory; a filesystem
// without it just writes more.
//
// One goroutine receives (wrote, finish), one extracts (Read, Seek,
// await, release).
type tail struct {
	f *os.File

	mu      sync.Mutex
	cond    *sync.Cond
	written int64 // bytes in the file
	done    bool  // the receiver has ended
	err     error // why, if it did not reach the stream's end
	dropped bool  // the extraction has ended: receive no more

	off     int64 // the extraction's read offset
	punched int64 // bytes from 0 punched out of the file
	noPunch bool  // the filesystem cannot
}

func newTail(f *os.File) *tail {
	t := &tail{f: f}
	t.cond = sync.NewCond(&t.mu)
	return t
}

// wrote records that the file now holds n bytes.
func (t *tail) wrote(n int64) {
	t.mu.Lock()
	t.written = n
	t.mu.Unlock()
	t.cond.Broadcast()
}

// finish records that the receiver has ended: at the stream's end (err
// nil) or on err.
func (t *tail) finish(err error) {
	t.mu.Lock()
	t.done, t.err = true, err
	t.mu.Unlock()
	t.cond.Broadcast()
}

// drop tells the receiver that nothing will read what it writes any more.
func (t *tail) drop() {
	t.mu.Lock()
	t.dropped = true
	t.mu.Unlock()
}

// isDropped reports whether drop was called.
func (t *tail) isDropped() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.dropped
}

// size returns how many bytes the file holds so far.
func (t *tail) size() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.written
}

// failure returns the receiver's error once it has ended.
func (t *tail) failure() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}

// await waits until the file holds more than off bytes or the receiver
// has ended, and returns how many it holds; and, when that is no more
// than off, the receiver's error (nil: the stream ended there).
func (t *tail) await(off int64) (int64, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for t.written <= off && !t.done {
		t.cond.Wait()
	}
	if t.written <= off {
		return t.written, t.err
	}
	return t.written, nil
}

func (t *tail) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	end, err := t.await(t.off)
	if end <= t.off {
		if err == nil {
			err = io.EOF
		}
		return 0, err
	}
	n, err := t.f.ReadAt(p[:min(int64(len(p)), end-t.off)], t.off)
	t.off += int64(n)
	t.release(t.off)
	if err == io.EOF && n > 0 {
		err = nil
	}
	return n, err
}

// Seek moves the read offset, which may go past what is written (reads
// then wait for it). It does not touch the file's own offset, where the
// receiver writes.
func (t *tail) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		offset += t.off
	default:
		return t.off, errors.New("tarball: seek from the end of a stream")
	}
	if offset < 0 {
		return t.off, errors.New("tarball: seek before the start")
	}
	t.off = offset
	return offset, nil
}

// release punches out of the file the whole pages before pos, which the
// extraction has consumed, once punchEvery bytes of them have gathered.
func (t *tail) release(pos int64) {
	to := pos &^ (4096 - 1)
	if t.noPunch || to-t.punched < punchEvery {
		return
	}
	if err := unix.Fallocate(int(t.f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, t.punched, to-t.punched); err != nil {
		t.noPunch = true
		return
	}
	t.punched = to
}
