package container

import (
	"archive/tar"
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cmfs-project/cmfs/internal/durable"
	"golang.org/x/sys/unix"
)

// importSlack is room an import reserves beyond the size its caller gives:
// tar framing, the descriptor, the index and checksum file, and a
// compressor's worst-case growth on incompressible data.
func importSlack(size int64) int64 { return 1<<20 + size/64 }

// maxTrailer bounds what may follow the end of the tar archive (tar
// implementations pad to a record size).
const maxTrailer = 64 << 10

// maxChecksumFile bounds metadata/container.checksum in a tarball.
const maxChecksumFile = 64

// Import receives container id as a tarball from r (compressed with c) and
// puts it in place, in this order, so that nothing partial is ever
// visible:
//
//  1. refuse if id is here (ErrExists) or being imported (ErrImporting);
//  2. pick the volume with the most free space (statfs free minus other
//     reservations) that can hold 2× (size + slack), and reserve that;
//     none can: ErrNoSpace, before anything is written. size is the
//     container's data size (Descriptor.Bytes, or Descriptor.Size());
//  3. copy r into <volume>/tmp/container-copy/<id>.tar[.gz|.sz|.lz4|.zst],
//     growing the reservation if the tarball outgrows it (ErrNoSpace if
//     the volume has no more room; ErrHostile beyond twice the first
//     reservation); steps 4 and 5 read the tarball as it is written,
//     right behind, and what they have read is punched out of it (see
//     tail);
//  4. check the first entry is container.yaml with a valid checksum
//     (ErrCorrupt), for container id, CLOSED or UNHEALTHY, and at most
//     size bytes of data (ErrHostile); grow the reservation if its
//     metadata needs more room (ErrNoSpace if the volume has none);
//  5. unpack, through an os.Root, into a new directory under
//     <volume>/tmp/container-extract: only the format's names, regular
//     files and directories, each once, no larger than the descriptor
//     says (ErrHostile); a truncated or undecodable stream is ErrCorrupt;
//  6. rewrite the descriptor as RECOVERING, delete the tarball, fsync
//     every file and directory (writeback started as each file landed),
//     rename the directory to <volume>/<id> (never replacing one) and
//     fsync the volume;
//  7. register the container, account its size to the volume and start
//     its scan (see WaitScan), which makes it CLOSED or UNHEALTHY.
//
// On every error the tarball and the temporary directory are removed and
// the reservation released. A process killed mid-way leaves them only in
// tmp, which the next OpenStore empties. Import returns when r does: a
// caller that gives up closes r (io.Pipe's CloseWithError) as well as
// cancelling ctx. The returned descriptor is RECOVERING.
func (s *Store) Import(ctx context.Context, id uint64, size int64, c Compression, r io.Reader) (Descriptor, error) {
	d, err := s.importTar(ctx, id, size, c, r)
	if err != nil {
		return Descriptor{}, fmt.Errorf("import container %d: %w", id, err)
	}
	return d, nil
}

func (s *Store) importTar(ctx context.Context, id uint64, size int64, comp Compression, r io.Reader) (Descriptor, error) {
	comp, err := comp.norm()
	if err != nil {
		return Descriptor{}, err
	}
	if id == 0 || size < 0 {
		return Descriptor{}, fmt.Errorf("bad id %d or size %d", id, size)
	}
	need := size + importSlack(size)
	im := &importer{s: s, id: id, size: size, comp: comp, res: 2 * need, maxTar: 4 * need,
		buf: make([]byte, copyBufSize), rbuf: make([]byte, copyBufSize)}

	s.mu.Lock()
	switch {
	case s.closed:
		s.mu.Unlock()
		return Descriptor{}, ErrClosed
	case s.containers[id] != nil:
		s.mu.Unlock()
		return Descriptor{}, ErrExists
	case s.importing[id]:
		s.mu.Unlock()
		return Descriptor{}, ErrImporting
	}
	v, _, err := s.choose(im.res)
	if err != nil {
		s.mu.Unlock()
		return Descriptor{}, err
	}
	im.v = v
	v.reserved += im.res
	s.importing[id] = true
	s.wg.Add(1) // Close waits for imports, which its ctx cancels
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		v.reserved -= im.res
		delete(s.importing, id)
		s.mu.Unlock()
		s.wg.Done()
	}()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(s.ctx, cancel)
	defer stop()
	defer im.cleanup()
	return im.run(ctx, r)
}

// importer is one Import's state; its paths are removed by cleanup unless
// the container was placed.
type importer struct {
	s    *Store
	id   uint64
	size int64
	comp Compression
	v    *volume
	res  int64 // bytes reserved on v (Store.mu)
	// maxTar bounds the tarball: twice the first reservation, which an
	// honest one only nears when its index outweighs its data (blocks of
	// a few bytes each) and the caller gave Bytes as the size.
	maxTar int64
	// unpacking is what extraction may write, by the verified
	// descriptor (Store.mu); 0 before.
	unpacking int64
	buf       []byte // the extraction's
	rbuf      []byte // the receiver's

	tarPath string
	tarFile *os.File
	raw     *tail // the tarball, when entries can be copied from it directly (None)
	tmpDir  string
	placed  bool

	desc     Descriptor
	seen     map[string]bool
	written  int64 // bytes extracted
	chunkLen int64 // of which chunk data
	chunks   []bool
	files    []string // extracted files, to fsync before the rename
	kicked   int64    // how far the current file's writeback has been started
}

func (im *importer) cleanup() {
	if im.tarFile != nil {
		im.tarFile.Close()
	}
	if im.tarPath != "" {
		os.Remove(im.tarPath)
	}
	if im.tmpDir != "" && !im.placed {
		os.RemoveAll(im.tmpDir)
	}
}

func (im *importer) run(ctx context.Context, r io.Reader) (Descriptor, error) {
	s, v := im.s, im.v
	im.tarPath = filepath.Join(v.path(copyDir), strconv.FormatUint(im.id, 10)+".tar"+im.comp.ext())
	f, err := os.OpenFile(im.tarPath, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		im.tarPath = "" // not ours to remove
		return Descriptor{}, err
	}
	im.tarFile = f
	// The receiver writes the tarball; unpack reads it right behind.
	t := newTail(f)
	received := make(chan struct{})
	go func() {
		defer close(received)
		t.finish(im.receive(ctx, r, t))
	}()
	root, err := im.unpack(ctx, t)
	if root != nil {
		defer root.Close()
	}
	// On an error the receiver reads r to its end without writing: Import
	// returns when r does.
	t.drop()
	<-received
	// A stream that failed (cut off, too long, cancelled) is the reason,
	// whatever the extraction made of it: as when it was received first.
	if rerr := t.failure(); rerr != nil {
		return Descriptor{}, rerr
	}
	if err != nil {
		return Descriptor{}, err
	}
	d := im.desc
	d.State, d.Reason = Recovering, ""
	if err := writeDescriptor(im.tmpDir, &d, false); err != nil {
		return Descriptor{}, err
	}
	// Gone before the sync, so its dirty pages are dropped, not written.
	im.tarFile.Close()
	im.tarFile = nil
	if err := os.Remove(im.tarPath); err != nil {
		return Descriptor{}, err
	}
	im.tarPath = ""
	if s.sync {
		if err := im.syncAll(root); err != nil {
			return Descriptor{}, err
		}
	}
	dst := v.path(strconv.FormatUint(im.id, 10))
	if err := durable.RenameNoReplace(im.tmpDir, dst); err != nil {
		if errors.Is(err, unix.EEXIST) || errors.Is(err, unix.ENOTEMPTY) {
			return Descriptor{}, fmt.Errorf("%s: %w", dst, ErrExists)
		}
		return Descriptor{}, err
	}
	im.placed = true
	var syncErr error
	if s.sync {
		syncErr = durable.SyncDir(v.dir)
	}
	// In place even if that fsync failed: registered and scanned either
	// way, since it is there.
	c := &container{id: im.id, vol: v, dir: dst, fault: s.opts.writeFault}
	c.setDesc(d)
	s.register(c, im.written)
	s.startScan(c)
	if syncErr != nil {
		return Descriptor{}, syncErr
	}
	return d, nil
}

// unpack checks the descriptor and extracts the tarball t delivers into
// a new directory under <volume>/tmp/container-extract (im.tmpDir), and
// reads the compressed stream to its end. It returns the directory as
// an os.Root, for the caller to close.
func (im *importer) unpack(ctx context.Context, t *tail) (*os.Root, error) {
	root, err := im.unpackTo(ctx, t)
	if err != nil && root != nil {
		root.Close()
		root = nil
	}
	return root, err
}

func (im *importer) unpackTo(ctx context.Context, t *tail) (*os.Root, error) {
	var zr io.ReadCloser
	var tr *tar.Reader
	var err error
	if im.comp == None {
		// The tar reader on the tarball itself: it skips entry data by
		// seeking, and copyRange copies that data file to file in the
		// kernel (copy_file_range; a reflink where the filesystem can).
		zr, tr, im.raw = io.NopCloser(t), tar.NewReader(t), t
	} else {
		zr, err = im.comp.newReader(bufio.NewReaderSize(t, copyBufSize))
		if err != nil {
			return nil, fmt.Errorf("decompress %s: %v: %w", im.comp, err, ErrCorrupt)
		}
		defer zr.Close()
		tr = tar.NewReader(bufferedReader(zr))
	}
	if err := im.readDescriptor(tr); err != nil {
		return nil, err
	}
	// What unpacking may write, by the now verified descriptor.
	if err := im.expect(t, im.desc.Bytes+im.desc.MetadataBytes+maxChecksumFile); err != nil {
		return nil, err
	}
	if im.tmpDir, err = os.MkdirTemp(im.v.path(extractDir), strconv.FormatUint(im.id, 10)+"-"); err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(im.tmpDir)
	if err != nil {
		return nil, err
	}
	if err := im.extract(ctx, tr, root); err != nil {
		return root, err
	}
	// The tar ends before the compressed stream does: read that to its
	// end too, or gzip's, lz4's and zstd's trailing checksums would never
	// be checked.
	if n, err := io.CopyN(io.Discard, zr, maxTrailer+1); err != io.EOF {
		if err != nil {
			return root, fmt.Errorf("tarball end: %v: %w", err, ErrCorrupt)
		}
		return root, fmt.Errorf("more than %d bytes after the tar's end (%d): %w", maxTrailer, n, ErrHostile)
	}
	return root, nil
}

// register adds an imported container to the Store.
func (s *Store) register(c *container, size int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.containers[c.id] = c
	c.size = size
	c.vol.used += size
	c.vol.n++
}

// receive copies r to the tarball, at most the reservation, in large
// writes (small pipe reads are gathered first), telling t as it goes.
// Once t is dropped it reads r to its end without writing.
func (im *importer) receive(ctx context.Context, r io.Reader, t *tail) error {
	var n int64
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		m, err := io.ReadFull(r, im.rbuf)
		if m > 0 {
			end := n + int64(m)
			if t.isDropped() {
				if end > im.maxTar {
					return fmt.Errorf("tarball beyond %d bytes for a container of %d: %w", im.maxTar, im.size, ErrHostile)
				}
			} else {
				if err := im.room(end); err != nil {
					return err
				}
				if _, werr := im.tarFile.Write(im.rbuf[:m]); werr != nil {
					return werr
				}
				t.wrote(end)
			}
			n = end
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("receive: %w", err)
		}
	}
}

// room makes sure the reservation holds a tarball of end bytes and what
// the extraction may still write, growing it if the volume has room.
func (im *importer) room(end int64) error {
	s := im.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if end > im.maxTar {
		return fmt.Errorf("tarball beyond %d bytes for a container of %d: %w", im.maxTar, im.size, ErrHostile)
	}
	total := end + im.unpacking
	if total <= im.res {
		return nil
	}
	if err := im.grow(min(max(total, im.res+im.res/2), im.maxTar+im.unpacking)); err != nil {
		return fmt.Errorf("tarball beyond the %d bytes reserved: %w", im.res, err)
	}
	return nil
}

// expect makes the reservation hold the tarball received so far and
// limit bytes of extracted files besides, from now on.
func (im *importer) expect(t *tail, limit int64) error {
	n := t.size()
	s := im.s
	s.mu.Lock()
	defer s.mu.Unlock()
	im.unpacking = limit
	return im.grow(n + limit)
}

// grow makes the reservation total bytes, if the volume has room; the
// caller holds Store.mu. The tarball already written counts twice
// meanwhile (in statfs and in the reservation): safe side.
func (im *importer) grow(total int64) error {
	s := im.s
	if total <= im.res {
		return nil
	}
	if err := s.reserve(im.v, total-im.res); err != nil {
		return err
	}
	im.res = total
	return nil
}

// readDescriptor reads the tarball's first entry, which must be a valid
// container.yaml for the container being imported.
func (im *importer) readDescriptor(tr *tar.Reader) error {
	hdr, err := tr.Next()
	if err != nil {
		return fmt.Errorf("tarball: %v: %w", err, ErrCorrupt)
	}
	if hdr.Name != descriptorName || hdr.Typeflag != tar.TypeReg || hdr.Size > maxDescriptor {
		return fmt.Errorf("first entry %q (type %q, %d bytes), want %s: %w", hdr.Name, hdr.Typeflag, hdr.Size, descriptorName, ErrHostile)
	}
	raw, err := io.ReadAll(tr)
	if err != nil {
		return fmt.Errorf("%s: %v: %w", descriptorName, err, ErrCorrupt)
	}
	d, err := parseDescriptor(raw)
	if err != nil {
		return err
	}
	switch {
	case d.ID != im.id:
		return fmt.Errorf("descriptor is for container %d: %w", d.ID, ErrHostile)
	case d.State != Closed && d.State != Unhealthy:
		return fmt.Errorf("descriptor state %s, want CLOSED or UNHEALTHY: %w", d.State, ErrHostile)
	case d.Bytes > im.size:
		return fmt.Errorf("descriptor says %d bytes of data, the import reserved for %d: %w", d.Bytes, im.size, ErrHostile)
	}
	im.desc = d
	im.seen = map[string]bool{descriptorName: true}
	im.chunks = make([]bool, d.Chunks)
	return nil
}

// extract unpacks the tarball's remaining entries into root, accepting
// only what the format has.
func (im *importer) extract(ctx context.Context, tr *tar.Reader, root *os.Root) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("tarball: %v: %w", err, ErrCorrupt)
		}
		if err := im.entry(ctx, hdr, tr, root); err != nil {
			return err
		}
	}
	var missing []string
	for _, name := range []string{dbName, checksumName} {
		if !im.seen[name] {
			missing = append(missing, name)
		}
	}
	for n, ok := range im.chunks {
		if !ok {
			missing = append(missing, chunkName(n))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("tarball lacks %s: %w", strings.Join(missing, ", "), ErrCorrupt)
	}
	if im.chunkLen != im.desc.Bytes {
		return fmt.Errorf("chunks hold %d bytes, descriptor says %d: %w", im.chunkLen, im.desc.Bytes, ErrCorrupt)
	}
	return nil
}

// entry checks and writes one tar entry.
func (im *importer) entry(ctx context.Context, hdr *tar.Header, r io.Reader, root *os.Root) error {
	name := hdr.Name
	hostile := func(why string) error {
		return fmt.Errorf("entry %q: %s: %w", name, why, ErrHostile)
	}
	key := strings.TrimSuffix(name, "/")
	if im.seen[key] {
		return hostile("duplicate")
	}
	im.seen[key] = true
	switch hdr.Typeflag {
	case tar.TypeDir:
		if key != metadataDir && key != chunksDir {
			return hostile("not a directory of the format")
		}
		return mkdirRoot(root, key)
	case tar.TypeReg:
	default:
		return hostile(fmt.Sprintf("type %q: only regular files and directories", hdr.Typeflag))
	}
	if hdr.Linkname != "" {
		return hostile("regular file with a link name")
	}
	for k := range hdr.PAXRecords {
		// A sparse file's data in the tarball is not its content; the
		// format has none.
		if strings.HasPrefix(k, "GNU.sparse.") {
			return hostile("sparse file")
		}
	}
	// The most each file may hold, by the descriptor.
	var limit int64
	n, isChunk := parseChunkName(name)
	switch {
	case name == dbName:
		limit = im.desc.MetadataBytes
	case name == checksumName:
		limit = maxChecksumFile
	case isChunk:
		if n >= len(im.chunks) {
			return hostile(fmt.Sprintf("descriptor has %d chunks", len(im.chunks)))
		}
		limit = im.desc.Bytes - im.chunkLen
	default:
		return hostile("not a name of the format")
	}
	if hdr.Size < 0 || hdr.Size > limit {
		return hostile(fmt.Sprintf("%d bytes, beyond the %d the descriptor allows", hdr.Size, limit))
	}
	if isChunk {
		im.chunks[n] = true
		im.chunkLen += hdr.Size
	}
	if err := mkdirRoot(root, filepath.Dir(name)); err != nil {
		return err
	}
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	copyEntry := im.copyEntry
	if im.raw != nil {
		copyEntry = im.copyRange
	}
	im.kicked = 0
	if err := copyEntry(ctx, f, r, hdr.Size); err != nil {
		f.Close()
		return fmt.Errorf("entry %q: %w", name, err)
	}
	im.kick(f, hdr.Size, true)
	im.written += hdr.Size
	im.files = append(im.files, name)
	return f.Close()
}

// kickEvery is how much an extracted file may hold before its writeback
// is started.
const kickEvery = 32 << 20

// kick starts writeback of what was written to f since the last kick
// (once kickEvery bytes have gathered, or at the end), without waiting
// for it: the disk writes while the rest is extracted, and the fsync
// before the rename finds little left to do (BenchmarkExportImport
// measures the gain; docs/bench.md, "Containers"). Advisory: errors are
// the fsync's to report.
func (im *importer) kick(f *os.File, written int64, end bool) {
	if !im.s.sync || written == im.kicked || (!end && written-im.kicked < kickEvery) {
		return
	}
	unix.SyncFileRange(int(f.Fd()), im.kicked, written-im.kicked, unix.SYNC_FILE_RANGE_WRITE)
	im.kicked = written
}

// copyEntry copies exactly n bytes of the current entry to f.
func (im *importer) copyEntry(ctx context.Context, f *os.File, r io.Reader, n int64) error {
	for left := n; left > 0; {
		if err := ctx.Err(); err != nil {
			return err
		}
		m, err := io.ReadFull(r, im.buf[:min(int64(len(im.buf)), left)])
		if m > 0 {
			if _, werr := f.Write(im.buf[:m]); werr != nil {
				return werr
			}
			left -= int64(m)
			im.kick(f, n-left, false)
		}
		if err != nil {
			if left == 0 && err == io.EOF {
				return nil
			}
			return fmt.Errorf("%v: %w", err, ErrCorrupt)
		}
	}
	return nil
}

// copyRange copies the current entry's n bytes from the uncompressed
// tarball to f without passing them through user space, as they arrive.
// The tarball's read offset is left alone: the tar reader seeks past the
// data itself.
func (im *importer) copyRange(ctx context.Context, f *os.File, r io.Reader, n int64) error {
	t := im.raw
	off := t.off
	for left := n; left > 0; {
		if err := ctx.Err(); err != nil {
			return err
		}
		end, err := t.await(off)
		if end <= off {
			if err != nil {
				return err
			}
			return fmt.Errorf("tarball ends inside the entry: %w", ErrCorrupt)
		}
		m, err := unix.CopyFileRange(int(t.f.Fd()), &off, int(f.Fd()), nil, int(min(left, end-off, kickEvery)), 0)
		if err != nil {
			if errors.Is(err, unix.EXDEV) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP) {
				// No in-kernel copy here: read and write what is left.
				t.off = off
				if err := im.copyEntry(ctx, f, t, left); err != nil {
					return err
				}
				t.off = off - (n - left) // where the tar reader expects it
				return nil
			}
			return fmt.Errorf("copy_file_range: %w", err)
		}
		if m == 0 {
			return fmt.Errorf("tarball shrank under copy_file_range: %w", ErrCorrupt)
		}
		left -= int64(m)
		im.kick(f, n-left, false)
		t.release(off)
	}
	return nil
}

// mkdirRoot makes directory name in root unless it exists.
func mkdirRoot(root *os.Root, name string) error {
	if name == "." {
		return nil
	}
	err := root.Mkdir(name, 0o755)
	if errors.Is(err, os.ErrExist) {
		if fi, serr := root.Lstat(name); serr == nil && fi.IsDir() {
			return nil
		}
	}
	return err
}

// syncAll makes the extracted directory durable before the rename: an
// fsync of each file (their writeback already started, see kick) and
// directory, or, with Options.syncFS, one syncfs of the volume's
// filesystem. The two came out even in BenchmarkExportImport
// (none/fsync-each vs none/syncfs); fsyncing only our files keeps
// concurrent imports and the ingest from waiting on each other's data.
func (im *importer) syncAll(root *os.Root) error {
	if im.s.opts.syncFS {
		return durable.SyncFS(im.tmpDir)
	}
	for _, name := range append(im.files, descriptorName, metadataDir, chunksDir, ".") {
		// Reopened by name: holding every file open until now could run
		// out of descriptors on a container of many chunks.
		f, err := root.Open(name)
		if errors.Is(err, os.ErrNotExist) && (name == metadataDir || name == chunksDir) {
			continue
		}
		if err != nil {
			return err
		}
		err = f.Sync()
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("fsync %s: %w", filepath.Join(im.tmpDir, name), err)
		}
	}
	return nil
}
