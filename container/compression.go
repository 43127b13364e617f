package container

import (
	"bufio"
	"fmt"
	"io"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// Compression is how an exported tarball is compressed on the wire.
type Compression string

// The compressions Export and Import know.
const (
	None   Compression = "none"
	Gzip   Compression = "gzip"
	Snappy Compression = "snappy"
	LZ4    Compression = "lz4"
	Zstd   Compression = "zstd"
)

// Compressions lists every compression, None first.
var Compressions = []Compression{None, Gzip, Snappy, LZ4, Zstd}

// zstdMaxWindow bounds the window a zstd stream may ask the decoder for, so
// a hostile frame header cannot make Import allocate gigabytes. Our own
// encoder uses far less (8 MiB at the default level).
const zstdMaxWindow = 64 << 20

// ParseCompression returns the compression named s; "" means None. Any
// other name fails with ErrBadCompression.
func ParseCompression(s string) (Compression, error) {
	if s == "" {
		return None, nil
	}
	for _, c := range Compressions {
		if string(c) == s {
			return c, nil
		}
	}
	return "", fmt.Errorf("compression %q: %w", s, ErrBadCompression)
}

// ext is the tarball's file name suffix after ".tar".
func (c Compression) ext() string {
	switch c {
	case Gzip:
		return ".gz"
	case Snappy:
		return ".sz"
	case LZ4:
		return ".lz4"
	case Zstd:
		return ".zst"
	}
	return ""
}

// norm maps "" to None and refuses unknown names.
func (c Compression) norm() (Compression, error) { return ParseCompression(string(c)) }

// nopWriteCloser is None's compressor.
type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// newWriter returns a compressor writing to w. Closing it ends the
// compressed stream (it does not close w).
func (c Compression) newWriter(w io.Writer) (io.WriteCloser, error) {
	switch c {
	case None, "":
		return nopWriteCloser{w}, nil
	case Gzip:
		return gzip.NewWriterLevel(w, gzip.DefaultCompression)
	case Snappy:
		// The framed snappy format, so any snappy implementation can read
		// what we send; s2 writes it faster than golang/snappy.
		return s2.NewWriter(w, s2.WriterSnappyCompat()), nil
	case LZ4:
		zw := lz4.NewWriter(w)
		if err := zw.Apply(lz4.ChecksumOption(true)); err != nil {
			return nil, err
		}
		return zw, nil
	case Zstd:
		// Two encoder goroutines: a replication shares the node with
		// others, and the peak RSS target is per process.
		return zstd.NewWriter(w, zstd.WithEncoderConcurrency(2))
	}
	return nil, fmt.Errorf("compression %q: %w", c, ErrBadCompression)
}

// newReader returns a decompressor reading from r. Each format carries a
// checksum of the data (gzip CRC-32, snappy CRC-32C per frame, lz4 content
// checksum, zstd XXH64), so a flipped bit on the wire fails the read.
func (c Compression) newReader(r io.Reader) (io.ReadCloser, error) {
	switch c {
	case None, "":
		return io.NopCloser(r), nil
	case Gzip:
		zr, err := gzip.NewReader(r)
		if err != nil {
			return nil, err
		}
		zr.Multistream(false)
		return zr, nil
	case Snappy:
		return io.NopCloser(s2.NewReader(r)), nil
	case LZ4:
		return io.NopCloser(lz4.NewReader(r)), nil
	case Zstd:
		zr, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(2), zstd.WithDecoderMaxWindow(zstdMaxWindow))
		if err != nil {
			return nil, err
		}
		return zstdReadCloser{zr}, nil
	}
	return nil, fmt.Errorf("compression %q: %w", c, ErrBadCompression)
}

// zstdReadCloser releases the decoder's goroutines on Close.
type zstdReadCloser struct{ *zstd.Decoder }

func (z zstdReadCloser) Close() error {
	z.Decoder.Close()
	return nil
}

// bufferedReader is a large read buffer in front of a decompressor, so the
// tar reader's small reads (512-byte headers) do not each reach it.
func bufferedReader(r io.Reader) *bufio.Reader { return bufio.NewReaderSize(r, copyBufSize) }
