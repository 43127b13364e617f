package bench

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// Measurement is what one timed run did.
type Measurement struct {
	Elapsed time.Duration
	Bytes   int64 // data moved
	Ops     int   // operations completed
	// Latencies, when set, holds the time of every single operation, as
	// the client saw it (FileSet's workloads).
	Latencies *Latencies
}

// Chunk is the size of every read and write of the large-file workloads.
const Chunk = 1 << 20

// filler hands out buffers of pseudo-random bytes, each stamped with a tag
// and a block index so that no two files (and no two blocks) share content:
// cmfs stores preserved originals by checksum, and identical content would
// let it skip work a real workload makes it do.
type filler struct{ buf []byte }

func newFiller(size int, seed uint64) *filler {
	r := rand.New(rand.NewPCG(seed, 0x636d6673))
	buf := make([]byte, size)
	for i := 0; i+8 <= len(buf); i += 8 {
		binary.LittleEndian.PutUint64(buf[i:], r.Uint64())
	}
	return &filler{buf: buf}
}

func (f *filler) block(tag, index uint64) []byte {
	binary.LittleEndian.PutUint64(f.buf[0:], tag)
	binary.LittleEndian.PutUint64(f.buf[8:], index)
	return f.buf
}

// SeqWrite creates path (it must not exist), writes size bytes in Chunk
// writes, fsyncs and closes it. The time covers open to close.
func SeqWrite(path string, size int64, tag uint64) (Measurement, error) {
	return writeFile(path, os.O_CREATE|os.O_EXCL, size, tag)
}

// Overwrite opens the existing path with O_TRUNC|O_WRONLY, writes size bytes
// of new content, fsyncs and closes it. The time covers open to close.
func Overwrite(path string, size int64, tag uint64) (Measurement, error) {
	return writeFile(path, os.O_TRUNC, size, tag)
}

// writeFile opens path write-only with flag added, writes size bytes of
// content tag in Chunk writes, fsyncs and closes it: the time covers open
// to close.
func writeFile(path string, flag int, size int64, tag uint64) (Measurement, error) {
	fill := newFiller(Chunk, tag)
	start := time.Now()
	f, err := os.OpenFile(path, flag|os.O_WRONLY, 0o644)
	if err != nil {
		return Measurement{}, err
	}
	n, err := writeAll(f, size, fill, tag)
	if err != nil {
		f.Close()
		return Measurement{}, err
	}
	if err := closeSynced(f); err != nil {
		return Measurement{}, err
	}
	return Measurement{Elapsed: time.Since(start), Bytes: n, Ops: 1}, nil
}

func writeAll(f *os.File, size int64, fill *filler, tag uint64) (int64, error) {
	var n int64
	for i := uint64(0); n < size; i++ {
		b := fill.block(tag, i)
		if rest := size - n; rest < int64(len(b)) {
			b = b[:rest]
		}
		w, err := f.Write(b)
		n += int64(w)
		if err != nil {
			return n, fmt.Errorf("write %s at %d: %w", f.Name(), n, err)
		}
	}
	return n, nil
}

func closeSynced(f *os.File) error {
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// SeqRead reads path to its end in Chunk reads.
func SeqRead(path string) (Measurement, error) {
	buf := make([]byte, Chunk)
	start := time.Now()
	f, err := os.Open(path)
	if err != nil {
		return Measurement{}, err
	}
	defer f.Close()
	var n int64
	for {
		r, err := f.Read(buf)
		n += int64(r)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return Measurement{}, err
		}
	}
	if err := f.Close(); err != nil {
		return Measurement{}, err
	}
	return Measurement{Elapsed: time.Since(start), Bytes: n, Ops: 1}, nil
}

// WriteAt opens the existing path O_WRONLY (no O_TRUNC), writes size bytes
// at off with one pwrite and closes it, without fsync: the in-place update a
// writer that patches a file does. The time covers open to close.
func WriteAt(path string, off int64, size int, tag uint64) (Measurement, error) {
	b := newFiller(size, tag).block(tag, uint64(off))
	start := time.Now()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return Measurement{}, err
	}
	if _, err := f.WriteAt(b, off); err != nil {
		f.Close()
		return Measurement{}, err
	}
	if err := f.Close(); err != nil {
		return Measurement{}, err
	}
	return Measurement{Elapsed: time.Since(start), Bytes: int64(size), Ops: 1}, nil
}

// FileSet is N small files of Size bytes spread over Workers subdirectories
// of Dir, one per worker, named so that they can be found again without a
// readdir (which would warm the kernel's dentry and attribute caches).
type FileSet struct {
	Dir     string
	N       int
	Workers int
	Size    int
}

// Path returns the name of file i. Worker i%Workers owns it.
func (s FileSet) Path(i int) string {
	return filepath.Join(s.subdir(i%s.Workers), fmt.Sprintf("f%06d", i))
}

func (s FileSet) subdir(w int) string { return filepath.Join(s.Dir, fmt.Sprintf("w%02d", w)) }

// Create makes the subdirectories (untimed), then creates, writes and
// closes every file, Workers at a time, without fsync.
func (s FileSet) Create() (Measurement, error) {
	for w := range s.Workers {
		if err := os.MkdirAll(s.subdir(w), 0o755); err != nil {
			return Measurement{}, err
		}
	}
	bufs := make([][]byte, s.Workers)
	for w := range bufs {
		bufs[w] = newFiller(s.Size, uint64(w)).buf
	}
	return s.each(func(w, i int) error {
		b := bufs[w]
		binary.LittleEndian.PutUint64(b, uint64(i))
		p := s.Path(i)
		fd, err := syscall.Open(p, syscall.O_CREAT|syscall.O_EXCL|syscall.O_WRONLY|syscall.O_CLOEXEC, 0o644)
		if err != nil {
			return &os.PathError{Op: "create", Path: p, Err: err}
		}
		if _, err := syscall.Write(fd, b); err != nil {
			syscall.Close(fd)
			return &os.PathError{Op: "write", Path: p, Err: err}
		}
		if err := syscall.Close(fd); err != nil {
			return &os.PathError{Op: "close", Path: p, Err: err}
		}
		return nil
	})
}

// Overwrite rewrites every existing file as a shell's `>` does:
// open(O_WRONLY|O_TRUNC), one write of Size bytes of new content, close,
// Workers at a time, without fsync. The content differs from Create's
// (another seed) and from file to file, so cmfs cannot find any of it
// among what it has already kept.
func (s FileSet) Overwrite() (Measurement, error) {
	bufs := make([][]byte, s.Workers)
	for w := range bufs {
		bufs[w] = newFiller(s.Size, overwriteSeed+uint64(w)).buf
	}
	return s.each(func(w, i int) error {
		b := bufs[w]
		binary.LittleEndian.PutUint64(b, uint64(i))
		p := s.Path(i)
		fd, err := syscall.Open(p, syscall.O_WRONLY|syscall.O_TRUNC|syscall.O_CLOEXEC, 0)
		if err != nil {
			return &os.PathError{Op: "open", Path: p, Err: err}
		}
		if _, err := syscall.Write(fd, b); err != nil {
			syscall.Close(fd)
			return &os.PathError{Op: "write", Path: p, Err: err}
		}
		if err := syscall.Close(fd); err != nil {
			return &os.PathError{Op: "close", Path: p, Err: err}
		}
		return nil
	})
}

// overwriteSeed keeps Overwrite's content apart from Create's, whose
// seeds are the worker numbers.
const overwriteSeed = 1 << 32

// Stat lstats every file, Workers at a time.
func (s FileSet) Stat() (Measurement, error) {
	return s.each(func(_, i int) error {
		var st syscall.Stat_t
		p := s.Path(i)
		if err := syscall.Lstat(p, &st); err != nil {
			return &os.PathError{Op: "lstat", Path: p, Err: err}
		}
		if st.Size != int64(s.Size) {
			return fmt.Errorf("lstat %s: size %d, want %d", p, st.Size, s.Size)
		}
		return nil
	})
}

// Unlink removes every file, Workers at a time.
func (s FileSet) Unlink() (Measurement, error) {
	return s.each(func(_, i int) error {
		p := s.Path(i)
		if err := syscall.Unlink(p); err != nil {
			return &os.PathError{Op: "unlink", Path: p, Err: err}
		}
		return nil
	})
}

// each runs op for every file, worker w doing the files it owns, and times
// the whole and every single op (each worker into its own histogram, so
// timing costs two clock reads per op and no lock). The first error stops
// every worker.
func (s FileSet) each(op func(w, i int) error) (Measurement, error) {
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
		failed   = make(chan struct{})
		lat      = make([]Latencies, s.Workers)
	)
	for w := range lat {
		lat[w].Alloc() // before the clock starts
	}
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if firstErr == nil {
			firstErr = err
			close(failed)
		}
	}
	start := time.Now()
	for w := range s.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := &lat[w]
			for i := w; i < s.N; i += s.Workers {
				t0 := time.Now()
				if err := op(w, i); err != nil {
					fail(err)
					return
				}
				l.Record(time.Since(t0))
				select {
				case <-failed:
					return
				default:
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		return Measurement{}, firstErr
	}
	all := &Latencies{}
	for w := range lat {
		all.Merge(&lat[w])
	}
	return Measurement{Elapsed: elapsed, Ops: s.N, Bytes: int64(s.N) * int64(s.Size), Latencies: all}, nil
}

// DropCaches writes back dirty data and drops the page, dentry and inode
// caches, so that the next run starts cold on every implementation alike.
// It needs root.
func DropCaches() error {
	syscall.Sync()
	return os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0)
}
