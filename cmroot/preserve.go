package cmroot

import (
	"github.com/cmfs-project/cmfs/internal/checksum"
	"github.com/cmfs-project/cmfs/internal/durable"
	"github.com/cmfs-project/cmfs/internal/pagecache"

	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

var copyBufs = sync.Pool{New: func() any { b := make([]byte, copyBufSize); return &b }}

// Preserve keeps the file at path, whose content has the given checksum and
// size, as an entry. With move it renames path into the store (same
// filesystem) or copies and fsyncs it and then removes path (another
// filesystem); without move it hard-links path into the store when that
// works, and copies otherwise, leaving path in place. If an entry with
// that name exists, Preserve only refreshes its retention (and, with move,
// removes path). created says whether a new entry was made. On error path
// is untouched and nothing is left in the store.
//
// A hard-linked entry is the original inode: after Preserve without move
// the caller may rename another file over path or unlink it, but must not
// write to or truncate the inode in place (that would change the entry).
// Preserve before an in-place change with PreserveCopy, and before an
// O_TRUNC with move.
//
// Preserve trusts the caller's checksum on the rename and link paths (it
// has the bytes already); a copy is hashed on the way, a clone read back,
// and either fails with ErrChecksum if it differs. Errors read
// "preserve <path>: …" and wrap the underlying errno (ENOSPC, EIO,
// ENOENT…), ErrChecksum or ErrClosed.
func (s *Store) Preserve(path, xxh64 string, size int64, move bool) (name string, created bool, err error) {
	return s.preserveAs(path, xxh64, size, nil, move)
}

// PreserveStat is Preserve of a file the caller has just lstat'ed (st),
// with nothing able to change it since: it trusts st for the checks
// Preserve makes with an lstat of its own, as it trusts the checksum.
func (s *Store) PreserveStat(path, xxh64 string, st *syscall.Stat_t, move bool) (name string, created bool, err error) {
	return s.preserveAs(path, xxh64, st.Size, st, move)
}

func (s *Store) preserveAs(path, xxh64 string, size int64, st *syscall.Stat_t, move bool) (string, bool, error) {
	name, m, err := s.preserve(path, xxh64, size, st, move)
	if err != nil {
		return "", false, fmt.Errorf("preserve %s: %w", path, err)
	}
	s.count(m, size)
	return name, m != Deduplicated, nil
}

func (s *Store) preserve(path, sum string, size int64, st *syscall.Stat_t, move bool) (string, Method, error) {
	if !checksum.Valid(sum) || size < 0 {
		return "", 0, fmt.Errorf("bad checksum %q or size %d", sum, size)
	}
	if s.isClosed() {
		return "", 0, ErrClosed
	}
	if st == nil {
		fi, err := os.Lstat(path)
		if err != nil {
			return "", 0, err
		}
		st = fi.Sys().(*syscall.Stat_t)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return "", 0, fmt.Errorf("not a regular file (mode %07o)", st.Mode)
	}
	if st.Size != size {
		return "", 0, fmt.Errorf("size is %d, not %d", st.Size, size)
	}
	name := Name(sum, size)
	dst := s.Path(name)
	mu := s.stripe(name)
	mu.Lock()
	m := Linked
	var err error
	if move {
		m = Moved
		err = s.sys.rename(path, dst)
	} else {
		err = s.sys.link(path, dst)
	}
	switch {
	case err == nil:
		defer mu.Unlock()
		now := s.sys.now().UnixNano()
		r := record{size: size, ino: st.Ino, shared: true, preserved: now, refreshed: now}
		if err := s.put(name, &r); err != nil {
			if move {
				err = errors.Join(err, durable.RenameNoReplace(dst, path))
			} else {
				err = errors.Join(err, os.Remove(dst))
			}
			return "", 0, err
		}
		return name, m, nil
	case errors.Is(err, syscall.EEXIST):
		defer mu.Unlock()
		return name, Deduplicated, s.refresh(name, path, move)
	case errors.Is(err, syscall.EXDEV) || (!move && linkUnsupported(err)):
		mu.Unlock()
		m, err := s.copyIn(path, os.FileMode(st.Mode).Perm(), name, move)
		return name, m, err
	default:
		mu.Unlock()
		return "", 0, err
	}
}

func linkUnsupported(err error) bool {
	return errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EMLINK) ||
		errors.Is(err, syscall.ENOTSUP) || errors.Is(err, syscall.ENOSYS)
}

// refresh restarts the retention of the existing entry name and, with move,
// then removes path, whose content the entry already holds. Callers hold
// name's stripe.
func (s *Store) refresh(name, path string, move bool) error {
	r, err := s.get(name)
	if err != nil {
		return err
	}
	if r == nil {
		// The file is there but the index does not know it (a concurrent
		// Fsck, or a store modified behind our back): adopt it.
		fi, err := os.Lstat(s.Path(name))
		if err != nil {
			return err
		}
		nr := statRecord(fi)
		r = &nr
	}
	nr := *r
	// Later than the first preservation, even at the same clock reading:
	// DropUnused tells a shared entry by refreshed ≠ preserved.
	nr.refreshed = max(s.sys.now().UnixNano(), r.preserved+1)
	if err := s.put(name, &nr); err != nil {
		return err
	}
	if move {
		return os.Remove(path)
	}
	return nil
}

// copyIn is Preserve where neither rename nor link can be had (another
// filesystem; a link refused): clone or copy into .tmp, hash what .tmp
// holds, verify, fsync, rename into place, and only then (move) remove
// path. It says how the entry was made: Cloned, Copied, or Deduplicated
// when one with the content was there by the time the copy was.
func (s *Store) copyIn(path string, perm os.FileMode, name string, move bool) (Method, error) {
	sum, size, _ := ParseName(name)
	src, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer src.Close()
	dst := s.Path(name)
	mu := s.stripe(name)
	locked := false
	defer func() {
		if locked {
			mu.Unlock()
		}
	}()
	exists, cloned := false, false
	err = durable.Write(s.tmpPath(), perm, s.sync,
		func(f *os.File) error {
			n, got, c, err := s.fillSummed(f, src)
			cloned = c
			if err != nil {
				return err
			}
			if n != size {
				return fmt.Errorf("copy has %d bytes, not %d", n, size)
			}
			if got != sum {
				return fmt.Errorf("%w: copy hashes to %s, not %s", ErrChecksum, got, sum)
			}
			return nil
		},
		func(tmp string) (string, error) {
			mu.Lock()
			locked = true
			err := s.sys.rename(tmp, dst)
			if errors.Is(err, syscall.EEXIST) {
				exists = true
			}
			return dst, err
		})
	if exists {
		return Deduplicated, s.refresh(name, path, move)
	}
	if err != nil {
		return 0, err
	}
	efi, err := os.Lstat(dst)
	if err == nil {
		r := statRecord(efi)
		r.shared = false // a copy: its inode is nobody's original
		r.preserved = s.sys.now().UnixNano()
		r.refreshed = r.preserved
		err = s.put(name, &r)
	}
	if err == nil && move {
		if err = os.Remove(path); err != nil {
			if perr := s.put(name, nil); perr != nil {
				err = errors.Join(err, perr)
			}
		}
	}
	if err != nil {
		return 0, errors.Join(err, os.Remove(dst))
	}
	return copyMethod(true, cloned), nil
}

// How an original is copied. Every copy the store makes goes through
// fillHashed or fillKnown, which clone before they copy: FICLONE makes the
// new file share the original's extents, the whole file at once, O(1) in
// its size, on a filesystem with reflinks (XFS, btrfs); a later write to
// either file un-shares only the blocks it touches (copy-on-write), so the
// entry keeps the bytes it was made with. Where the files are on different
// filesystems, or the filesystem has no reflinks, or it refuses this file,
// the ioctl fails and the bytes are copied as before. A filesystem without
// reflinks (EOPNOTSUPP, ENOTTY: ext4, tmpfs, FUSE) is remembered, and the
// store never asks again; EXDEV (the original is on another mount) and
// EINVAL (btrfs refuses some files, not all) cost one failed system call
// per copy and are asked again.
//
// A clone is verified as a copy is: fillHashed names the entry by the
// checksum of the clone's own bytes, read back from it, so an original
// that a writer changes meanwhile (through FUSE passthrough, writes never
// wait for cmfs) still gets an entry whose name matches what it holds.
// Durability is the same too: durable.Write fsyncs the new file, which on
// XFS forces the log holding the clone's extent map and reference counts
// (the original's dirty pages were written back by the clone itself).

// fillHashed makes tmp, a new empty file, hold src's content from offset 0
// to EOF and writes that content to d: what tmp holds, read back after a
// clone, hashed on the way of a copy. It returns the size and whether it
// cloned. src's file offset does not move.
func (s *Store) fillHashed(tmp, src *os.File, d *checksum.Digest) (int64, bool, error) {
	cloned, err := s.clone(tmp, src)
	if err != nil {
		return 0, false, err
	}
	if !cloned {
		defer noteCache(src).Drop()
		n, err := s.copyHashed(tmp, src, d)
		return n, false, err
	}
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	n, err := io.CopyBuffer(d, io.NewSectionReader(tmp, 0, math.MaxInt64), *bp)
	return n, true, err
}

// fillSummed is fillHashed that returns the checksum.
func (s *Store) fillSummed(tmp, src *os.File) (int64, string, bool, error) {
	d := checksum.New()
	n, cloned, err := s.fillHashed(tmp, src, d)
	return n, checksum.Format(d.Sum64()), cloned, err
}

// fillKnown makes tmp, a new empty file, hold the first size bytes of
// src, which nothing writes to meanwhile (PreserveCopyOf's caller says
// so, and knows their checksum): by clone, or in the kernel by
// copy_file_range, without hashing. It says whether it cloned.
func (s *Store) fillKnown(tmp, src *os.File, size int64) (bool, error) {
	cloned, err := s.clone(tmp, src)
	if err != nil {
		return false, err
	}
	if !cloned {
		defer pagecache.Note(src, size).Drop()
		return false, copyRange(tmp, src, size)
	}
	fi, err := tmp.Stat()
	switch {
	case err != nil:
		return true, err
	case fi.Size() < size:
		return true, fmt.Errorf("cloned %d of %d bytes: %w", fi.Size(), size, io.ErrUnexpectedEOF)
	case fi.Size() > size:
		return true, tmp.Truncate(size) // what a copy would take: the first size bytes
	}
	return true, nil
}

// noteCache is pagecache.Note of all of f: a copy (not a clone, which
// reads nothing) leaves the original's page cache as it found it.
func noteCache(f *os.File) pagecache.Absent {
	var st syscall.Stat_t
	if syscall.Fstat(int(f.Fd()), &st) != nil {
		return pagecache.Absent{}
	}
	return pagecache.Note(f, st.Size)
}

// clone makes tmp, a new empty file, share src's extents (FICLONE). It
// reports false, with tmp still empty, where the filesystem cannot; the
// caller copies instead.
func (s *Store) clone(tmp, src *os.File) (bool, error) {
	if s.noClone.Load() {
		return false, nil
	}
	err := s.sys.clone(tmp, src)
	if err == nil {
		return true, nil
	}
	if errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.ENOTTY) {
		s.noClone.Store(true)
	}
	// Whatever the error, the copy decides: one that fails for the same
	// reason (ENOSPC, EIO) reports it. A clone cut short may have shared
	// some extents already: the copy starts from an empty file, at its
	// start (it writes at the file offset).
	if err := tmp.Truncate(0); err != nil {
		return false, err
	}
	_, err = tmp.Seek(0, io.SeekStart)
	return false, err
}

// copyHashed copies src from offset 0 to EOF into f, writing the bytes to
// d on the way. It reads with ReadAt, so src's file offset does not move.
func (s *Store) copyHashed(f *os.File, src io.ReaderAt, d *checksum.Digest) (int64, error) {
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	buf := *bp
	var off int64
	for {
		n, rerr := src.ReadAt(buf, off)
		if n > 0 {
			d.Write(buf[:n])
			if _, err := s.sys.write(f, buf[:n]); err != nil {
				return off, err
			}
			off += int64(n)
		}
		if rerr == io.EOF {
			return off, nil
		}
		if rerr != nil {
			return off, rerr
		}
	}
}

// Kept is what PreserveCopy kept: the entry's name, the checksum and
// size of its content, whether the entry is new, and, for content longer
// than one block, the blocks' sums (checksum.Digest.Blocks), which let a
// caller update the checksum after a change to part of the original.
type Kept struct {
	Name, XXH64 string
	Size        int64
	Created     bool
	Blocks      []uint64
}

// PreserveCopy copies (clones, where the filesystem can) the open file f
// into the store, computing the checksum of the copy's bytes, fsyncs the
// copy and says what it kept. Used before an in-place change of f. It
// reads f with ReadAt, so f's offset does not move. If the content is
// already stored, the copy is discarded and the entry refreshed (Created
// is false).
func (s *Store) PreserveCopy(f *os.File) (Kept, error) {
	var name string
	cloned := false
	d := checksum.NewKeeping()
	name, created, err := s.copyFrom(f, &name, func(tmp *os.File) error {
		d.Reset()
		n, c, err := s.fillHashed(tmp, f, d)
		name, cloned = Name(checksum.Format(d.Sum64()), n), c
		return err
	})
	if err != nil {
		return Kept{}, fmt.Errorf("preserve %s: %w", f.Name(), err)
	}
	m := copyMethod(created, cloned)
	xxh64, size, _ := ParseName(name)
	s.count(m, size)
	c := Kept{Name: name, XXH64: xxh64, Size: size, Created: m != Deduplicated}
	if size > checksum.BlockSize {
		c.Blocks = d.Blocks()
	}
	return c, nil
}

// PreserveCopyOf is PreserveCopy for a file whose checksum and size the
// caller knows, and which nothing writes to meanwhile: an existing entry
// is only refreshed, without reading f, and a new one is cloned, or copied
// in the kernel (copy_file_range), without hashing.
func (s *Store) PreserveCopyOf(f *os.File, xxh64 string, size int64) (name string, created bool, err error) {
	name = Name(xxh64, size)
	if _, _, ok := ParseName(name); !ok {
		return "", false, fmt.Errorf("preserve %s: bad checksum %q", f.Name(), xxh64)
	}
	m := s.stripe(name)
	m.Lock()
	r, err := s.get(name)
	m.Unlock()
	if err == nil && r != nil {
		if err := s.refresh(name, "", false); err != nil {
			return name, false, err
		}
		s.count(Deduplicated, size)
		return name, false, nil
	}
	named, cloned := name, false
	name, created, err = s.copyFrom(f, &named, func(tmp *os.File) (err error) {
		cloned, err = s.fillKnown(tmp, f, size)
		return err
	})
	if err != nil {
		return "", false, fmt.Errorf("preserve %s: %w", f.Name(), err)
	}
	s.count(copyMethod(created, cloned), size)
	return name, created, nil
}

// copyRange copies the first size bytes of src into dst in the kernel
// (copy_file_range), or through a buffer where the kernel cannot copy
// between the two.
func copyRange(dst, src *os.File, size int64) error {
	var off int64
	for off < size {
		n, err := unix.CopyFileRange(int(src.Fd()), &off, int(dst.Fd()), nil, int(min(size-off, 1<<30)), 0)
		if errors.Is(err, syscall.EXDEV) || errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOSYS) || errors.Is(err, syscall.EOPNOTSUPP) {
			// Another filesystem the kernel cannot copy across: copy here.
			m, err := io.Copy(dst, io.NewSectionReader(src, off, size-off))
			off += m
			if err == nil && off != size {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("copied %d of %d bytes: %w", off, size, io.ErrUnexpectedEOF)
		}
	}
	return nil
}

// copyFrom fills a temporary file with fill, which sets *name, and places
// it as that entry; an entry that exists by then is refreshed instead.
func (s *Store) copyFrom(f *os.File, name *string, fill func(tmp *os.File) error) (string, bool, error) {
	fi, err := f.Stat()
	if err != nil {
		return "", false, err
	}
	if !fi.Mode().IsRegular() {
		return "", false, fmt.Errorf("not a regular file (%v)", fi.Mode().Type())
	}
	var mu interface{ Unlock() }
	defer func() {
		if mu != nil {
			mu.Unlock()
		}
	}()
	exists := false
	err = durable.Write(s.tmpPath(), fi.Mode().Perm(), s.sync, fill,
		func(tmp string) (string, error) {
			m := s.stripe(*name)
			m.Lock()
			mu = m
			dst := s.Path(*name)
			err := s.sys.rename(tmp, dst)
			if errors.Is(err, syscall.EEXIST) {
				exists = true
			}
			return dst, err
		})
	if exists {
		return *name, false, s.refresh(*name, "", false)
	}
	if err != nil {
		return "", false, err
	}
	dst := s.Path(*name)
	efi, err := os.Lstat(dst)
	if err == nil {
		r := statRecord(efi)
		r.shared = false
		r.preserved = s.sys.now().UnixNano()
		r.refreshed = r.preserved
		err = s.put(*name, &r)
	}
	if err != nil {
		return "", false, errors.Join(err, os.Remove(dst))
	}
	return *name, true, nil
}

// Drop removes an entry made by a Preserve that is being undone. Only drop
// an entry that Preserve reported as created: an entry that existed before
// may hold other preservations. To undo a Preserve with move, whose entry is
// the only copy of the data, use Unpreserve. It returns ErrNotFound if there is no
// such entry.
func (s *Store) Drop(name string) error {
	if err := s.drop(name, false); err != nil {
		return fmt.Errorf("drop %s: %w", name, err)
	}
	return nil
}

// drop removes entry name; unused: only if no preservation was refreshed
// onto it after it was made (errShared).
func (s *Store) drop(name string, unused bool) error {
	if _, _, ok := ParseName(name); !ok {
		return ErrNotFound
	}
	mu := s.stripe(name)
	mu.Lock()
	defer mu.Unlock()
	r, err := s.get(name)
	if err != nil {
		return err
	}
	if unused && (r == nil || r.refreshed != r.preserved) {
		return errShared
	}
	err = os.Remove(s.Path(name))
	if errors.Is(err, os.ErrNotExist) {
		if r == nil {
			return ErrNotFound
		}
		err = nil
	}
	if err != nil {
		return err
	}
	if r == nil {
		return nil
	}
	return s.put(name, nil)
}

// DropUnused removes entry name, made by a Preserve that reported it
// created, if no preservation has been refreshed onto it since: a copy taken
// ahead for a change that never came. An entry another preservation shares
// stays. It returns whether it removed the entry.
func (s *Store) DropUnused(name string) (bool, error) {
	if err := s.drop(name, true); errors.Is(err, errShared) {
		return false, nil
	} else if err != nil {
		return false, fmt.Errorf("drop %s: %w", name, err)
	}
	return true, nil
}

// errShared is drop's refusal of an entry a later preservation shares.
var errShared = errors.New("shared by a later preservation")

// Unpreserve undoes a Preserve with move that created entry name: it puts
// the entry back at path (which must not exist) and removes the entry — by
// rename on the same filesystem, by a durable copy otherwise. Used when the
// operation the preservation protected fails after all.
func (s *Store) Unpreserve(name, path string) error {
	if err := s.unpreserve(name, path); err != nil {
		return fmt.Errorf("unpreserve %s to %s: %w", name, path, err)
	}
	return nil
}

func (s *Store) unpreserve(name, path string) error {
	if _, _, ok := ParseName(name); !ok {
		return ErrNotFound
	}
	mu := s.stripe(name)
	mu.Lock()
	defer mu.Unlock()
	r, err := s.get(name)
	if err != nil {
		return err
	}
	src := s.Path(name)
	err = durable.RenameNoReplace(src, path)
	if errors.Is(err, syscall.EXDEV) {
		if err = s.restore(name, path, false); err == nil {
			err = os.Remove(src)
		}
	}
	if errors.Is(err, os.ErrNotExist) && r == nil {
		return ErrNotFound
	}
	if err != nil {
		return err
	}
	return s.put(name, nil)
}

func (s *Store) tmpPath() string { return filepath.Join(s.dir, tmpDir) }
