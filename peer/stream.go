package peer

import (
	"fmt"
	"io"

	"github.com/cespare/xxhash/v2"

	"github.com/cmfs-project/cmfs/api/containerpb"
	"github.com/cmfs-project/cmfs/container"
	"github.com/cmfs-project/cmfs/internal/checksum"
)

// chunkSize is the most data one message carries.
const chunkSize = 1 << 20

// tarWriter cuts a tarball into TarChunk messages of chunkSize and sends
// them, each in a buffer of its own: a message handed to gRPC is never
// written to again. Close sends what is left with the end marker: eof and
// the xxh64 of the whole stream. Nothing is sent on an error; the caller
// ends the stream (cancels it) instead.
type tarWriter struct {
	send func(*containerpb.TarChunk) error
	id   uint64
	head *containerpb.TarChunk // the first message's header fields; nil once sent
	buf  []byte
	off  int64 // bytes sent
	sum  *xxhash.Digest
	err  error // sticky
}

// newTarWriter returns a writer of container id's tarball through send;
// head, if not nil, carries the fields of the first message (size,
// compression, wait_scan).
func newTarWriter(id uint64, head *containerpb.TarChunk, send func(*containerpb.TarChunk) error) *tarWriter {
	if head == nil {
		head = &containerpb.TarChunk{}
	}
	return &tarWriter{send: send, id: id, head: head, sum: xxhash.New()}
}

func (w *tarWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		if w.err != nil {
			return n, w.err
		}
		if w.buf == nil {
			w.buf = make([]byte, 0, chunkSize)
		}
		k := copy(w.buf[len(w.buf):cap(w.buf)], p)
		w.buf = w.buf[:len(w.buf)+k]
		p = p[k:]
		n += k
		if len(w.buf) == cap(w.buf) {
			w.flush(false)
		}
	}
	return n, w.err
}

// ReadFrom reads r into fresh message buffers directly (io.Copy uses it),
// sparing Write's copy.
func (w *tarWriter) ReadFrom(r io.Reader) (int64, error) {
	var n int64
	for w.err == nil {
		if w.buf == nil {
			w.buf = make([]byte, 0, chunkSize)
		}
		k, err := r.Read(w.buf[len(w.buf):cap(w.buf)])
		w.buf = w.buf[:len(w.buf)+k]
		n += int64(k)
		if len(w.buf) == cap(w.buf) {
			w.flush(false)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return n, err
		}
	}
	return n, w.err
}

// Close sends the last message: what is buffered, eof and the checksum.
func (w *tarWriter) Close() error {
	if w.err == nil {
		w.flush(true)
	}
	return w.err
}

// Sent returns how many bytes were handed to send.
func (w *tarWriter) Sent() int64 { return w.off }

func (w *tarWriter) flush(eof bool) {
	m := w.head
	w.head = nil
	if m == nil {
		m = &containerpb.TarChunk{}
	}
	m.ContainerId, m.Offset, m.Data = w.id, w.off, w.buf
	w.sum.Write(w.buf)
	w.off += int64(len(w.buf))
	w.buf = nil
	if eof {
		m.Eof, m.Xxh64 = true, checksum.Format(w.sum.Sum64())
	}
	w.err = w.send(m)
}

// tarReader is the receiving end of a tarWriter: it checks that messages
// belong to one container and their offsets are contiguous (ErrInvalid),
// and, when the end marker comes, the checksum (container.ErrCorrupt). A
// stream that ends without the marker is io.ErrUnexpectedEOF; only after
// it, and the stream's own end, does Read return io.EOF.
type tarReader struct {
	recv  func() (*containerpb.TarChunk, error)
	id    uint64
	off   int64 // bytes received
	sum   *xxhash.Digest
	data  []byte // the current message's data not yet read
	eof   bool   // the end marker came, checksum matching
	ended bool   // and then the stream's end
	err   error  // sticky
}

// newTarReader returns a reader of the stream whose first message is
// first; recv receives the others.
func newTarReader(first *containerpb.TarChunk, recv func() (*containerpb.TarChunk, error)) *tarReader {
	r := &tarReader{recv: recv, id: first.ContainerId, sum: xxhash.New()}
	if r.id == 0 {
		r.err = fmt.Errorf("tarball stream without a container id: %w", ErrInvalid)
	} else {
		r.err = r.accept(first)
	}
	return r
}

func (r *tarReader) accept(m *containerpb.TarChunk) error {
	if m.ContainerId != r.id {
		return fmt.Errorf("container %d: a message of container %d in its stream: %w", r.id, m.ContainerId, ErrInvalid)
	}
	if m.Offset != r.off {
		what := "a gap"
		if m.Offset < r.off {
			what = "an overlap"
		}
		return fmt.Errorf("container %d: message at offset %d, want %d (%s): %w", r.id, m.Offset, r.off, what, ErrInvalid)
	}
	r.sum.Write(m.Data)
	r.off += int64(len(m.Data))
	r.data = m.Data
	if m.Eof {
		if got := checksum.Format(r.sum.Sum64()); got != m.Xxh64 {
			return fmt.Errorf("container %d: tarball stream of %d bytes has xxh64 %s, the sender's is %s: %w", r.id, r.off, got, m.Xxh64, container.ErrCorrupt)
		}
		r.eof = true
	}
	return nil
}

// fill makes data non-empty unless the stream has ended or failed.
func (r *tarReader) fill() error {
	for len(r.data) == 0 && r.err == nil {
		if r.ended {
			return io.EOF
		}
		if r.eof {
			// Only the stream's end may follow the end marker: a message
			// after it is a malformed stream, not one to import.
			switch m, err := r.recv(); {
			case err == io.EOF:
				r.ended = true
			case err != nil:
				r.err = err
			default:
				r.err = fmt.Errorf("container %d: a message at offset %d after its end marker: %w", r.id, m.Offset, ErrInvalid)
			}
			continue
		}
		m, err := r.recv()
		switch {
		case err == io.EOF:
			r.err = fmt.Errorf("container %d: tarball stream ended at offset %d without its end marker: %w", r.id, r.off, io.ErrUnexpectedEOF)
		case err != nil:
			r.err = err
		default:
			r.err = r.accept(m)
		}
	}
	if len(r.data) > 0 {
		return nil
	}
	return r.err
}

func (r *tarReader) Read(p []byte) (int, error) {
	if err := r.fill(); err != nil {
		return 0, err
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

// copyTo writes the stream to w, each message's data as it is, until the
// end marker. It tells the two sides' errors apart: readErr is the
// stream's (received, malformed, cut off), writeErr w's.
func (r *tarReader) copyTo(w io.Writer) (readErr, writeErr error) {
	for {
		if err := r.fill(); err == io.EOF {
			return nil, nil
		} else if err != nil {
			return err, nil
		}
		n, err := w.Write(r.data)
		r.data = r.data[n:]
		if err != nil {
			return nil, err
		}
	}
}

// Received returns how many bytes of data came in.
func (r *tarReader) Received() int64 { return r.off }
