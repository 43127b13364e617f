package repl

import (
	"context"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/cmfs-project/cmfs/cmroot"
	"github.com/cmfs-project/cmfs/internal/checksum"
	"github.com/cmfs-project/cmfs/internal/statedir"
	"github.com/cmfs-project/cmfs/journal"
)

// Fetcher returns the bytes of the content a journal.File names.
//
// For f.CM == "" (new content at f.Path, relative to the warehouse root)
// it reads the live path if it still holds that content, else the cmroot
// entry for f's checksum and size. For f.CM != "" it reads that cmroot
// entry only. The reader checks what it delivers against f.Size and
// f.XXH64 and fails at the end if they differ: with an error wrapping
// ErrStale when the live file changed under it (the caller discards the
// bytes and asks again with f.CM = CMName(f), which skips the live path),
// ErrChecksum when a cmroot entry does not match its name.
//
// Errors from Fetch: ErrNoCopy (wrapped, naming path, size and checksum)
// when neither place has the content, ErrUnsafePath for a path that is
// absolute, holds "..", or leads out of the warehouse root.
//
// A load calls Fetch from several goroutines at once.
type Fetcher interface {
	Fetch(ctx context.Context, f journal.File) (io.ReadCloser, error)
}

// CMName is the name of the cmroot entry that holds f's content once it
// has been preserved (cmroot.Name).
func CMName(f journal.File) string { return cmroot.Name(f.XXH64, f.Size) }

// FetchStats counts what a Fetcher read at the source.
type FetchStats struct {
	Files int64 // fetches that returned a reader
	Bytes int64 // bytes read at the source, live and cmroot, including reads that turned out stale
	CM    int64 // fetches served from cmroot
	Stale int64 // live reads that did not match at the end
}

// LocalFetcher reads content from a warehouse root and its cmroot on this
// machine. It needs no lock on cmroot: it only opens entries by name. Use
// it through a pointer; its counters must not be copied.
type LocalFetcher struct {
	Root   string // the warehouse root (a cmfs backing directory or mountpoint)
	CMRoot string // the cmroot directory
	// Events, if set, lets Fetch follow content that moves: content found
	// neither at its path nor in cmroot is chased (Locate) along the
	// names later RENAME*, LINK events gave that path (renames preserve
	// nothing in cmroot) and into cmroot, in the order it moves. The
	// search starts after the event WithEvent put in the context; without
	// one it is not made.
	Events Events

	files, bytes, cm, stale atomic.Int64
}

var _ Fetcher = (*LocalFetcher)(nil)

// Stats returns the counters since the fetcher was made.
func (l *LocalFetcher) Stats() FetchStats {
	return FetchStats{Files: l.files.Load(), Bytes: l.bytes.Load(), CM: l.cm.Load(), Stale: l.stale.Load()}
}

// Fetch implements Fetcher.
func (l *LocalFetcher) Fetch(ctx context.Context, f journal.File) (io.ReadCloser, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if f.Size < 0 || !checksum.Valid(f.XXH64) {
		return nil, fmt.Errorf("fetch %s: bad size %d or xxh64 %q", f.Path, f.Size, f.XXH64)
	}
	if f.CM == "" {
		// The fast path: the live file, read once and checked as it is
		// delivered.
		file, err := l.openLive(f.Path, f.Size)
		if err != nil {
			return nil, fmt.Errorf("fetch %s: %w", f.Path, err)
		}
		if file != nil {
			l.files.Add(1)
			return l.reader(file, f, true), nil
		}
		// Gone, replaced, or of another size: moved on.
	}
	name := f.CM
	if name == "" {
		name = CMName(f)
	}
	file, err := l.openEntry(name)
	where := InCMRoot
	if event, ok := EventOf(ctx); ok && errors.Is(err, os.ErrNotExist) && f.Path != "" && l.Events != nil && name == CMName(f) {
		// Not in cmroot yet, also when the loader asked for cmroot after
		// a stale read: chase it (Locate), the path skipped if it was read.
		file, where, err = Locate(ctx, Places{Events: l.Events, Live: l.openLive, CMRoot: l.openEntry}, f, event, f.CM != "")
	}
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("fetch %s (%d bytes, xxh64 %s): not at the path, nor where later renames took it, nor in cmroot as %s: %w", f.Path, f.Size, f.XXH64, name, ErrNoCopy)
	}
	if err != nil {
		return nil, fmt.Errorf("fetch %s: %w", f.Path, err)
	}
	l.files.Add(1)
	if where == AtPath {
		return l.reader(file, f, true), nil
	}
	l.cm.Add(1)
	return l.reader(file, f, false), nil
}

// openLive opens the regular file at rel if it has size; nil and no error
// when none is there. A path that is unsafe or in the state directory is
// refused with ErrUnsafePath.
func (l *LocalFetcher) openLive(rel string, size int64) (*os.File, error) {
	if err := checkRel(rel); err != nil {
		return nil, err
	}
	if first, _, _ := strings.Cut(rel, "/"); first == statedir.Name {
		return nil, fmt.Errorf("the state directory is not served: %w", ErrUnsafePath)
	}
	file, err := openBeneath(l.Root, rel)
	if errors.Is(err, ErrUnsafePath) {
		return nil, err
	}
	if err != nil {
		return nil, nil
	}
	fi, err := file.Stat()
	if err != nil || !fi.Mode().IsRegular() || fi.Size() != size {
		file.Close()
		return nil, nil
	}
	return file, nil
}

// openEntry opens a cmroot entry by name.
func (l *LocalFetcher) openEntry(name string) (*os.File, error) {
	p, err := cmroot.EntryPath(l.CMRoot, name)
	if err != nil {
		return nil, fmt.Errorf("cmroot entry %q: not an entry name: %w", name, ErrUnsafePath)
	}
	return os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
}

// openBeneath opens root/rel for reading, refusing any resolution that
// leaves root (through ".." or a symlink). It uses openat2(RESOLVE_BENEATH)
// and falls back to resolving symlinks in user space where the kernel lacks
// it.
func openBeneath(root, rel string) (*os.File, error) {
	dir, err := os.Open(root)
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	fd, err := unix.Openat2(int(dir.Fd()), rel, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NONBLOCK,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS,
	})
	switch {
	case err == nil:
		return os.NewFile(uintptr(fd), filepath.Join(root, rel)), nil
	case errors.Is(err, unix.EXDEV):
		return nil, fmt.Errorf("%s leads outside %s: %w", rel, root, ErrUnsafePath)
	case errors.Is(err, unix.ENOSYS), errors.Is(err, unix.EPERM):
		return openResolved(root, rel)
	}
	return nil, &os.PathError{Op: "open", Path: filepath.Join(root, rel), Err: err}
}

func openResolved(root, rel string) (*os.File, error) {
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return nil, err
	}
	real, err := filepath.EvalSymlinks(filepath.Join(root, rel))
	if err != nil {
		return nil, err
	}
	if r, err := filepath.Rel(realRoot, real); err != nil || r == ".." || strings.HasPrefix(r, "../") {
		return nil, fmt.Errorf("%s leads outside %s: %w", rel, root, ErrUnsafePath)
	}
	return os.OpenFile(real, os.O_RDONLY|syscall.O_NONBLOCK, 0)
}

// verifyReader counts and hashes what it delivers and checks it against
// the file it was asked for when the source ends.
type verifyReader struct {
	f    *os.File
	want journal.File
	live bool
	n    int64
	h    hash.Hash64
	l    *LocalFetcher
	err  error
}

func (l *LocalFetcher) reader(f *os.File, want journal.File, live bool) *verifyReader {
	return &verifyReader{f: f, want: want, live: live, h: checksum.New(), l: l}
}

func (r *verifyReader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	// Never deliver more than the size asked for: a file that grew is
	// stale, and its tail must not reach the caller.
	if rest := r.want.Size - r.n + 1; int64(len(p)) > rest {
		p = p[:rest]
	}
	n, err := r.f.Read(p)
	r.l.bytes.Add(int64(n))
	r.n += int64(n)
	if r.n > r.want.Size {
		n -= int(r.n - r.want.Size)
		r.n = r.want.Size + 1
		r.err = r.mismatch("more than %d bytes", r.want.Size)
		return n, r.err
	}
	r.h.Write(p[:n])
	if err == io.EOF {
		if sum := journal.FormatSum(r.h.Sum64()); r.n != r.want.Size || sum != r.want.XXH64 {
			r.err = r.mismatch("%d bytes, xxh64 %s", r.n, sum)
			return n, r.err
		}
		r.err = io.EOF
	} else if err != nil {
		r.err = fmt.Errorf("read %s: %w", r.want.Path, err)
	}
	return n, r.err
}

func (r *verifyReader) mismatch(format string, args ...any) error {
	got := fmt.Sprintf(format, args...)
	if r.live {
		r.l.stale.Add(1)
		return fmt.Errorf("%s changed while read (want %d bytes, xxh64 %s; got %s): %w", r.want.Path, r.want.Size, r.want.XXH64, got, ErrStale)
	}
	return fmt.Errorf("cmroot entry for %s (want %d bytes, xxh64 %s) holds %s: %w", r.want.Path, r.want.Size, r.want.XXH64, got, ErrChecksum)
}

func (r *verifyReader) Close() error { return r.f.Close() }

type eventKey struct{}

// WithEvent returns a context that tells a Fetcher which event named the
// files it is asked for; a fetcher that follows renames starts after it.
func WithEvent(ctx context.Context, id uint64) context.Context {
	return context.WithValue(ctx, eventKey{}, id)
}

// EventOf returns the event id WithEvent stored in ctx.
func EventOf(ctx context.Context) (uint64, bool) {
	id, ok := ctx.Value(eventKey{}).(uint64)
	return id, ok
}

// maxFollow bounds how many names Locate follows a content to.
const maxFollow = 64
