package repl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/cmfs-project/cmfs/internal/checksum"
	"github.com/cmfs-project/cmfs/journal"
)

// loader applies events to a target directory.
type loader struct {
	ctx     context.Context
	target  string
	staging string
	fetch   Fetcher
	prog    Progress
	res     *LoadResult
	// fuzzy is set while applying events that may have raced with the
	// BOOTSTRAP the target started from: content found nowhere is skipped
	// (a later event brings the right one), and a rename whose two ends
	// both exist keeps the destination.
	fuzzy bool
	// event is the id of the event being applied, 0 in a BOOTSTRAP.
	event uint64
	// buf carries content from the fetcher to the staging file, for
	// files the loader fetches itself.
	buf []byte
	// ahead fetches files of the events after the one being applied.
	ahead *ahead
}

// abs returns the target path of a warehouse-relative path, refusing one
// that is not clean and relative or that names the target's own state.
func (l *loader) abs(rel string) (string, error) {
	if err := checkRel(rel); err != nil {
		return "", err
	}
	if first, _, _ := strings.Cut(rel, "/"); first == stateFile || first == stagingDir || first == lockFile {
		return "", fmt.Errorf("%s is the target's own state: %w", rel, ErrUnsafePath)
	}
	return filepath.Join(l.target, filepath.FromSlash(rel)), nil
}

// parentOK checks that every directory above rel is a real directory, so
// that no operation on rel passes through a symlink. A missing one is
// os.ErrNotExist.
func (l *loader) parentOK(rel string) error {
	dir := l.target
	comps := strings.Split(rel, "/")
	for _, c := range comps[:len(comps)-1] {
		dir = filepath.Join(dir, c)
		fi, err := os.Lstat(dir)
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			return fmt.Errorf("%s is not a directory: %w", dir, ErrUnsafePath)
		}
	}
	return nil
}

// mkdirs makes the directory rel and its parents, never through a
// symlink; inside the fuzzy window a non-directory in the way is removed.
func (l *loader) mkdirs(rel string) error {
	if _, err := l.abs(rel); err != nil {
		return err
	}
	dir := l.target
	for _, c := range strings.Split(rel, "/") {
		dir = filepath.Join(dir, c)
		fi, err := os.Lstat(dir)
		if err == nil && fi.IsDir() {
			continue
		}
		if err == nil {
			if !l.fuzzy {
				return fmt.Errorf("mkdir %s: a non-directory is in the way: %w", dir, ErrUnsafePath)
			}
			if err := os.Remove(dir); err != nil {
				return err
			}
		} else if !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
	}
	return nil
}

// apply applies one event; adds are its files with new content, jobs
// (parallel to adds, or nil) those fetched ahead.
func (l *loader) apply(e *journal.Event, adds []journal.File, jobs []*staged) error {
	trusted := false
	var err error
	switch e.Type {
	case journal.CreateDatabase, journal.CreateTable, journal.AddPartition, journal.Mkdir:
		err = l.mkdirs(e.Path)
	case journal.DropDatabase, journal.DropTable, journal.DropPartition, journal.Rmdir, journal.Delete:
		err = l.remove(e.Path)
	case journal.Write, journal.Insert, journal.Truncate, journal.Restore:
	case journal.Rename, journal.RenameDatabase, journal.RenameTable, journal.RenamePartition:
		trusted, err = l.rename(e, adds)
	case journal.Link:
		trusted, err = l.link(e, adds)
	case journal.Symlink:
		err = l.symlink(e.Path, e.Target)
	default:
		err = fmt.Errorf("unknown event type %q: %w", e.Type, ErrFormat)
	}
	if err != nil {
		return err
	}
	// The names of a file with hard links share its content: it is
	// fetched for the first and linked to the others.
	var placed map[content]string
	for i, f := range adds {
		var j *staged
		if jobs != nil {
			j = jobs[i]
		}
		if from, ok := placed[contentOf(f)]; ok && j == nil && l.linkTo(from, f.Path) == nil {
			continue
		}
		if trusted && f.Path == e.NewPath {
			// Moved into place by the event itself: the content the
			// target already held. Only a size that disagrees is fetched.
			if p, err := l.abs(f.Path); err == nil {
				if fi, err := os.Lstat(p); err == nil && fi.Mode().IsRegular() && fi.Size() == f.Size {
					continue
				}
			}
		}
		if err := l.put(f, j); err != nil {
			return err
		}
		// Inside the fuzzy window put may have skipped content found
		// nowhere: only content known in place is linked from.
		if i < len(adds)-1 && f.Size > 0 && !l.fuzzy {
			if placed == nil {
				placed = map[content]string{}
			}
			placed[contentOf(f)] = f.Path
		}
	}
	return nil
}

// content identifies what a file holds.
type content struct {
	size  int64
	xxh64 string
}

func contentOf(f journal.File) content { return content{f.Size, f.XXH64} }

// linkTo makes rel another name of the file at from, which holds the
// content rel must hold (verified when it was placed).
func (l *loader) linkTo(from, rel string) error {
	src, err := l.abs(from)
	if err != nil {
		return err
	}
	// The staged name is left when rel was already a name of src: place
	// removes it.
	return l.place(rel, "link", func(tmp string) error { return os.Link(src, tmp) })
}

// place makes rel what create makes at a staging name: staged, then
// renamed into place, so rel is replaced atomically. The staging name is
// removed after.
func (l *loader) place(rel, name string, create func(tmp string) error) error {
	p, err := l.abs(rel)
	if err != nil {
		return err
	}
	if err := l.mkparent(rel); err != nil {
		return err
	}
	tmp := filepath.Join(l.staging, name)
	os.Remove(tmp)
	if err := create(tmp); err != nil {
		return err
	}
	defer os.Remove(tmp)
	return l.renameOver(tmp, p)
}

// mkparent makes the directory rel is in, unless that is the target.
func (l *loader) mkparent(rel string) error {
	if dir := path.Dir(rel); dir != "." {
		return l.mkdirs(dir)
	}
	return nil
}

// renameOver renames the staged tmp to p, replacing what p was. Inside
// the fuzzy window a directory in the way is removed: in a tree that
// raced, the non-directory is the state the event describes.
func (l *loader) renameOver(tmp, p string) error {
	err := os.Rename(tmp, p)
	if err != nil && l.fuzzy {
		if err = os.RemoveAll(p); err == nil {
			err = os.Rename(tmp, p)
		}
	}
	return err
}

func (l *loader) remove(rel string) error {
	p, err := l.abs(rel)
	if err != nil {
		return err
	}
	if err := l.parentOK(rel); errors.Is(err, os.ErrNotExist) {
		return nil // its directory is gone already
	} else if err != nil {
		return err
	}
	return os.RemoveAll(p)
}

// rename reports whether it moved the source into place.
func (l *loader) rename(e *journal.Event, adds []journal.File) (bool, error) {
	oldAbs, err := l.abs(e.Path)
	if err != nil {
		return false, err
	}
	newAbs, err := l.abs(e.NewPath)
	if err != nil {
		return false, err
	}
	if err := l.parentOK(e.Path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, err
	}
	_, oldErr := os.Lstat(oldAbs)
	_, newErr := os.Lstat(newAbs)
	switch {
	case oldErr == nil && e.Target == "exchange":
		// Both ends exist before and after an exchange: the content
		// tells whether it was done already.
		if len(adds) > 0 && l.holds(adds[0]) {
			return true, nil
		}
		if err := l.parentOK(e.NewPath); err != nil {
			return false, err
		}
		return true, unix.Renameat2(unix.AT_FDCWD, oldAbs, unix.AT_FDCWD, newAbs, unix.RENAME_EXCHANGE)
	case oldErr == nil && l.fuzzy && isDir(newAbs):
		// Both ends exist in a tree that raced with the walk: the
		// destination directory is the newer state.
		return false, os.RemoveAll(oldAbs)
	case oldErr == nil:
		if err := l.mkparent(e.NewPath); err != nil {
			return false, err
		}
		// rename(2) itself: it replaces an empty directory, which
		// os.Rename refuses whenever the new name is a directory.
		err := rename(oldAbs, newAbs)
		if err != nil && l.fuzzy && newErr == nil {
			// Both ends exist in a tree that raced with the walk: the
			// destination is the newer state.
			return false, os.RemoveAll(oldAbs)
		}
		return err == nil, err
	case newErr == nil:
		return false, nil // renamed already; adds are checked by content
	case len(adds) > 0 || l.fuzzy:
		return false, nil // the adds fetch the content
	}
	return false, fmt.Errorf("rename %s to %s: neither exists at the target", e.Path, e.NewPath)
}

// link reports whether it linked the source into place.
func (l *loader) link(e *journal.Event, adds []journal.File) (bool, error) {
	oldAbs, err := l.abs(e.Path)
	if err != nil {
		return false, err
	}
	newAbs, err := l.abs(e.NewPath)
	if err != nil {
		return false, err
	}
	if _, err := os.Lstat(newAbs); err == nil {
		return false, nil // linked already; adds are checked by content
	}
	if err := l.parentOK(e.Path); err == nil {
		if _, err := os.Lstat(oldAbs); err == nil {
			if err := l.mkparent(e.NewPath); err != nil {
				return false, err
			}
			err := os.Link(oldAbs, newAbs)
			return err == nil, err
		}
	}
	if len(adds) > 0 || l.fuzzy {
		return false, nil // a copy, fetched by the adds
	}
	return false, fmt.Errorf("link %s to %s: the source is not at the target", e.NewPath, e.Path)
}

func (l *loader) symlink(rel, target string) error {
	p, err := l.abs(rel)
	if err != nil {
		return err
	}
	if t, err := os.Readlink(p); err == nil && t == target {
		return nil
	}
	// Durable with the next state (writeState).
	return l.place(rel, "symlink", func(tmp string) error { return os.Symlink(target, tmp) })
}

func isDir(p string) bool {
	fi, err := os.Lstat(p)
	return err == nil && fi.IsDir()
}

// rename is rename(2): newAbs, if it exists, is replaced — a file by
// anything but a directory, an empty directory by a directory.
func rename(oldAbs, newAbs string) error {
	if err := unix.Renameat2(unix.AT_FDCWD, oldAbs, unix.AT_FDCWD, newAbs, 0); err != nil {
		return &os.LinkError{Op: "rename", Old: oldAbs, New: newAbs, Err: err}
	}
	return nil
}

// holds says whether the target already has f's content at f.Path.
func (l *loader) holds(f journal.File) bool {
	p, err := l.abs(f.Path)
	if err != nil || l.parentOK(f.Path) != nil {
		return false
	}
	fi, err := os.Lstat(p)
	if err != nil || !fi.Mode().IsRegular() || fi.Size() != f.Size {
		return false
	}
	_, sum, err := checksum.File(p, make([]byte, 256<<10))
	return err == nil && sum == f.XXH64
}

// put makes f.Path hold f's content: skipped if it does already, else
// staged (fetched ahead as j, or fetched now), verified, and renamed into
// place.
func (l *loader) put(f journal.File, j *staged) error {
	p, err := l.abs(f.Path)
	if err != nil {
		return err
	}
	if err := l.mkparent(f.Path); err != nil {
		return err
	}
	var tmp string
	if j != nil {
		tmp, err = l.ahead.take(j)
	} else {
		if l.holds(f) {
			return nil
		}
		if l.buf == nil {
			l.buf = make([]byte, copyBuf)
		}
		tmp, err = l.fetchTo(l.ctx, f, l.event, l.buf)
	}
	if errors.Is(err, ErrNoCopy) && l.fuzzy {
		l.res.Missing++
		return nil
	}
	if err != nil {
		return err
	}
	defer os.Remove(tmp) // after a failed rename
	if err := l.renameOver(tmp, p); err != nil {
		return err
	}
	l.res.Files++
	l.res.Bytes += f.Size
	return nil // durable with the next state (writeState)
}

// copyBuf is the size of the reads content is copied in: large reads mean
// fewer syscalls and longer readahead.
const copyBuf = 1 << 20

// fetchTo fetches f's content, new in event (0: a BOOTSTRAP), into a new
// staging file and returns its name once size and xxh64 are verified. A
// live file that changed under the read is fetched again from cmroot,
// where its original is by then; so is one whose path the fetcher refuses
// to follow (a symlink leading out of the warehouse took the file's name
// since: the path is clean, checkRel saw to that). The staging file is
// removed on error.
func (l *loader) fetchTo(ctx context.Context, f journal.File, event uint64, buf []byte) (string, error) {
	tmp, err := os.CreateTemp(l.staging, "f-*")
	if err != nil {
		return "", err
	}
	if f.Size > 0 {
		if event != 0 {
			ctx = WithEvent(ctx, event)
		}
		err = l.stage(ctx, tmp, f, buf)
		unsafe := errors.Is(err, ErrUnsafePath)
		if f.CM == "" && (unsafe || errors.Is(err, ErrStale) || errors.Is(err, ErrChecksum)) {
			retry := f
			retry.CM = CMName(f)
			if rerr := l.stage(ctx, tmp, retry, buf); rerr == nil || !unsafe {
				err = rerr
			} else {
				err = fmt.Errorf("%w; and %w", err, rerr)
			}
		}
	}
	if err == nil {
		err = tmp.Chmod(0o644)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp.Name())
		return "", err
	}
	return tmp.Name(), nil
}

// stage copies f's content from the fetcher into tmp, checking size and
// xxh64 as it streams.
func (l *loader) stage(ctx context.Context, tmp *os.File, f journal.File, buf []byte) error {
	if err := tmp.Truncate(0); err != nil {
		return err
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return err
	}
	rc, err := l.fetch.Fetch(ctx, f)
	if err != nil {
		return err
	}
	defer rc.Close()
	h := checksum.New()
	w := &sizeWriter{w: &countWriter{w: io.MultiWriter(tmp, h), prog: l.prog}, limit: f.Size}
	// A fetcher's reader that is an io.WriterTo writes straight into w.
	_, err = io.CopyBuffer(w, rc, buf)
	if errors.Is(err, errTooLong) {
		return fmt.Errorf("%s: fetched more than %d bytes: %w", f.Path, f.Size, ErrChecksum)
	}
	if err != nil {
		return err
	}
	if sum := journal.FormatSum(h.Sum64()); w.n != f.Size || sum != f.XXH64 {
		return fmt.Errorf("%s: fetched %d bytes with xxh64 %s, want %d bytes with xxh64 %s: %w", f.Path, w.n, sum, f.Size, f.XXH64, ErrChecksum)
	}
	return nil
}

// errTooLong is sizeWriter's refusal of bytes past its limit.
var errTooLong = errors.New("more bytes than expected")

// sizeWriter passes at most limit bytes on to w, counting them in n.
type sizeWriter struct {
	w        io.Writer
	n, limit int64
}

func (s *sizeWriter) Write(p []byte) (int, error) {
	if s.n+int64(len(p)) > s.limit {
		return 0, errTooLong
	}
	m, err := s.w.Write(p)
	s.n += int64(m)
	return m, err
}

type countWriter struct {
	w    io.Writer
	prog Progress
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	if c.prog != nil && n > 0 {
		c.prog.Bytes(int64(n))
	}
	return n, err
}
