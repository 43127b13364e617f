package source

import (
	"github.com/cmfs-project/cmfs/repl"

	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"google.golang.org/grpc"

	"github.com/cmfs-project/cmfs/api/replpb"
	"github.com/cmfs-project/cmfs/cmroot"
	"github.com/cmfs-project/cmfs/internal/checksum"
	"github.com/cmfs-project/cmfs/journal"
)

// chunkSize is how many bytes one Chunk carries.
const chunkSize = 1 << 20

// Where the bytes of a ReadFile come from (Chunk.from).
const (
	fromLive   = "live"
	fromCMRoot = "cmroot"
)

// ReadFile implements replpb.SourceServer.
func (s *Server) ReadFile(req *replpb.ReadFileRequest, stream grpc.ServerStreamingServer[replpb.Chunk]) error {
	return toStatus(s.readFile(stream.Context(), req, func(c *replpb.Chunk) error {
		if err := stream.Send(c); err != nil {
			return err
		}
		s.stats.bytes.Add(uint64(len(c.Data)))
		if c.Eof {
			s.stats.files.Add(1)
		}
		return nil
	}))
}

// readFile sends the file req names: the live one when its size matches
// and the client did not ask for cmroot, else the cmroot entry, else —
// for content an event named at a path — wherever it has moved since
// (repl.Locate).
func (s *Server) readFile(ctx context.Context, req *replpb.ReadFileRequest, send func(*replpb.Chunk) error) error {
	rel, err := checkRequest(req)
	if err != nil {
		return err
	}
	// The fast path: the live file, streamed at once (the client checks
	// it), unless the client read it already and found other bytes
	// (prefer_cmroot), or it is a preserved original (a cmroot name).
	if rel != "" && !req.PreferCmroot && req.Cm == "" {
		f, err := s.openLive(rel, req.Size)
		if err != nil {
			return err
		}
		if f != nil {
			defer f.Close()
			return sendFile(ctx, f, req, fromLive, send)
		}
	}
	name := cmroot.Name(req.Xxh64, req.Size)
	if _, err := cmroot.EntryPath(s.cfg.CMRoot, name); err != nil {
		return fmt.Errorf("cmroot entry %s: %w", name, ErrInvalid)
	}
	f, err := s.openEntry(name)
	from := fromCMRoot
	if errors.Is(err, fs.ErrNotExist) && rel != "" && req.AfterEvent > 0 {
		// Not in cmroot yet: chase it along the renames after the event
		// and into cmroot, in the order it moves.
		want := journal.File{Path: rel, Size: req.Size, XXH64: req.Xxh64}
		skip := req.PreferCmroot || req.Cm != ""
		var where repl.Where
		f, where, err = repl.Locate(ctx, repl.Places{Events: serverEvents{s}, Live: s.openLive, CMRoot: s.openEntry}, want, req.AfterEvent, skip)
		if where == repl.AtPath {
			from = fromLive
		}
	}
	if errors.Is(err, fs.ErrNotExist) {
		chased := ""
		if rel != "" && req.AfterEvent > 0 {
			chased = fmt.Sprintf(", nor under a name renames after event %d gave it", req.AfterEvent)
		}
		switch {
		case rel == "" || req.Cm != "":
			return fmt.Errorf("no copy of %s with xxh64 %s (size %d): no cmroot entry %s%s: %w", rel, req.Xxh64, req.Size, name, chased, ErrNotFound)
		case req.PreferCmroot:
			return fmt.Errorf("no copy of %s with xxh64 %s (size %d): the file at the path has changed, not in cmroot%s: %w", rel, req.Xxh64, req.Size, chased, ErrNotFound)
		}
		return fmt.Errorf("no copy of %s with xxh64 %s (size %d): not at the path, not in cmroot%s: %w", rel, req.Xxh64, req.Size, chased, ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("fetch %s (xxh64 %s, size %d): %w", rel, req.Xxh64, req.Size, err)
	}
	defer f.Close()
	return sendFile(ctx, f, req, from, send)
}

// openEntry opens cmroot entry name.
func (s *Server) openEntry(name string) (*os.File, error) {
	p, err := cmroot.EntryPath(s.cfg.CMRoot, name)
	if err != nil {
		return nil, fmt.Errorf("cmroot entry %s: %w", name, ErrInvalid)
	}
	f, err := openEntry(p)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("cmroot entry %s: %w", name, err)
	}
	return f, err
}

// checkRequest validates req and returns its path, cleaned ("" for none).
func checkRequest(req *replpb.ReadFileRequest) (string, error) {
	if !checksum.Valid(req.Xxh64) {
		return "", fmt.Errorf("xxh64 %q: want 16 lowercase hex digits: %w", req.Xxh64, ErrInvalid)
	}
	if req.Size < 0 {
		return "", fmt.Errorf("size %d: negative: %w", req.Size, ErrInvalid)
	}
	if req.Cm != "" && req.Cm != cmroot.Name(req.Xxh64, req.Size) {
		return "", fmt.Errorf("cmroot name %q does not name xxh64 %s size %d: %w", req.Cm, req.Xxh64, req.Size, ErrInvalid)
	}
	p := req.Path
	switch {
	case strings.ContainsRune(p, 0):
		return "", fmt.Errorf("path %s contains a NUL: %w", strconv.Quote(p), ErrInvalid)
	case strings.HasPrefix(p, "/"):
		return "", fmt.Errorf("path %q is absolute, want one relative to the warehouse root: %w", p, ErrInvalid)
	}
	for _, el := range strings.Split(p, "/") {
		if el == ".." {
			return "", fmt.Errorf("path %q has a \"..\" element: %w", p, ErrInvalid)
		}
	}
	if p = path.Clean(p); p == "." {
		p = ""
	}
	return p, nil
}

// openLive opens the regular file at rel inside the warehouse root. It
// returns nil (and no error) when no file of that size is there, so the
// caller goes to cmroot.
func (s *Server) openLive(rel string, size int64) (*os.File, error) {
	if err := s.checkState(rel, rel); err != nil {
		return nil, err
	}
	// O_NONBLOCK: a FIFO must not hang the call; regular files ignore it.
	f, err := s.root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		var errno syscall.Errno
		switch {
		case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
			return nil, nil
		case !errors.As(err, &errno):
			// The path is lexically inside the root, so os.Root's only
			// refusal left is a symlink leading out (or any absolute one).
			return nil, fmt.Errorf("path %q leads outside the warehouse root through a symlink: %w", rel, ErrRefused)
		case errno == syscall.ELOOP:
			return nil, fmt.Errorf("path %q: too many symlinks: %w", rel, ErrRefused)
		}
		return nil, fmt.Errorf("open %s: %w", rel, err)
	}
	if moved, err := s.checkOpened(f, rel); err != nil || moved {
		f.Close()
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("stat %s: %w", rel, err)
	}
	if !fi.Mode().IsRegular() || fi.Size() != size {
		f.Close()
		return nil, nil
	}
	return f, nil
}

// checkState refuses a path inside a state directory; p is the path to
// check (relative to the root, or absolute for an opened file).
func (s *Server) checkState(rel, p string) error {
	deny := s.denyRel
	if filepath.IsAbs(p) {
		deny = s.denyAbs
	}
	for _, d := range deny {
		if p == d || strings.HasPrefix(p, d+"/") {
			return fmt.Errorf("path %q is in the state directory %s, which is never served: %w", rel, s.cfg.State, ErrRefused)
		}
	}
	return nil
}

// checkOpened refuses an opened file that lies in a state directory, by
// where the kernel says it is: a symlink inside the root may lead there.
// One that lies in cmroot is not refused but passed over (moved): cmfs
// preserves a file by renaming it into cmroot, which can happen between
// the open and the look, and the content is then served from cmroot by
// its name, as for a symlink that leads into cmroot.
func (s *Server) checkOpened(f *os.File, rel string) (moved bool, err error) {
	if len(s.denyAbs) == 0 {
		return false, nil // no state directory inside the root: os.Root keeps them out
	}
	p, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(f.Fd())))
	if err != nil {
		return false, fmt.Errorf("path %q: cannot tell where it leads, so not serving it: %w", rel, err)
	}
	if p == s.cfg.CMRoot || strings.HasPrefix(p, s.cfg.CMRoot+"/") {
		return true, nil
	}
	return false, s.checkState(rel, p)
}

// openEntry opens a cmroot entry file, which is never a symlink.
func openEntry(p string) (*os.File, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s is not a regular file", p)
	}
	return f, nil
}

// sendFile streams up to req.Size bytes of f, each chunk in a fresh buffer
// (gRPC may hold on to a sent message), then the last chunk with the
// xxh64 of what was sent (unless req.NoChecksum). A file that shrank under
// the read is sent as it is: the checksum tells the client.
func sendFile(ctx context.Context, f io.Reader, req *replpb.ReadFileRequest, from string, send func(*replpb.Chunk) error) error {
	var h *checksum.Digest
	if !req.NoChecksum {
		h = checksum.New()
	}
	first := true
	for left := req.Size; left > 0; {
		if err := ctx.Err(); err != nil {
			return err
		}
		buf := make([]byte, min(chunkSize, left))
		n, err := io.ReadFull(f, buf)
		left -= int64(n)
		if n > 0 {
			if h != nil {
				h.Write(buf[:n])
			}
			c := &replpb.Chunk{Data: buf[:n]}
			if first {
				c.From, first = from, false
			}
			if err := send(c); err != nil {
				return err
			}
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("read %s file: %w", from, err)
		}
	}
	last := &replpb.Chunk{Eof: true, From: from}
	if h != nil {
		last.Xxh64 = journal.FormatSum(h.Sum64())
	}
	return send(last)
}
