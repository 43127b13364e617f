package container

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cmfs-project/cmfs/internal/checksum"
	"github.com/cmfs-project/cmfs/internal/durable"
	bolt "go.etcd.io/bbolt"
)

// container is one container directory a Store holds.
type container struct {
	id  uint64
	vol *volume
	dir string
	// fault is Options.writeFault.
	fault func(name string) error

	// desc is the current descriptor, replaced whole (never mutated) so
	// List and Descriptor read it without waiting for a rewrite's fsync.
	desc atomic.Pointer[Descriptor]
	// mu serialises rewrites of container.yaml.
	mu sync.Mutex
	// interrupted, guarded by mu, says a close in this process failed
	// part-way (a full volume): the descriptor in memory says CLOSING, the
	// files on disk are anywhere between OPEN and CLOSED, and the
	// descriptor's sizes and checksums are not final. recoverOpen makes
	// them agree with the index again before anything trusts them.
	interrupted bool
	// rw is held shared while the files are read (Export, a scan) and
	// exclusively by Delete, which removes them.
	rw sync.RWMutex

	// The writer's state while the container is OPEN, guarded by
	// Store.putMu.
	db       *bolt.DB
	chunk    *os.File // the chunk file blocks are appended to
	chunkN   int      // its number
	chunkOff int64    // its length
	lastPut  time.Time

	// ecx is an EC index replica's layout, table and blocks, read from its
	// container.db when first needed (see Store.ecIndexOf).
	ecx atomic.Pointer[ecIndex]

	// Guarded by Store.mu: indexed says the container's blocks are in
	// Store.blocks; size is what it counts for in its volume's used bytes.
	indexed bool
	size    int64
}

func (c *container) state() State { return c.desc.Load().State }

// setDesc publishes a new descriptor (a copy of d).
func (c *container) setDesc(d Descriptor) { c.desc.Store(&d) }

// create makes a new OPEN container with id on v: built in tmp/container-new
// and renamed into place, so a crash leaves either nothing or a container
// with a valid descriptor and an empty index.
func create(v *volume, id uint64, replication string, opts *Options, sync bool) (c *container, err error) {
	tmp, err := os.MkdirTemp(v.path(newDir), fmt.Sprintf("%d-", id))
	if err != nil {
		return nil, err
	}
	var db *bolt.DB
	defer func() {
		if err != nil {
			if db != nil {
				db.Close()
			}
			os.RemoveAll(tmp)
		}
	}()
	for _, d := range []string{metadataDir, chunksDir} {
		if err := os.Mkdir(filepath.Join(tmp, d), 0o755); err != nil {
			return nil, err
		}
	}
	if db, err = openIndex(tmp); err != nil {
		return nil, err
	}
	d := Descriptor{
		LayoutVersion: layoutVersion,
		ID:            id,
		State:         Open,
		ChecksumType:  ChecksumType,
		Replication:   replication,
		MaxSize:       opts.ContainerSize,
		Created:       time.Now().UTC().Truncate(time.Second),
	}
	if sync {
		if err := durable.SyncDir(filepath.Join(tmp, metadataDir)); err != nil {
			return nil, err
		}
	}
	// writeDescriptor fsyncs tmp, which holds the names of metadata/ and
	// chunks/ too.
	if err := writeDescriptor(tmp, &d, sync); err != nil {
		return nil, err
	}
	dir := v.path(fmt.Sprint(id))
	if err := durable.RenameNoReplace(tmp, dir); err != nil {
		return nil, err
	}
	if sync {
		if err := durable.SyncDir(v.dir); err != nil {
			return nil, err
		}
	}
	c = &container{id: id, vol: v, dir: dir, db: db, fault: opts.writeFault}
	c.setDesc(d)
	return c, nil
}

// put appends r's bytes to the container as one block. It returns the
// block and whether it is new here (false: the container already held
// the same bytes, and the copy just written was cut off again). On error
// the chunk file is cut back to where it was.
func (c *container) put(r io.Reader, buf []byte, chunkSize int64, sync bool) (BlockID, bool, error) {
	if c.chunk == nil || c.chunkOff >= chunkSize {
		if err := c.roll(sync); err != nil {
			return BlockID{}, false, err
		}
	}
	start := c.chunkOff
	h := checksum.New()
	n, err := copyBlock(io.NewOffsetWriter(c.chunk, start), h, r, buf)
	if err != nil {
		return BlockID{}, false, c.cutBack(start, err)
	}
	rec := record{id: BlockID{Sum: h.Sum64(), Size: n}, chunk: c.chunkN, off: start}
	fresh := false
	err = c.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(blocksBucket)
		if b.Get(rec.key()) != nil {
			return nil
		}
		fresh = true
		return b.Put(rec.key(), rec.value())
	})
	if err != nil {
		return BlockID{}, false, c.cutBack(start, fmt.Errorf("index block: %w", err))
	}
	if !fresh {
		if err := c.cutBack(start, nil); err != nil {
			return BlockID{}, false, err
		}
		return rec.id, false, nil
	}
	c.chunkOff += n
	d := *c.desc.Load()
	d.Bytes += n
	d.Blocks++
	c.setDesc(d)
	return rec.id, true, nil
}

// copyBlock copies r to w and h through buf, filling buf before each
// write so a reader of small pieces still makes large writes. r's errors
// come back as "read block: …", w's as they are (they name the file).
func copyBlock(w io.Writer, h *checksum.Digest, r io.Reader, buf []byte) (int64, error) {
	var n int64
	for {
		m, err := io.ReadFull(r, buf)
		if m > 0 {
			h.Write(buf[:m])
			if _, werr := w.Write(buf[:m]); werr != nil {
				return n, werr
			}
			n += int64(m)
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return n, nil
		}
		if err != nil {
			return n, fmt.Errorf("read block: %w", err)
		}
	}
}

// cutBack truncates the current chunk file to off, dropping what a failed
// or duplicate Put appended; it returns cause, or the truncate's error.
func (c *container) cutBack(off int64, cause error) error {
	if err := c.chunk.Truncate(off); err != nil {
		// The index does not reference the tail, so it is only wasted
		// space; recovery trims it after a restart.
		if cause == nil {
			return fmt.Errorf("truncate %s: %w", c.chunk.Name(), err)
		}
	}
	return cause
}

// roll starts the next chunk file, fsyncing the one before it so Close
// has less left to sync.
func (c *container) roll(sync bool) error {
	if c.chunk != nil {
		if sync {
			if err := c.chunk.Sync(); err != nil {
				return fmt.Errorf("fsync %s: %w", c.chunk.Name(), err)
			}
		}
		if err := c.chunk.Close(); err != nil {
			return err
		}
		c.chunk = nil
	}
	d := *c.desc.Load()
	f, err := os.OpenFile(filepath.Join(c.dir, chunkName(d.Chunks)), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	c.chunk, c.chunkN, c.chunkOff = f, d.Chunks, 0
	d.Chunks++
	c.setDesc(d)
	return nil
}

// closeFiles releases the writer's files without finishing the container.
func (c *container) closeFiles() {
	if c.chunk != nil {
		c.chunk.Close()
		c.chunk = nil
	}
	if c.db != nil {
		c.db.Close()
		c.db = nil
	}
}

// finish closes an OPEN container: CLOSING durably, chunk data and index
// fsynced, the checksum file written, then the descriptor with every size
// and checksum and state CLOSED, durably. A crash anywhere in between
// leaves it OPEN or CLOSING, which OpenStore recovers; an error leaves it
// CLOSING and interrupted, which CloseContainer or Verify finish (Store's
// finishOpen closes the files either way).
func (c *container) finish(sync bool) (Descriptor, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d, err := c.finishLocked(sync)
	if err != nil {
		// No Put comes any more, whichever step failed.
		cur := *c.desc.Load()
		cur.State = Closing
		c.setDesc(cur)
		c.interrupted = true
	}
	return d, err
}

func (c *container) finishLocked(sync bool) (Descriptor, error) {
	d := *c.desc.Load()
	d.State = Closing
	if err := c.writeDesc(&d, sync); err != nil {
		return d, err
	}
	c.setDesc(d)
	if c.chunk != nil {
		if sync {
			if err := c.chunk.Sync(); err != nil {
				return d, fmt.Errorf("fsync %s: %w", c.chunk.Name(), err)
			}
		}
		if err := c.chunk.Close(); err != nil {
			return d, err
		}
		c.chunk = nil
	}
	sum, err := indexChecksum(c.db)
	if err != nil {
		return d, fmt.Errorf("index checksum: %w", err)
	}
	if sync {
		if err := c.db.Sync(); err != nil {
			return d, fmt.Errorf("fsync index: %w", err)
		}
	}
	if err := c.db.Close(); err != nil {
		return d, err
	}
	c.db = nil
	return c.seal(d, sum, Closed, sync)
}

// closeInterrupted says whether a close of c failed part-way.
func (c *container) closeInterrupted() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.interrupted
}

// seal writes the checksum file and the descriptor with the metadata's
// size and checksum and the given state. c.mu is held.
func (c *container) seal(d Descriptor, sum uint64, state State, sync bool) (Descriptor, error) {
	d.ContainerChecksum = checksum.Format(sum)
	if err := c.writeMeta(checksumName, []byte(d.ContainerChecksum+"\n"), sync); err != nil {
		return d, err
	}
	n, msum, err := fileChecksum(filepath.Join(c.dir, dbName))
	if err != nil {
		return d, fmt.Errorf("checksum index file: %w", err)
	}
	d.MetadataBytes, d.MetadataChecksum = n, checksum.Format(msum)
	if sync {
		if err := durable.SyncDir(filepath.Join(c.dir, chunksDir)); err != nil {
			return d, err
		}
	}
	d.State = state
	if err := c.writeDesc(&d, sync); err != nil {
		return d, err
	}
	c.setDesc(d)
	return d, nil
}

// recoverOpen turns a container whose close did not finish (its process
// died while it was OPEN or CLOSING, or a close in this process failed
// part-way) into one in state whose descriptor, checksum file and chunk
// files agree with its index: CLOSING, ready for the scan that decides
// CLOSED or UNHEALTHY, or CLOSED straight away when this process wrote
// the data (a retried close). Bytes an interrupted Put appended past the
// last indexed block are cut off, and the chunk files and the index are
// fsynced (the close that failed may not have). A problem that makes all
// that impossible is returned as a reason for UNHEALTHY; an I/O error
// (a volume still full) leaves everything as it was, to be tried again.
func (c *container) recoverOpen(state State, sync bool) (reason string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	recs, sum, err := readIndex(filepath.Join(c.dir, dbName))
	if err != nil {
		return err.Error(), nil
	}
	names, err := chunkFiles(c.dir)
	if err != nil {
		return err.Error(), nil
	}
	extent := make([]int64, len(names))
	d := *c.desc.Load()
	d.Bytes, d.Blocks, d.Reason = 0, int64(len(recs)), ""
	for _, r := range recs {
		if r.chunk >= len(names) {
			return fmt.Sprintf("block %s in missing %s", r.id, chunkName(r.chunk)), nil
		}
		extent[r.chunk] = max(extent[r.chunk], r.off+r.id.Size)
		d.Bytes += r.id.Size
	}
	for n := range names {
		if err := truncateTo(filepath.Join(c.dir, chunkName(n)), extent[n], sync); err != nil {
			return "", err
		}
	}
	d.Chunks = len(names)
	for d.Chunks > 0 && extent[d.Chunks-1] == 0 {
		d.Chunks--
		if err := os.Remove(filepath.Join(c.dir, chunkName(d.Chunks))); err != nil {
			return "", err
		}
	}
	if sync {
		for n := 0; n < d.Chunks; n++ {
			if err := durable.SyncFile(filepath.Join(c.dir, chunkName(n))); err != nil {
				return "", err
			}
		}
		if err := durable.SyncFile(filepath.Join(c.dir, dbName)); err != nil {
			return "", err
		}
	}
	if _, err := c.seal(d, sum, state, sync); err != nil {
		return "", err
	}
	c.interrupted = false
	return "", nil
}

// truncateTo cuts the file at path to n bytes if it is longer.
func truncateTo(path string, n int64, sync bool) error {
	fi, err := os.Stat(path)
	if err != nil || fi.Size() <= n {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	err = f.Truncate(n)
	if err == nil && sync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// chunkFiles returns how many chunk files dir/chunks holds, checking they
// are exactly 0.data … <n-1>.data and regular files.
func chunkFiles(dir string) ([]string, error) {
	des, err := os.ReadDir(filepath.Join(dir, chunksDir))
	if err != nil {
		return nil, err
	}
	names := make([]string, len(des))
	for _, de := range des {
		n, ok := parseChunkName(chunksDir + "/" + de.Name())
		if !ok || n >= len(des) || !de.Type().IsRegular() || names[n] != "" {
			return nil, fmt.Errorf("unexpected %s/%s", chunksDir, de.Name())
		}
		names[n] = de.Name()
	}
	return names, nil
}

// markUnhealthy records reason and state UNHEALTHY in the descriptor.
func (c *container) markUnhealthy(reason string, sync bool) (Descriptor, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := *c.desc.Load()
	d.State, d.Reason = Unhealthy, reason
	if err := c.writeDesc(&d, sync); err != nil {
		return d, err
	}
	c.setDesc(d)
	return d, nil
}

// writeDesc replaces c's container.yaml with d (see writeDescriptor).
func (c *container) writeDesc(d *Descriptor, sync bool) error {
	if c.fault != nil {
		if err := c.fault(descriptorName); err != nil {
			return fmt.Errorf("write %s: %w", filepath.Join(c.dir, descriptorName), err)
		}
	}
	return writeDescriptor(c.dir, d, sync)
}

// writeMeta replaces c's file name with data.
func (c *container) writeMeta(name string, data []byte, sync bool) error {
	if c.fault != nil {
		if err := c.fault(name); err != nil {
			return fmt.Errorf("write %s: %w", filepath.Join(c.dir, name), err)
		}
	}
	return writeFile(filepath.Join(c.dir, name), data, sync)
}

// writeFile replaces path with data: durably, or (tests) just atomically.
func writeFile(path string, data []byte, sync bool) error {
	if sync {
		return durable.WriteFile(path, data, 0o644)
	}
	err := durable.Write(filepath.Dir(path), 0o644, false,
		func(f *os.File) error { _, err := f.Write(data); return err },
		func(tmp string) (string, error) { return path, os.Rename(tmp, path) })
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// readAllLimit reads r to its end, or n bytes.
func readAllLimit(r io.Reader, n int64) ([]byte, error) {
	return io.ReadAll(io.LimitReader(r, n))
}

// isContainerName says whether a volume entry's name is a container id:
// canonical decimal, non-zero.
func isContainerName(name string) (uint64, bool) {
	if name == "" || name[0] == '0' || len(name) > 20 || strings.Trim(name, "0123456789") != "" {
		return 0, false
	}
	var id uint64
	for i := 0; i < len(name); i++ {
		d := uint64(name[i] - '0')
		if id > (^uint64(0)-d)/10 {
			return 0, false
		}
		id = id*10 + d
	}
	return id, true
}
