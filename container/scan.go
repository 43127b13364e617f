package container

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"

	"github.com/cmfs-project/cmfs/internal/checksum"
)

// scanJob is one scan of a container; Verify and WaitScan wait on it.
type scanJob struct {
	cancel context.CancelFunc
	done   chan struct{}
	desc   Descriptor // set before done closes
	err    error
}

// startScan starts a scan of c in the background, or returns the one
// running. The Store owns it: Close and Delete cancel it, and a cancelled
// scan leaves the state as it was (the next OpenStore scans again).
func (s *Store) startScan(c *container) *scanJob {
	s.mu.Lock()
	defer s.mu.Unlock()
	if job := s.scans[c.id]; job != nil {
		return job
	}
	job := &scanJob{done: make(chan struct{})}
	if s.closed {
		job.desc, job.err = *c.desc.Load(), ErrClosed
		close(job.done)
		return job
	}
	ctx, cancel := context.WithCancel(s.ctx)
	job.cancel = cancel
	s.scans[c.id] = job
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer cancel()
		job.desc, job.err = s.scanWhenFree(ctx, c)
		s.mu.Lock()
		delete(s.scans, c.id)
		s.mu.Unlock()
		close(job.done)
	}()
	return job
}

// scanWhenFree waits for one of the Options.Scanners slots, then scans.
func (s *Store) scanWhenFree(ctx context.Context, c *container) (Descriptor, error) {
	select {
	case s.scanSem <- struct{}{}:
		defer func() { <-s.scanSem }()
	case <-ctx.Done():
		return *c.desc.Load(), ctx.Err()
	}
	return s.scan(ctx, c)
}

// Verify scans container id: the descriptor's own checksum, the index
// file's size and checksum, the container checksum (computed over the
// index, and as the descriptor and the checksum file record it), that the
// blocks tile the chunk files exactly, and every block's xxh64. All good:
// CLOSED (from CLOSED, CLOSING, RECOVERING or UNHEALTHY); anything wrong:
// UNHEALTHY, with Reason saying what. A container whose close failed
// part-way is first made to agree with its index (see CloseContainer), so
// only real damage makes it UNHEALTHY. The new state is written durably
// before Verify returns. If a scan of id is already running (after an
// import), Verify waits for it instead of starting another. A cancelled
// ctx stops the wait, not the scan. Errors: ErrNotFound, ErrNotClosed
// (OPEN), ErrClosed, or an I/O error writing the descriptor.
func (s *Store) Verify(ctx context.Context, id uint64) (Descriptor, error) {
	c, err := s.get(id)
	if err != nil {
		return Descriptor{}, fmt.Errorf("verify container %d: %w", id, err)
	}
	if st := c.state(); st == Open {
		return *c.desc.Load(), fmt.Errorf("verify container %d: state %s: %w", id, st, ErrNotClosed)
	}
	return s.wait(ctx, id, s.startScan(c))
}

// WaitScan waits until no scan of container id is running (the one an
// Import or OpenStore started) and returns its descriptor: CLOSED or
// UNHEALTHY after an import. Errors: ErrNotFound, ErrClosed, ctx's.
func (s *Store) WaitScan(ctx context.Context, id uint64) (Descriptor, error) {
	c, err := s.get(id)
	if err != nil {
		return Descriptor{}, fmt.Errorf("wait for scan of container %d: %w", id, err)
	}
	s.mu.Lock()
	job := s.scans[id]
	s.mu.Unlock()
	if job == nil {
		return *c.desc.Load(), nil
	}
	return s.wait(ctx, id, job)
}

func (s *Store) wait(ctx context.Context, id uint64, job *scanJob) (Descriptor, error) {
	select {
	case <-job.done:
	case <-ctx.Done():
		return Descriptor{}, fmt.Errorf("scan container %d: %w", id, ctx.Err())
	}
	if job.err != nil {
		return job.desc, fmt.Errorf("scan container %d: %w", id, job.err)
	}
	return job.desc, nil
}

// scan checks c and records the verdict. A container whose close failed
// part-way is first brought in line with its index, as OpenStore would
// after a restart: checked against its descriptor as it was, it would
// look damaged when only the close was cut short.
func (s *Store) scan(ctx context.Context, c *container) (Descriptor, error) {
	c.rw.RLock()
	defer c.rw.RUnlock()
	var recs []record
	var reason string
	var err error
	if c.closeInterrupted() {
		reason, err = c.recoverOpen(Closing, s.sync)
		s.resize(c)
		if err != nil {
			return *c.desc.Load(), err
		}
	}
	if reason == "" {
		recs, reason, err = check(ctx, c.dir, *c.desc.Load())
		if err != nil {
			return *c.desc.Load(), err
		}
	}
	// An EC index replica's layout and table are read again when next
	// needed, from the files as this scan found them.
	c.ecx.Store(nil)
	c.mu.Lock()
	d := *c.desc.Load()
	if reason == "" {
		d.State, d.Reason = Closed, ""
	} else {
		d.State, d.Reason = Unhealthy, reason
	}
	err = c.writeDesc(&d, s.sync)
	if err == nil {
		c.setDesc(d)
	}
	c.mu.Unlock()
	if err != nil {
		return *c.desc.Load(), err
	}
	s.mu.Lock()
	if s.containers[c.id] == c {
		if d.State != Closed {
			s.unindex(c)
		} else if !c.indexed {
			s.index(c, recs)
		}
	}
	s.mu.Unlock()
	return d, nil
}

// check verifies a container directory against its descriptor d. It
// returns the index's records and "" when everything matches, a reason
// when something does not, and an error only when ctx ends.
func check(ctx context.Context, dir string, d Descriptor) ([]record, string, error) {
	disk, err := readDescriptor(dir)
	switch {
	case err != nil:
		return nil, fmt.Sprintf("descriptor: %v", err), nil
	case disk.ID != d.ID:
		return nil, fmt.Sprintf("descriptor names container %d", disk.ID), nil
	}
	// Check the index file before bbolt maps it: bbolt trusts its file.
	dbPath := filepath.Join(dir, dbName)
	n, msum, err := fileChecksum(dbPath)
	switch {
	case err != nil:
		return nil, fmt.Sprintf("index file: %v", err), nil
	case n != d.MetadataBytes || checksum.Format(msum) != d.MetadataChecksum:
		return nil, fmt.Sprintf("index file: %d bytes xxh64 %s, descriptor says %d bytes %s", n, checksum.Format(msum), d.MetadataBytes, d.MetadataChecksum), nil
	}
	recs, sum, err := readIndex(dbPath)
	if err != nil {
		return nil, err.Error(), nil
	}
	file, err := os.ReadFile(filepath.Join(dir, checksumName))
	switch {
	case err != nil:
		return nil, fmt.Sprintf("checksum file: %v", err), nil
	case checksum.Format(sum) != d.ContainerChecksum || !bytes.Equal(file, []byte(d.ContainerChecksum+"\n")):
		return nil, fmt.Sprintf("container checksum: index %s, descriptor %s, checksum file %q", checksum.Format(sum), d.ContainerChecksum, bytes.TrimSpace(file)), nil
	case int64(len(recs)) != d.Blocks:
		return nil, fmt.Sprintf("index holds %d blocks, descriptor says %d", len(recs), d.Blocks), nil
	}
	names, err := chunkFiles(dir)
	if err != nil {
		return nil, err.Error(), nil
	}
	if len(names) != d.Chunks {
		return nil, fmt.Sprintf("%d chunk files, descriptor says %d", len(names), d.Chunks), nil
	}
	if d.ReplicaIndex > 0 {
		// Its chunk file holds cells, not the blocks.
		reason, err := checkECIndex(ctx, dir, d, recs)
		if err != nil || reason != "" {
			return nil, reason, err
		}
		return recs, "", nil
	}
	byChunk := make([][]record, d.Chunks)
	for _, r := range recs {
		if r.chunk >= d.Chunks {
			return nil, fmt.Sprintf("block %s in missing %s", r.id, chunkName(r.chunk)), nil
		}
		byChunk[r.chunk] = append(byChunk[r.chunk], r)
	}
	var total int64
	buf := make([]byte, copyBufSize)
	for n, rs := range byChunk {
		sortByOffset(rs)
		size, reason, err := checkChunk(ctx, filepath.Join(dir, chunkName(n)), rs, buf)
		if err != nil || reason != "" {
			return nil, reason, err
		}
		total += size
	}
	if total != d.Bytes {
		return nil, fmt.Sprintf("chunks hold %d bytes, descriptor says %d", total, d.Bytes), nil
	}
	return recs, "", nil
}

// checkChunk reads one chunk file straight through, checking that its
// blocks (sorted by offset) cover it exactly and that each hashes to its
// sum. It returns the file's size.
func checkChunk(ctx context.Context, path string, rs []record, buf []byte) (int64, string, error) {
	name := chunksDir + "/" + filepath.Base(path)
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Sprintf("%s: %v", name, err), nil
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, fmt.Sprintf("%s: %v", name, err), nil
	}
	if reason := tiles(name, rs, fi.Size()); reason != "" {
		return 0, reason, nil
	}
	reason, err := checkFile(ctx, f, name, blockSums(name, rs), buf)
	return fi.Size(), reason, err
}

// tiles checks that blocks rs, sorted by offset, cover a chunk file of
// size bytes from 0 to its end with no gap or overlap.
func tiles(name string, rs []record, size int64) string {
	var pos int64
	for _, r := range rs {
		if r.off != pos {
			return fmt.Sprintf("%s: block %s at %d, want %d (gap or overlap)", name, r.id, r.off, pos)
		}
		pos += r.id.Size
	}
	if pos != size {
		return fmt.Sprintf("%s: %d bytes, its blocks cover %d", name, size, pos)
	}
	return ""
}

// checkFile reads f from its start to its end through sc and returns
// what sc found wrong, or an error if ctx ends.
func checkFile(ctx context.Context, f *os.File, name string, sc *sumChecker, buf []byte) (string, error) {
	for {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		m, err := f.Read(buf)
		if _, werr := sc.Write(buf[:m]); werr != nil {
			return werr.Error(), nil
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Sprintf("%s: %v", name, err), nil
		}
	}
	if err := sc.done(); err != nil {
		return err.Error(), nil
	}
	return "", nil
}

// sumChecker checks, as a file's bytes pass through it in order, that
// each piece of it hashes to its sum: the blocks of a chunk file, the
// cells of an EC index file. Piece k is piece(k) (its size and sum);
// bad(k, got) says what is wrong with a piece that hashes to got. Its
// errors are damage.
type sumChecker struct {
	n     int
	piece func(k int) (size int64, sum uint64)
	bad   func(k int, got uint64) string
	end   func(k int) string // the file ended inside piece k
	k     int
	left  int64
	h     hash.Hash64
}

func newSumChecker(h hash.Hash64, n int, piece func(int) (int64, uint64), bad func(int, uint64) string, end func(int) string) *sumChecker {
	sc := &sumChecker{n: n, piece: piece, bad: bad, end: end, h: h}
	if n > 0 {
		sc.left, _ = piece(0)
	}
	return sc
}

// blockSums checks the blocks rs of chunk file name, sorted by offset.
func blockSums(name string, rs []record) *sumChecker {
	return newSumChecker(checksum.New(), len(rs),
		func(k int) (int64, uint64) { return rs[k].id.Size, rs[k].id.Sum },
		func(k int, got uint64) string {
			return fmt.Sprintf("%s: block %s at %d: xxh64 %s", name, rs[k].id, rs[k].off, checksum.Format(got))
		},
		func(k int) string { return fmt.Sprintf("%s: ends inside block %s", name, rs[k].id) })
}

func (sc *sumChecker) Write(p []byte) (int, error) {
	n := len(p)
	for {
		// Every piece p completes, empty ones included.
		for sc.k < sc.n && sc.left == 0 {
			if _, want := sc.piece(sc.k); sc.h.Sum64() != want {
				return 0, damage(sc.bad(sc.k, sc.h.Sum64()))
			}
			sc.h.Reset()
			if sc.k++; sc.k < sc.n {
				sc.left, _ = sc.piece(sc.k)
			}
		}
		if len(p) == 0 {
			return n, nil
		}
		if sc.k == sc.n {
			return 0, damage(fmt.Sprintf("%d bytes beyond the last piece", len(p)))
		}
		take := min(int64(len(p)), sc.left)
		sc.h.Write(p[:take])
		p, sc.left = p[take:], sc.left-take
	}
}

// done checks that every piece was written whole.
func (sc *sumChecker) done() error {
	if _, err := sc.Write(nil); err != nil {
		return err
	}
	if sc.k < sc.n {
		return damage(sc.end(sc.k))
	}
	return nil
}

// damage is data found wrong: its message is the reason a scan gives,
// and it wraps ErrCorrupt.
type damage string

func (d damage) Error() string { return string(d) }
func (d damage) Unwrap() error { return ErrCorrupt }
