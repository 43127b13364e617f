package container

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/cmfs-project/cmfs/internal/checksum"
	"github.com/cmfs-project/cmfs/internal/durable"
)

// Options tune a Store. The zero value is usable.
type Options struct {
	// ContainerSize is the data size at which the open container is closed
	// and the next Put opens a new one; 0 means DefaultContainerSize.
	ContainerSize int64
	// ChunkSize is the size at which a container starts its next chunk
	// file; 0 means DefaultChunkSize.
	ChunkSize int64
	// Replication is new containers' replication config; "" means
	// DefaultReplication.
	Replication string
	// IdleClose closes the open container when no Put has come for this
	// long; 0 never does.
	IdleClose time.Duration
	// Scanners is how many scans (after an import or a restart, or for
	// Verify) read at once; 0 means 1.
	Scanners int
	// Statfs reports a volume's capacity and free space; nil means statfs(2).
	// Tests pass a fake to exercise ErrNoSpace without a small filesystem.
	Statfs StatfsFunc
	// NoSync skips every fsync (tests only).
	NoSync bool

	// syncFS makes Import sync with one syncfs of the volume instead of an
	// fsync per extracted file (benchmarks compare the two).
	syncFS bool
	// writeFault, when set, runs before each write of a container's
	// container.yaml or metadata/container.checksum with that name; an
	// error it returns is the write's (tests: a volume that fills up).
	writeFault func(name string) error
}

// Defaults for Options.
const (
	DefaultContainerSize = 5 << 30
	DefaultChunkSize     = 256 << 20
)

// Store is one node's containers across its volumes. It is safe for
// concurrent use; Puts are serialised (they append to one open container).
type Store struct {
	opts Options
	sync bool
	vols []*volume

	// ctx ends background work (scans, idle close, imports) on Close; wg
	// waits for it.
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	scanSem chan struct{}

	// putMu serialises Put and everything that touches the open
	// containers. Lock order: putMu, container.rw, container.mu, mu.
	putMu sync.Mutex
	// open is the open container of each replication config: blocks put
	// with one config never land in a container of another.
	open   map[string]*container
	putBuf []byte
	// idle fires when the open container idle longest reaches IdleClose;
	// idleArmed says it is pending.
	idle      *time.Timer
	idleArmed bool

	mu         sync.Mutex
	closed     bool
	containers map[uint64]*container
	importing  map[uint64]bool
	scans      map[uint64]*scanJob
	// blocks finds a block by sum: the containers that serve it (OPEN,
	// CLOSING, CLOSED). RECOVERING containers join after their scan, and
	// UNHEALTHY ones leave.
	blocks map[uint64][]loc
}

// loc is where one block's bytes are.
type loc struct {
	size  int64
	c     *container
	chunk int
	off   int64
}

// OpenStore opens the containers on volumes (directories, created if
// missing; each held with a lock, ErrInUse if another Store has it).
// Whatever an interrupted import, create or delete left in a volume's tmp
// directory is removed. Containers found OPEN or CLOSING (their process
// died) are trimmed to their index and scanned; RECOVERING ones (an import
// whose scan did not finish) are scanned; both in the background, see
// WaitScan. A container whose descriptor cannot be read is listed as
// UNHEALTHY.
func OpenStore(volumes []string, opts Options) (*Store, error) {
	if len(volumes) == 0 {
		return nil, errors.New("open container store: no volumes")
	}
	if opts.ContainerSize == 0 {
		opts.ContainerSize = DefaultContainerSize
	}
	if opts.ChunkSize == 0 {
		opts.ChunkSize = DefaultChunkSize
	}
	if opts.Replication == "" {
		opts.Replication = DefaultReplication
	}
	if opts.Scanners <= 0 {
		opts.Scanners = 1
	}
	if opts.Statfs == nil {
		opts.Statfs = Statfs
	}
	if opts.ContainerSize < 0 || opts.ChunkSize < 0 || opts.IdleClose < 0 {
		return nil, errors.New("open container store: negative size or timeout")
	}
	if err := ValidateReplication(opts.Replication); err != nil {
		return nil, fmt.Errorf("open container store: %w", err)
	}
	s := &Store{
		opts:       opts,
		sync:       !opts.NoSync,
		scanSem:    make(chan struct{}, opts.Scanners),
		open:       make(map[string]*container),
		containers: make(map[uint64]*container),
		importing:  make(map[uint64]bool),
		scans:      make(map[uint64]*scanJob),
		blocks:     make(map[uint64][]loc),
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	var rescan []*container
	for _, dir := range volumes {
		v, err := openVolume(dir)
		if err == nil {
			s.vols = append(s.vols, v)
			rescan, err = s.load(v, rescan)
		}
		if err != nil {
			s.cancel()
			for _, v := range s.vols {
				v.lock.Close()
			}
			return nil, fmt.Errorf("open container store: %w", err)
		}
	}
	for _, c := range rescan {
		s.startScan(c)
	}
	return s, nil
}

// load registers the containers of v and appends those that need a scan
// to rescan.
func (s *Store) load(v *volume, rescan []*container) ([]*container, error) {
	des, err := os.ReadDir(v.dir)
	if err != nil {
		return rescan, err
	}
	for _, de := range des {
		id, ok := isContainerName(de.Name())
		if !ok || !de.IsDir() {
			continue
		}
		if other := s.containers[id]; other != nil {
			return rescan, fmt.Errorf("container %d is in both %s and %s", id, other.vol.dir, v.dir)
		}
		c := &container{id: id, vol: v, dir: v.path(de.Name()), fault: s.opts.writeFault}
		d, err := readDescriptor(c.dir)
		if err == nil && d.ID != id {
			err = fmt.Errorf("descriptor names container %d", d.ID)
		}
		if err != nil {
			// Keep it listed, so an operator sees it and can delete it; it
			// is never served nor exported as anything but UNHEALTHY.
			c.setDesc(Descriptor{LayoutVersion: layoutVersion, ID: id, State: Unhealthy, ChecksumType: ChecksumType,
				Replication: s.opts.Replication, Reason: fmt.Sprintf("descriptor: %v", err)})
		} else {
			c.setDesc(d)
		}
		switch c.state() {
		case Deleted:
			if err := s.remove(c); err != nil {
				return rescan, err
			}
			continue
		case Open, Closing:
			reason, err := c.recoverOpen(Closing, s.sync)
			if err != nil {
				return rescan, fmt.Errorf("recover container %d: %w", id, err)
			}
			if reason != "" {
				if _, err := c.markUnhealthy(reason, s.sync); err != nil {
					return rescan, err
				}
			} else {
				rescan = append(rescan, c)
			}
		case Recovering:
			rescan = append(rescan, c)
		case Closed:
			recs, _, err := readIndex(filepath.Join(c.dir, dbName))
			if err != nil {
				if _, err := c.markUnhealthy(err.Error(), s.sync); err != nil {
					return rescan, err
				}
			} else {
				s.index(c, recs)
			}
		}
		s.containers[id] = c
		c.size = dirSize(c.dir)
		v.used += c.size
		v.n++
	}
	return rescan, nil
}

// Close closes the open container (so it need not be recovered next
// time), stops background scans (they resume after the next OpenStore),
// cancels imports in flight and waits for them (an import blocked reading
// its stream ends when the caller closes it), and releases the volumes.
// Calls after the first return nil.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()

	s.putMu.Lock()
	if s.idle != nil {
		s.idle.Stop()
	}
	var err error
	for _, c := range s.sortedOpen() {
		if _, ferr := c.finish(s.sync); ferr != nil && err == nil {
			err = fmt.Errorf("close container %d: %w", c.id, ferr)
		}
		c.closeFiles()
		delete(s.open, c.desc.Load().Replication)
	}
	s.putMu.Unlock()

	s.cancel()
	s.wg.Wait()
	for _, v := range s.vols {
		if cerr := v.lock.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}
	if err != nil {
		return fmt.Errorf("close container store: %w", err)
	}
	return nil
}

// Put stores r's bytes as one block in the open container of the
// Store's replication config (Options.Replication); see PutReplication.
func (s *Store) Put(r io.Reader) (uint64, BlockID, error) {
	return s.PutReplication(r, "")
}

// PutReplication stores r's bytes as one block in the open container of
// replication ("" means Options.Replication), creating one (on the volume
// with the most free space) if there is none: each replication config has
// its own open container, which carries it in its descriptor. If that
// container already holds the same bytes they are stored once. When the
// container's data reaches Options.ContainerSize it is closed before Put
// returns, and the next Put opens a new one; a container so exceeds the
// size by at most one block.
//
// When Put returns the block is readable (OpenBlock) and survives the
// process being killed; it survives a power loss only once its container
// is closed (CloseContainer, the size limit, IdleClose or Store.Close):
// Put does not fsync. A container left OPEN by a crash is recovered by the
// next OpenStore (cut back to its index, scanned, then CLOSED or
// UNHEALTHY). Errors: ValidateReplication's, ErrClosed, the volume's.
func (s *Store) PutReplication(r io.Reader, replication string) (uint64, BlockID, error) {
	if replication == "" {
		replication = s.opts.Replication
	}
	if err := ValidateReplication(replication); err != nil {
		return 0, BlockID{}, fmt.Errorf("put: %w", err)
	}
	s.putMu.Lock()
	defer s.putMu.Unlock()
	if s.isClosed() {
		return 0, BlockID{}, fmt.Errorf("put: %w", ErrClosed)
	}
	c := s.open[replication]
	if c == nil {
		var err error
		if c, err = s.create(replication); err != nil {
			return 0, BlockID{}, fmt.Errorf("put: new container: %w", err)
		}
		s.open[replication] = c
	}
	if s.putBuf == nil {
		s.putBuf = make([]byte, copyBufSize)
	}
	b, fresh, err := c.put(r, s.putBuf, s.opts.ChunkSize, s.sync)
	if err != nil {
		return 0, BlockID{}, fmt.Errorf("put into container %d: %w", c.id, err)
	}
	c.lastPut = time.Now()
	if fresh {
		s.mu.Lock()
		s.blocks[b.Sum] = append(s.blocks[b.Sum], loc{size: b.Size, c: c, chunk: c.chunkN, off: c.chunkOff - b.Size})
		c.size += b.Size
		c.vol.used += b.Size
		s.mu.Unlock()
	}
	if c.desc.Load().Bytes >= s.opts.ContainerSize {
		if err := s.finishOpen(c); err != nil {
			return c.id, b, fmt.Errorf("put: close full container %d: %w", c.id, err)
		}
	} else if s.opts.IdleClose > 0 && !s.idleArmed {
		s.armIdle(s.opts.IdleClose)
	}
	return c.id, b, nil
}

// armIdle makes the idle timer fire after d. putMu is held.
func (s *Store) armIdle(d time.Duration) {
	if s.idle == nil {
		s.idle = time.AfterFunc(d, s.idleClose)
	} else {
		s.idle.Reset(d)
	}
	s.idleArmed = true
}

// sortedOpen returns the open containers by id, so closing them all goes
// in one order. putMu is held.
func (s *Store) sortedOpen() []*container {
	out := make([]*container, 0, len(s.open))
	for _, c := range s.open {
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b *container) int { return cmp.Compare(a.id, b.id) })
	return out
}

// create makes a new open container of replication on the volume with
// the most free space. Put reserves nothing: a full volume fails the Put
// with ENOSPC.
func (s *Store) create(replication string) (*container, error) {
	s.mu.Lock()
	v, _, err := s.choose(0)
	var id uint64
	for id == 0 || s.containers[id] != nil || s.importing[id] {
		id = rand.Uint64()
	}
	s.importing[id] = true // keeps an Import of the same id out meanwhile
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.importing, id)
		s.mu.Unlock()
	}()
	if err != nil {
		return nil, err
	}
	c, err := create(v, id, replication, &s.opts, s.sync)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.containers[id] = c
	c.indexed = true
	c.size = dirSize(c.dir)
	v.used += c.size
	v.n++
	s.mu.Unlock()
	return c, nil
}

// finishOpen closes c, an open container. putMu is held.
func (s *Store) finishOpen(c *container) error {
	delete(s.open, c.desc.Load().Replication)
	_, err := c.finish(s.sync)
	c.closeFiles()
	s.resize(c) // the index and checksum file grew too
	return err
}

// finishInterrupted finishes a close of c that failed part-way, from its
// index: this process wrote the data, so it becomes CLOSED as a close
// would have made it, or UNHEALTHY if the index or the chunk files no
// longer allow that. putMu is held.
func (s *Store) finishInterrupted(c *container) error {
	reason, err := c.recoverOpen(Closed, s.sync)
	s.resize(c)
	if err != nil {
		return err
	}
	if reason != "" {
		if _, err := s.condemn(c, reason); err != nil {
			return err
		}
		return fmt.Errorf("%s: %w", reason, ErrCorrupt)
	}
	return nil
}

// condemn records c UNHEALTHY for reason and stops serving its blocks.
func (s *Store) condemn(c *container, reason string) (Descriptor, error) {
	d, err := c.markUnhealthy(reason, s.sync)
	if err != nil {
		return d, err
	}
	s.mu.Lock()
	if s.containers[c.id] == c {
		s.unindex(c)
	}
	s.mu.Unlock()
	return d, nil
}

// resize recounts what c takes on its volume.
func (s *Store) resize(c *container) {
	size := dirSize(c.dir)
	s.mu.Lock()
	c.vol.used += size - c.size
	c.size = size
	s.mu.Unlock()
}

// idleClose is IdleClose's timer: it closes every open container no Put
// came to for IdleClose, and arms itself again for the next one due.
func (s *Store) idleClose() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()
	s.putMu.Lock()
	defer s.putMu.Unlock()
	s.idleArmed = false
	var next time.Duration
	for _, c := range s.sortedOpen() {
		if left := s.opts.IdleClose - time.Since(c.lastPut); left > 0 {
			if next == 0 || left < next {
				next = left
			}
			continue
		}
		if err := s.finishOpen(c); err != nil {
			// Nobody to return it to: the container stays CLOSING, which
			// List shows; CloseContainer, Verify or the next OpenStore
			// finish it.
			d := *c.desc.Load()
			d.Reason = fmt.Sprintf("idle close: %v", err)
			c.setDesc(d)
		}
	}
	if next > 0 && !s.isClosed() {
		s.armIdle(next)
	}
}

// CloseContainer closes the open container id: CLOSING, then everything
// fsynced, the checksum file written and the descriptor rewritten CLOSED,
// durably. Closing a CLOSED container returns its descriptor. A close
// that failed part-way (a full volume) leaves the container CLOSING and
// its blocks served; CloseContainer again finishes it from its index.
// Errors: ErrNotFound, ErrNotOpen (RECOVERING, UNHEALTHY, or CLOSING after
// a restart, until its scan ends), ErrCorrupt (the interrupted close's
// index or chunk files are damaged: now UNHEALTHY), ErrClosed, or the I/O
// error that left it CLOSING.
func (s *Store) CloseContainer(id uint64) (Descriptor, error) {
	s.putMu.Lock()
	defer s.putMu.Unlock()
	c, err := s.get(id)
	if err != nil {
		return Descriptor{}, fmt.Errorf("close container %d: %w", id, err)
	}
	d := *c.desc.Load()
	switch {
	case d.State == Closed:
		return d, nil
	case d.State == Open && c == s.open[d.Replication]:
		err = s.finishOpen(c)
	case d.State == Closing && c.closeInterrupted():
		err = s.finishInterrupted(c)
	default:
		return d, fmt.Errorf("close container %d: state %s: %w", id, d.State, ErrNotOpen)
	}
	if err != nil {
		return *c.desc.Load(), fmt.Errorf("close container %d: %w", id, err)
	}
	return *c.desc.Load(), nil
}

// List returns every container's descriptor, by id.
func (s *Store) List() []Descriptor {
	s.mu.Lock()
	out := make([]Descriptor, 0, len(s.containers))
	for _, c := range s.containers {
		out = append(out, *c.desc.Load())
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b Descriptor) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	return out
}

// Descriptor returns container id's descriptor, or ErrNotFound.
func (s *Store) Descriptor(id uint64) (Descriptor, error) {
	c, err := s.get(id)
	if err != nil {
		return Descriptor{}, fmt.Errorf("container %d: %w", id, err)
	}
	return *c.desc.Load(), nil
}

// get returns container id, or ErrNotFound.
func (s *Store) get(id uint64) (*container, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	if c := s.containers[id]; c != nil {
		return c, nil
	}
	return nil, ErrNotFound
}

func (s *Store) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// OpenBlock opens block b (b.Size -1: any size with that sum) from a
// container on this node that serves it (OPEN, CLOSING or CLOSED — not
// RECOVERING until its scan passes, never UNHEALTHY) and returns it with
// its size. The reader checks the bytes against b's sum as they go: a
// block corrupted on disk ends in ErrCorrupt instead of io.EOF. Errors:
// ErrBlockNotFound, ErrClosed.
func (s *Store) OpenBlock(b BlockID) (io.ReadCloser, int64, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, 0, fmt.Errorf("open block %s: %w", b, ErrClosed)
	}
	var cands []loc
	for _, l := range s.blocks[b.Sum] {
		if b.Size < 0 || l.size == b.Size {
			cands = append(cands, l)
		}
	}
	s.mu.Unlock()
	// Prefer CLOSED copies: their data is fsynced and was scanned.
	slices.SortStableFunc(cands, func(x, y loc) int {
		xc, yc := x.c.state() == Closed, y.c.state() == Closed
		switch {
		case xc && !yc:
			return -1
		case yc && !xc:
			return 1
		}
		return 0
	})
	for _, l := range cands {
		f, err := os.Open(filepath.Join(l.c.dir, chunkName(l.chunk)))
		if err != nil {
			continue // deleted meanwhile: try the next holder
		}
		id := BlockID{Sum: b.Sum, Size: l.size}
		return &blockReader{f: f, r: io.NewSectionReader(f, l.off, l.size), h: checksum.New(), id: id}, l.size, nil
	}
	return nil, 0, fmt.Errorf("open block %s: %w", b, ErrBlockNotFound)
}

// blockReader reads one block and checks its sum at the end.
type blockReader struct {
	f  *os.File
	r  *io.SectionReader
	h  *checksum.Digest
	id BlockID
}

func (br *blockReader) Read(p []byte) (int, error) {
	n, err := br.r.Read(p)
	br.h.Write(p[:n])
	if err == io.EOF && br.h.Sum64() != br.id.Sum {
		return n, fmt.Errorf("read block %s: xxh64 %s: %w", br.id, checksum.Format(br.h.Sum64()), ErrCorrupt)
	}
	return n, err
}

func (br *blockReader) Close() error { return br.f.Close() }

// Delete removes container id and its files: it leaves the volume at once
// (renamed into the volume's tmp, then removed), after any scan of it is
// stopped and any Export of it has ended. Errors: ErrNotFound,
// ErrImporting, ErrClosed.
func (s *Store) Delete(id uint64) error {
	if err := s.delete(id); err != nil {
		return fmt.Errorf("delete container %d: %w", id, err)
	}
	return nil
}

func (s *Store) delete(id uint64) error {
	c, err := s.get(id)
	if err != nil {
		s.mu.Lock()
		importing := s.importing[id]
		s.mu.Unlock()
		if importing {
			return ErrImporting
		}
		return err
	}
	// Only Put and CloseContainer move a container out of OPEN, both under
	// putMu, so one seen not OPEN stays so.
	if c.state() == Open {
		s.putMu.Lock()
		defer s.putMu.Unlock()
		if r := c.desc.Load().Replication; s.open[r] == c {
			c.closeFiles()
			delete(s.open, r)
		}
	}
	if !s.forget(c) {
		return ErrNotFound // a concurrent Delete won
	}
	c.rw.Lock()
	defer c.rw.Unlock()
	return s.remove(c)
}

// forget takes c out of the Store (list, block index, volume usage) and
// stops any scan of it; false if it was no longer there.
func (s *Store) forget(c *container) bool {
	s.mu.Lock()
	if s.containers[c.id] != c {
		s.mu.Unlock()
		return false
	}
	delete(s.containers, c.id)
	s.unindex(c)
	c.vol.used -= c.size
	c.vol.n--
	job := s.scans[c.id]
	s.mu.Unlock()
	if job != nil {
		job.cancel()
		<-job.done
	}
	return true
}

// Prune forgets the containers, OPEN ones aside, whose directory is gone
// from their volume (removed behind the Store's back), so that List stops
// claiming them, and returns their ids in order. It costs a stat per
// container; the cluster agent calls it before each full report.
func (s *Store) Prune() []uint64 {
	s.mu.Lock()
	cs := make([]*container, 0, len(s.containers))
	for _, c := range s.containers {
		cs = append(cs, c)
	}
	s.mu.Unlock()
	var gone []uint64
	for _, c := range cs {
		// An OPEN container's writer holds its files; its next Put fails.
		if c.state() == Open {
			continue
		}
		if _, err := os.Lstat(c.dir); !errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if s.forget(c) {
			gone = append(gone, c.id)
		}
	}
	slices.Sort(gone)
	return gone
}

// remove takes c's directory off its volume: a rename into tmp, which is
// atomic and which OpenStore finishes if we die during the RemoveAll.
func (s *Store) remove(c *container) error {
	gone, err := os.MkdirTemp(c.vol.path(deleteDir), fmt.Sprintf("%d-", c.id))
	if err != nil {
		return err
	}
	if err := os.Rename(c.dir, filepath.Join(gone, "c")); err != nil {
		os.Remove(gone)
		return err
	}
	if s.sync {
		if err := durable.SyncDir(c.vol.dir); err != nil {
			return err
		}
	}
	return os.RemoveAll(gone)
}

// Volumes describes the Store's volumes, in the order OpenStore got them.
func (s *Store) Volumes() []VolumeInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]VolumeInfo, len(s.vols))
	for i, v := range s.vols {
		out[i] = VolumeInfo{Path: v.dir, Used: v.used, Reserved: v.reserved, Containers: v.n}
		out[i].Capacity, out[i].Free, _ = s.opts.Statfs(v.dir)
	}
	return out
}

// choose returns the volume with the most free space (statfs free minus
// reservations) that has at least need bytes of it, and that space. s.mu
// is held.
func (s *Store) choose(need int64) (*volume, int64, error) {
	var best *volume
	bestAvail, seen := int64(-1), int64(-1)
	var firstErr error
	for _, v := range s.vols {
		_, free, err := s.opts.Statfs(v.dir)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		avail := free - v.reserved
		seen = max(seen, avail)
		if avail >= need && avail > bestAvail {
			best, bestAvail = v, avail
		}
	}
	if best == nil {
		if seen < 0 && firstErr != nil {
			return nil, 0, firstErr
		}
		return nil, 0, fmt.Errorf("need %d bytes, the roomiest volume has %d: %w", need, max(seen, 0), ErrNoSpace)
	}
	return best, bestAvail, nil
}

// reserve sets n more bytes of v aside, if v has them beyond what is
// reserved already. s.mu is held.
func (s *Store) reserve(v *volume, n int64) error {
	_, free, err := s.opts.Statfs(v.dir)
	if err != nil {
		return err
	}
	if free-v.reserved < n {
		return fmt.Errorf("%d more bytes needed, volume %s has %d: %w", n, v.dir, free-v.reserved, ErrNoSpace)
	}
	v.reserved += n
	return nil
}

// index adds c's blocks to the lookup map. s.mu is held. An EC index
// replica's chunk file holds cells, not its blocks: it serves none.
func (s *Store) index(c *container, recs []record) {
	if c.desc.Load().ReplicaIndex > 0 {
		return
	}
	for _, r := range recs {
		s.blocks[r.id.Sum] = append(s.blocks[r.id.Sum], loc{size: r.id.Size, c: c, chunk: r.chunk, off: r.off})
	}
	c.indexed = true
}

// unindex removes c's blocks from the lookup map: a walk of the whole map,
// which only Delete and a container turning UNHEALTHY pay. s.mu is held.
func (s *Store) unindex(c *container) {
	if !c.indexed {
		return
	}
	for sum, ls := range s.blocks {
		kept := slices.DeleteFunc(ls, func(l loc) bool { return l.c == c })
		if len(kept) == 0 {
			delete(s.blocks, sum)
		} else {
			s.blocks[sum] = kept
		}
	}
	c.indexed = false
}
