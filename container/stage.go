package container

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/cmfs-project/cmfs/ec"
	"github.com/cmfs-project/cmfs/internal/checksum"
	"github.com/cmfs-project/cmfs/internal/durable"
	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"
)

// Staged is EC index replicas of one container, built by Encode or
// Reconstruct under a volume's tmp/ec-stage/<id>-<random>/<index>/ (each
// a container directory, CLOSED, every file fsynced), to be exported to
// the nodes that will hold them or adopted by this Store. Close removes
// what was not adopted. A Staged is safe for concurrent use.
type Staged struct {
	s   *Store
	id  uint64
	v   *volume
	dir string

	// mu is held shared by Export and exclusively by Adopt and Close.
	mu      sync.RWMutex
	indexes []int
	descs   map[int]Descriptor
	sizes   map[int]int64 // what each index takes on the volume
	adopted map[int]bool
	closed  bool
	// res is what the Staged holds reserved on v (Store.mu).
	res int64
}

// dbStaged is the container.db being built, in the staging directory,
// before each index gets its copy.
const dbStaged = "container.db"

// ReconstructSpec says what Reconstruct rebuilds and from what.
type ReconstructSpec struct {
	// ID is the container's.
	ID uint64
	// Descriptor is a CLOSED index replica's of the container (a source's).
	Descriptor Descriptor
	// Meta is that replica's metadata/container.db (OpenMeta on its node):
	// Descriptor's metadataBytes and metadataChecksum are checked on it,
	// and its "blocks" against containerChecksum, before anything trusts
	// it. Every index has the same, so it becomes the new indexes' own.
	Meta io.Reader
	// Src reads the cells of the indexes in Avail, in that order of
	// preference (see ec.Reconstruct).
	Src   ec.CellSource
	Avail []int
	// Indexes are those to build: 1 … D+P, none in Avail.
	Indexes []int
}

// Encode stripes container id, a CLOSED whole EC container (replica
// index 0, replication ec:rs-D-P-CELLk), into its D+P index replicas,
// staged on its own volume: its chunk files are read once, in order, a
// batch of stripes at a time (ec.Encode), and every block's xxh64 is
// checked as it passes, so a container that rotted since its scan is not
// encoded. Space for the indexes is reserved on the volume until they
// are adopted or the Staged is closed. On error nothing is left. Errors:
// ErrNotFound, ErrNotEC, ErrNotClosed, ErrNoSpace, ErrCorrupt, ErrClosed,
// ctx's, the volume's.
func (s *Store) Encode(ctx context.Context, id uint64) (*Staged, error) {
	st, err := s.encode(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("encode container %d: %w", id, err)
	}
	return st, nil
}

func (s *Store) encode(ctx context.Context, id uint64) (*Staged, error) {
	c, err := s.get(id)
	if err != nil {
		return nil, err
	}
	c.rw.RLock()
	defer c.rw.RUnlock()
	if _, err := s.get(id); err != nil {
		return nil, err // deleted while we waited
	}
	d := *c.desc.Load()
	switch {
	case d.ReplicaIndex != 0:
		return nil, fmt.Errorf("replica index %d: %w", d.ReplicaIndex, ErrNotEC)
	case d.State != Closed:
		return nil, fmt.Errorf("state %s: %w", d.State, ErrNotClosed)
	}
	sc, err := ec.ParseScheme(d.Replication)
	if err != nil {
		return nil, fmt.Errorf("%v: %w", err, ErrNotEC)
	}
	recs, sum, err := readIndex(filepath.Join(c.dir, dbName))
	if err != nil {
		return nil, err
	}
	if got := checksum.Format(sum); got != d.ContainerChecksum {
		return nil, fmt.Errorf("container checksum %s, descriptor says %s: %w", got, d.ContainerChecksum, ErrCorrupt)
	}
	stream, err := newChunkStream(ctx, c.dir, d, recs)
	if err != nil {
		return nil, err
	}
	defer stream.close()
	x := &ecIndex{layout: ec.Layout{Scheme: sc, Size: d.Bytes}, chunks: stream.sizes}
	all := indexesOf(sc)
	return s.stage(ctx, c.vol, id, stageSize(x.layout, all, d.MetadataBytes), func(ctx context.Context, st *Staged) error {
		stream.ctx = ctx
		files, err := st.create(all)
		if err != nil {
			return err
		}
		defer closeAll(files) // finish closes them; this is for the errors before
		ws := make([]io.Writer, len(files))
		for k, f := range files {
			ws[k] = f
		}
		if x.table, err = ec.Encode(x.layout, stream, ws); err != nil {
			return err
		}
		// What is left is empty: the checks of the last chunks' blocks.
		if _, err := io.Copy(io.Discard, stream); err != nil {
			return err
		}
		if err := writeECDB(filepath.Join(st.dir, dbStaged), recs, x, s.sync); err != nil {
			return err
		}
		return st.finish(all, files, x, d)
	})
}

// indexesOf returns 1 … D+P.
func indexesOf(sc ec.Scheme) []int {
	out := make([]int, sc.Total())
	for k := range out {
		out[k] = k + 1
	}
	return out
}

// stageSize is what staging indexes of l takes, about, with a
// container.db of meta bytes: each index's cells and its copy of the
// metadata (which the cell table makes larger than the whole
// container's), and the one being built.
func stageSize(l ec.Layout, indexes []int, meta int64) int64 {
	meta += 8*l.Stripes()*int64(l.Total()) + importSlack(meta)
	n := meta
	for _, i := range indexes {
		n += l.IndexSize(i) + meta
	}
	return n
}

// stage reserves need bytes on v (on the roomiest volume that has them
// if v is nil), makes a staging directory there for container id and
// has build fill it. If build fails, what it staged is removed. The
// Store's Close cancels build's context and waits for it.
func (s *Store) stage(ctx context.Context, v *volume, id uint64, need int64, build func(ctx context.Context, st *Staged) error) (*Staged, error) {
	s.mu.Lock()
	var err error
	switch {
	case s.closed:
		err = ErrClosed
	case v == nil:
		if v, _, err = s.choose(need); err == nil {
			v.reserved += need
		}
	default:
		err = s.reserve(v, need)
	}
	if err != nil {
		s.mu.Unlock()
		return nil, err
	}
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.ctx, cancel)()
	st := &Staged{s: s, id: id, v: v, res: need, descs: map[int]Descriptor{}, sizes: map[int]int64{}, adopted: map[int]bool{}}
	st.dir, err = os.MkdirTemp(v.path(stageDir), strconv.FormatUint(id, 10)+"-")
	if err == nil {
		err = build(ctx, st)
	}
	if err != nil {
		st.Close()
		return nil, err
	}
	return st, nil
}

// create makes the directories of indexes and their chunk files.
func (st *Staged) create(indexes []int) ([]*os.File, error) {
	files := make([]*os.File, 0, len(indexes))
	for _, i := range indexes {
		dir := st.indexDir(i)
		for _, d := range []string{dir, filepath.Join(dir, metadataDir), filepath.Join(dir, chunksDir)} {
			if err := os.Mkdir(d, 0o755); err != nil {
				closeAll(files)
				return nil, err
			}
		}
		f, err := os.OpenFile(filepath.Join(dir, chunkName(0)), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			closeAll(files)
			return nil, err
		}
		files = append(files, f)
	}
	return files, nil
}

func closeAll(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

func (st *Staged) indexDir(i int) string { return filepath.Join(st.dir, strconv.Itoa(i)) }

// finish makes the staged indexes complete once their chunk files
// (files, which it closes; files[k] is indexes[k]'s) are written: each gets a copy of the
// container.db built in the staging directory, the checksum file and a
// CLOSED descriptor made from tmpl (the whole container's or a source
// index's), all durably; then the reservation is made what they take.
func (st *Staged) finish(indexes []int, files []*os.File, x *ecIndex, tmpl Descriptor) error {
	s := st.s
	var err error
	for _, f := range files {
		if err == nil && s.sync {
			if err = f.Sync(); err != nil {
				err = fmt.Errorf("fsync %s: %w", f.Name(), err)
			}
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return err
	}
	db := filepath.Join(st.dir, dbStaged)
	msize, msum, err := fileChecksum(db)
	if err != nil {
		return err
	}
	var total int64
	for _, i := range indexes {
		dir := st.indexDir(i)
		if err := copyFile(db, filepath.Join(dir, dbName), s.sync); err != nil {
			return err
		}
		if err := writeFile(filepath.Join(dir, checksumName), []byte(tmpl.ContainerChecksum+"\n"), s.sync); err != nil {
			return err
		}
		d := Descriptor{
			LayoutVersion:     layoutVersion,
			ID:                tmpl.ID,
			State:             Closed,
			ChecksumType:      ChecksumType,
			ReplicaIndex:      i,
			Replication:       tmpl.Replication,
			Bytes:             x.layout.IndexSize(i),
			Blocks:            tmpl.Blocks,
			Chunks:            1,
			MetadataBytes:     msize,
			MetadataChecksum:  checksum.Format(msum),
			MaxSize:           tmpl.MaxSize,
			Created:           tmpl.Created,
			ContainerChecksum: tmpl.ContainerChecksum,
		}
		// writeDescriptor fsyncs dir, which holds metadata/ and chunks/.
		if err := writeDescriptor(dir, &d, s.sync); err != nil {
			return err
		}
		if s.sync {
			if err := durable.SyncDir(filepath.Join(dir, chunksDir)); err != nil {
				return err
			}
		}
		st.indexes = append(st.indexes, i)
		st.descs[i] = d
		st.sizes[i] = dirSize(dir)
		total += st.sizes[i]
	}
	slices.Sort(st.indexes)
	if err := os.Remove(db); err != nil {
		return err
	}
	if s.sync {
		if err := durable.SyncDir(st.dir); err != nil {
			return err
		}
		if err := durable.SyncDir(st.v.path(stageDir)); err != nil {
			return err
		}
	}
	s.mu.Lock()
	st.v.reserved += total - st.res
	st.res = total
	s.mu.Unlock()
	return nil
}

// writeECDB writes an index replica's container.db at path: "blocks"
// holds recs (in key order, as readIndex returns them), "ec" x's layout
// and table.
func writeECDB(path string, recs []record, x *ecIndex, sync bool) error {
	layout, cells, err := x.marshal()
	if err != nil {
		return err
	}
	db, err := bolt.Open(path, 0o644, &bolt.Options{Timeout: time.Second, NoSync: true})
	if err != nil {
		return fmt.Errorf("create index %s: %w", path, err)
	}
	defer db.Close()
	// Batches bound what one transaction holds dirty.
	const batch = 1 << 16
	for start := 0; start == 0 || start < len(recs); start += batch {
		err := db.Update(func(tx *bolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists(blocksBucket)
			if err != nil {
				return err
			}
			b.FillPercent = 1 // the keys come in order: fill every page
			for _, r := range recs[start:min(start+batch, len(recs))] {
				if err := b.Put(r.key(), r.value()); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("write index %s: %w", path, err)
		}
	}
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket(ecBucket)
		if err != nil {
			return err
		}
		if err := b.Put(ecLayoutKey, layout); err != nil {
			return err
		}
		return b.Put(ecCellsKey, cells)
	})
	if err != nil {
		return fmt.Errorf("write index %s: %w", path, err)
	}
	if sync {
		if err := db.Sync(); err != nil {
			return fmt.Errorf("fsync %s: %w", path, err)
		}
	}
	return db.Close()
}

// copyFile copies src to a new file dst.
func copyFile(src, dst string, sync bool) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	_, _, err = writeNew(dst, in, -1, sync)
	return err
}

// writeNew writes r to the end, or limit bytes (-1: no limit), to a new
// file path, fsynced if sync, and returns its size and xxh64.
func writeNew(path string, r io.Reader, limit int64, sync bool) (int64, uint64, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return 0, 0, err
	}
	if limit >= 0 {
		r = io.LimitReader(r, limit)
	}
	h := xxhash.New()
	n, err := io.CopyBuffer(io.MultiWriter(f, h), r, make([]byte, copyBufSize))
	if err == nil && sync {
		if err = f.Sync(); err != nil {
			err = fmt.Errorf("fsync %s: %w", path, err)
		}
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return n, h.Sum64(), err
}

// chunkStream reads a whole container's chunk files back to back, each
// at its size by the index, checking every block's xxh64 as it passes:
// the logical stream Encode stripes.
type chunkStream struct {
	ctx     context.Context
	dir     string
	sizes   []int64
	byChunk [][]record
	n       int // the chunk being read
	f       *os.File
	r       io.Reader
	sc      *sumChecker
}

// newChunkStream checks that recs tile d's chunk files and returns the
// stream of those files.
func newChunkStream(ctx context.Context, dir string, d Descriptor, recs []record) (*chunkStream, error) {
	cs := &chunkStream{ctx: ctx, dir: dir, sizes: make([]int64, d.Chunks), byChunk: make([][]record, d.Chunks)}
	var total int64
	for _, r := range recs {
		if r.chunk >= d.Chunks {
			return nil, fmt.Errorf("block %s in missing %s: %w", r.id, chunkName(r.chunk), ErrCorrupt)
		}
		cs.byChunk[r.chunk] = append(cs.byChunk[r.chunk], r)
		cs.sizes[r.chunk] = max(cs.sizes[r.chunk], r.off+r.id.Size)
		total += r.id.Size
	}
	for n, rs := range cs.byChunk {
		sortByOffset(rs)
		if reason := tiles(chunkName(n), rs, cs.sizes[n]); reason != "" {
			return nil, damage(reason)
		}
	}
	if total != d.Bytes {
		return nil, fmt.Errorf("blocks of %d bytes, descriptor says %d: %w", total, d.Bytes, ErrCorrupt)
	}
	return cs, nil
}

func (cs *chunkStream) Read(p []byte) (int, error) {
	for {
		if err := cs.ctx.Err(); err != nil {
			return 0, err
		}
		if cs.r == nil {
			if cs.n == len(cs.sizes) {
				return 0, io.EOF
			}
			f, err := os.Open(filepath.Join(cs.dir, chunkName(cs.n)))
			if err != nil {
				return 0, err
			}
			cs.f, cs.r = f, io.NewSectionReader(f, 0, cs.sizes[cs.n])
			cs.sc = blockSums(chunkName(cs.n), cs.byChunk[cs.n])
		}
		m, err := cs.r.Read(p)
		if m > 0 {
			if _, err := cs.sc.Write(p[:m]); err != nil {
				return 0, err
			}
			return m, nil
		}
		if err != io.EOF {
			return 0, err
		}
		// A file shorter than its blocks ends inside one.
		if err := cs.sc.done(); err != nil {
			return 0, err
		}
		cs.f.Close()
		cs.f, cs.r = nil, nil
		cs.n++
	}
}

func (cs *chunkStream) close() {
	if cs.f != nil {
		cs.f.Close()
	}
}

// Reconstruct rebuilds the indexes sp.Indexes of container sp.ID from
// the cells of D of the indexes sp.Avail, read through sp.Src
// (ec.Reconstruct: every cell read is checked against the table, and an
// index that fails is replaced by the next), and stages them on the
// roomiest volume with space for them, each with its descriptor and a
// copy of sp.Meta as its container.db. Every cell written is checked
// against the table too. On any failure (a source that fails beyond
// what the others make up for, sp.Meta not matching sp.Descriptor, ctx)
// nothing is left. Errors: ErrInvalid (a spec that does not hold
// together), ErrCorrupt (sp.Meta, or a cell that cannot be had good),
// ErrNoSpace, ErrClosed, ctx's, the sources' and the volume's.
func (s *Store) Reconstruct(ctx context.Context, sp ReconstructSpec) (*Staged, error) {
	st, err := s.reconstruct(ctx, sp)
	if err != nil {
		return nil, fmt.Errorf("reconstruct indexes %v of container %d: %w", sp.Indexes, sp.ID, err)
	}
	return st, nil
}

func (s *Store) reconstruct(ctx context.Context, sp ReconstructSpec) (*Staged, error) {
	d := sp.Descriptor
	sc, err := sp.check()
	if err != nil {
		return nil, fmt.Errorf("%v: %w", err, ErrInvalid)
	}
	// The layout is in the metadata, not yet read: reserve what the
	// largest index can be, a stripe beyond the source's.
	bound := ec.Layout{Scheme: sc, Size: (d.Bytes/int64(sc.Cell) + 1) * sc.StripeBytes()}
	return s.stage(ctx, nil, sp.ID, stageSize(bound, sp.Indexes, d.MetadataBytes), func(ctx context.Context, st *Staged) error {
		db := filepath.Join(st.dir, dbStaged)
		n, msum, err := writeNew(db, sp.Meta, d.MetadataBytes+1, s.sync)
		if err != nil {
			return fmt.Errorf("receive metadata: %w", err)
		}
		if n != d.MetadataBytes || checksum.Format(msum) != d.MetadataChecksum {
			return fmt.Errorf("metadata of %d bytes xxh64 %s, descriptor says %d bytes %s: %w", n, checksum.Format(msum), d.MetadataBytes, d.MetadataChecksum, ErrCorrupt)
		}
		recs, sum, err := readIndex(db)
		if err != nil {
			return err
		}
		if checksum.Format(sum) != d.ContainerChecksum || int64(len(recs)) != d.Blocks {
			return fmt.Errorf("metadata holds %d blocks, container checksum %s; descriptor says %d, %s: %w", len(recs), checksum.Format(sum), d.Blocks, d.ContainerChecksum, ErrCorrupt)
		}
		x, err := readECIndex(db, d, recs)
		if err != nil {
			return err
		}
		files, err := st.create(sp.Indexes)
		if err != nil {
			return err
		}
		defer closeAll(files) // finish closes them; this is for the errors before
		ws := make([]io.Writer, len(files))
		checks := make([]*sumChecker, len(files))
		for k, f := range files {
			checks[k] = x.cellSums(sp.Indexes[k], fmt.Sprintf("index %d", sp.Indexes[k]))
			ws[k] = io.MultiWriter(checks[k], f)
		}
		err = ec.Reconstruct(ctx, x.layout, x.table, sp.Src, sp.Avail, sp.Indexes, ws)
		for _, c := range checks {
			if err == nil {
				err = c.done()
			}
		}
		if err != nil {
			return err
		}
		return st.finish(sp.Indexes, files, x, d)
	})
}

// check returns the spec's scheme if the spec holds together: a CLOSED
// index replica's descriptor for ID, at least D distinct indexes
// available, and distinct indexes to build that are not among them.
func (sp ReconstructSpec) check() (ec.Scheme, error) {
	d := sp.Descriptor
	if err := d.validate(); err != nil {
		return ec.Scheme{}, fmt.Errorf("descriptor: %v", err)
	}
	switch {
	case sp.ID == 0 || d.ID != sp.ID:
		return ec.Scheme{}, fmt.Errorf("descriptor of container %d", d.ID)
	case d.ReplicaIndex == 0 || d.State != Closed:
		return ec.Scheme{}, fmt.Errorf("descriptor of replica index %d, %s: want a CLOSED index replica's", d.ReplicaIndex, d.State)
	case sp.Meta == nil || sp.Src == nil:
		return ec.Scheme{}, errors.New("no metadata or no cell source")
	}
	sc, err := ec.ParseScheme(d.Replication)
	if err != nil {
		return ec.Scheme{}, err
	}
	seen := make(map[int]bool)
	for _, i := range sp.Avail {
		if i < 1 || i > sc.Total() || seen[i] {
			return ec.Scheme{}, fmt.Errorf("available indexes %v of %s", sp.Avail, sc)
		}
		seen[i] = true
	}
	if len(sp.Avail) < sc.Data {
		return ec.Scheme{}, fmt.Errorf("%d indexes available, %s needs %d", len(sp.Avail), sc, sc.Data)
	}
	if len(sp.Indexes) == 0 {
		return ec.Scheme{}, errors.New("no index to build")
	}
	for _, i := range sp.Indexes {
		if i < 1 || i > sc.Total() || seen[i] {
			return ec.Scheme{}, fmt.Errorf("indexes to build %v of %s, available %v", sp.Indexes, sc, sp.Avail)
		}
		seen[i] = true
	}
	return sc, nil
}

// ID is the container's.
func (st *Staged) ID() uint64 { return st.id }

// Indexes returns the indexes staged, adopted ones included, in order.
func (st *Staged) Indexes() []int {
	st.mu.RLock()
	defer st.mu.RUnlock()
	return slices.Clone(st.indexes)
}

// Descriptor returns index i's descriptor as staged (CLOSED; its size is
// Import's size argument), or the zero Descriptor if i is not staged.
func (st *Staged) Descriptor(i int) Descriptor {
	st.mu.RLock()
	defer st.mu.RUnlock()
	return st.descs[i]
}

// Export writes staged index i as a tarball to w, compressed with c: the
// same tarball Store.Export gives of a container. Errors: ErrNotFound (i
// not staged, adopted, or the Staged closed), ErrBadCompression, ctx's,
// w's.
func (st *Staged) Export(ctx context.Context, i int, c Compression, w io.Writer) error {
	st.mu.RLock()
	defer st.mu.RUnlock()
	d, ok := st.descs[i]
	if !ok || st.closed || st.adopted[i] {
		return fmt.Errorf("export staged index %d of container %d: %w", i, st.id, ErrNotFound)
	}
	if err := pack(ctx, st.indexDir(i), d, c, w); err != nil {
		return fmt.Errorf("export staged index %d of container %d: %w", i, st.id, err)
	}
	return nil
}

// Adopt moves staged index i into the Store as its replica of the
// container, as an Import places one: the descriptor rewritten
// RECOVERING, an atomic rename to <volume>/<id> (never replacing one),
// the volume fsynced, then a scan (WaitScan) that makes it CLOSED or
// UNHEALTHY. Its space moves from the reservation to the volume's use.
// The returned descriptor is RECOVERING. Errors: ErrExists (the Store
// holds the container, whichever replica), ErrImporting, ErrNotFound (i
// not staged, or the Staged closed), ErrClosed, ctx's, the volume's.
func (st *Staged) Adopt(ctx context.Context, i int) (Descriptor, error) {
	d, err := st.adopt(ctx, i)
	if err != nil {
		return Descriptor{}, fmt.Errorf("adopt staged index %d of container %d: %w", i, st.id, err)
	}
	return d, nil
}

func (st *Staged) adopt(ctx context.Context, i int) (Descriptor, error) {
	if err := ctx.Err(); err != nil {
		return Descriptor{}, err
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	staged, ok := st.descs[i]
	if !ok || st.closed {
		return Descriptor{}, ErrNotFound
	}
	s, v := st.s, st.v
	s.mu.Lock()
	switch {
	case s.closed:
		s.mu.Unlock()
		return Descriptor{}, ErrClosed
	case s.containers[st.id] != nil:
		s.mu.Unlock()
		return Descriptor{}, ErrExists
	case s.importing[st.id]:
		s.mu.Unlock()
		return Descriptor{}, ErrImporting
	case st.adopted[i]:
		s.mu.Unlock()
		return Descriptor{}, ErrNotFound // adopted, and deleted since
	}
	s.importing[st.id] = true // keeps an Import of the id out meanwhile
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.importing, st.id)
		s.mu.Unlock()
	}()
	src := st.indexDir(i)
	d := staged
	d.State = Recovering
	if err := writeDescriptor(src, &d, s.sync); err != nil {
		return Descriptor{}, err
	}
	dst := v.path(strconv.FormatUint(st.id, 10))
	if err := durable.RenameNoReplace(src, dst); err != nil {
		// Back to CLOSED, for Export; or not staged any more.
		if werr := writeDescriptor(src, &staged, s.sync); werr != nil {
			delete(st.descs, i)
		}
		if errors.Is(err, unix.EEXIST) || errors.Is(err, unix.ENOTEMPTY) {
			return Descriptor{}, fmt.Errorf("%s: %w", dst, ErrExists)
		}
		return Descriptor{}, err
	}
	st.adopted[i] = true
	var syncErr error
	if s.sync {
		syncErr = durable.SyncDir(v.dir)
	}
	// In place even if that fsync failed: registered and scanned either
	// way, since it is there.
	c := &container{id: st.id, vol: v, dir: dst, fault: s.opts.writeFault}
	c.setDesc(d)
	s.mu.Lock()
	v.reserved -= st.sizes[i]
	st.res -= st.sizes[i]
	s.mu.Unlock()
	s.register(c, st.sizes[i])
	s.startScan(c)
	if syncErr != nil {
		return Descriptor{}, syncErr
	}
	return d, nil
}

// Close removes the staged indexes not adopted and releases their
// reservation. Calls after the first return nil.
func (st *Staged) Close() error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed {
		return nil
	}
	st.closed = true
	var err error
	if st.dir != "" {
		err = os.RemoveAll(st.dir)
	}
	st.s.mu.Lock()
	st.v.reserved -= st.res
	st.res = 0
	st.s.mu.Unlock()
	if err != nil {
		return fmt.Errorf("close staged container %d: %w", st.id, err)
	}
	return nil
}
