// Package checksum is how the project computes and spells a file's
// checksum. Events (journal.File.XXH64), cmroot entry names, container
// blocks and the files a load fetches all use it.
//
// The checksum of content no longer than BlockSize is its xxh64, as
// `xxhsum -H64` prints it. Longer content is cut into blocks of BlockSize
// bytes (the last may be shorter), and its checksum is the xxh64 of the
// blocks' xxh64s, each as 8 big-endian bytes, in order. One changed
// block changes one of those sums, so the checksum of a large file after
// a small write costs a read of the blocks written, not of the whole file
// (Combine, with the block sums kept from before). By hand:
//
//	split -b 256K --filter='xxhsum -H64 - | cut -c1-16' FILE | xxd -r -p | xxhsum -H64 -
//
// for a file longer than 256 KiB, `xxhsum -H64 FILE` for any other.
//
// Every checksum is spelled as 16 lowercase hex digits (Format).
package checksum

import (
	"encoding/binary"
	"io"
	"os"

	"github.com/cespare/xxhash/v2"
)

// BlockSize is the length of the blocks a longer file's checksum is
// made of. Changing it changes every such checksum.
const BlockSize = 256 << 10

const hexDigits = "0123456789abcdef"

// Format spells a checksum (as %016x would, without fmt's cost: it
// runs once per file of a listing).
func Format(d uint64) string {
	var b [16]byte
	for i := len(b) - 1; i >= 0; i-- {
		b[i] = hexDigits[d&0xf]
		d >>= 4
	}
	return string(b[:])
}

// Sum64 returns the checksum of b as a number.
func Sum64(b []byte) uint64 {
	if len(b) <= BlockSize {
		return xxhash.Sum64(b)
	}
	d := New()
	d.Write(b)
	return d.Sum64()
}

// Bytes returns the checksum of b.
func Bytes(b []byte) string { return Format(Sum64(b)) }

// Valid says whether s is a checksum as Format spells it.
func Valid(s string) bool {
	if len(s) != 16 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Digest computes a checksum of what is written to it, in order. It is a
// hash.Hash64. Its zero value is not ready: use New.
type Digest struct {
	leaf *xxhash.Digest // the block being written
	top  *xxhash.Digest // the sums of the blocks before the last one complete
	n    int64          // bytes written
	last uint64         // the sum of the last complete block, once n ≥ BlockSize
	keep bool           // record every block's sum in sums
	sums []uint64
}

// New returns a Digest.
func New() *Digest { return &Digest{leaf: xxhash.New(), top: xxhash.New()} }

// NewKeeping returns a Digest that also keeps the sum of every block, for
// Blocks.
func NewKeeping() *Digest { d := New(); d.keep = true; return d }

// Reset makes d as New (or NewKeeping) returned it.
func (d *Digest) Reset() {
	d.leaf.Reset()
	d.top.Reset()
	d.n, d.last, d.sums = 0, 0, d.sums[:0]
}

// Size is the length of the checksum in bytes.
func (d *Digest) Size() int { return 8 }

// BlockSize is the block size of hash.Hash (the underlying xxh64's).
func (d *Digest) BlockSize() int { return 32 }

// Write adds p; it never fails.
func (d *Digest) Write(p []byte) (int, error) {
	total := len(p)
	for len(p) > 0 {
		in := int(d.n % BlockSize)
		if in == 0 && d.n > 0 {
			// A block ended before p: it is not the last one.
			d.push()
		}
		k := min(len(p), BlockSize-in)
		if k == BlockSize {
			// A whole block at once: xxhash's one-shot sum is faster than
			// its streaming digest.
			d.last = xxhash.Sum64(p[:k])
		} else {
			d.leaf.Write(p[:k])
		}
		d.n += int64(k)
		p = p[k:]
		if d.n%BlockSize == 0 {
			if k != BlockSize {
				d.last = d.leaf.Sum64()
				d.leaf.Reset()
			}
			if d.keep {
				d.sums = append(d.sums, d.last)
			}
		}
	}
	return total, nil
}

// push adds the last complete block's sum to the top-level hash.
func (d *Digest) push() {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], d.last)
	d.top.Write(b[:])
}

// Sum64 returns the checksum of what was written so far; d can go on.
func (d *Digest) Sum64() uint64 {
	switch {
	case d.n < BlockSize:
		return d.leaf.Sum64()
	case d.n == BlockSize:
		return d.last
	}
	// top holds every complete block but the last, or, once a partial
	// block follows, every complete one.
	top := *d.top
	var b [8]byte
	if d.n%BlockSize == 0 {
		binary.BigEndian.PutUint64(b[:], d.last)
	} else {
		binary.BigEndian.PutUint64(b[:], d.leaf.Sum64())
	}
	top.Write(b[:])
	return top.Sum64()
}

// Sum appends the checksum, big-endian, to b.
func (d *Digest) Sum(b []byte) []byte { return binary.BigEndian.AppendUint64(b, d.Sum64()) }

// Blocks returns the sum of every block written so far, the last one
// included when it is partial, for a Digest from NewKeeping (nil for
// another). The slice is the caller's.
func (d *Digest) Blocks() []uint64 {
	if !d.keep {
		return nil
	}
	out := append([]uint64(nil), d.sums...)
	if d.n%BlockSize != 0 || d.n == 0 {
		out = append(out, d.leaf.Sum64())
	}
	return out
}

// Block returns the sum of one block's bytes (at most BlockSize), as
// Combine takes it.
func Block(p []byte) uint64 { return xxhash.Sum64(p) }

// BlockCount returns how many blocks content of size bytes is made of: at
// least one, the empty content's.
func BlockCount(size int64) int {
	if size <= BlockSize {
		return 1
	}
	return int((size + BlockSize - 1) / BlockSize)
}

// Combine returns the checksum of content whose blocks have the sums
// given, in order (as Digest.Blocks returns them).
func Combine(sums []uint64) uint64 {
	if len(sums) == 1 {
		return sums[0]
	}
	b := make([]byte, 8*len(sums))
	for i, s := range sums {
		binary.BigEndian.PutUint64(b[8*i:], s)
	}
	return xxhash.Sum64(b)
}

// Reader returns how many bytes r delivers up to EOF and their checksum,
// reading through buf (nil: io.CopyBuffer's own).
func Reader(r io.Reader, buf []byte) (int64, string, error) {
	d := New()
	n, err := io.CopyBuffer(d, r, buf)
	if err != nil {
		return n, "", err
	}
	return n, Format(d.Sum64()), nil
}

// File returns the size and checksum of the file at path, read through
// buf (nil: a buffer of io.CopyBuffer's).
func File(path string, buf []byte) (int64, string, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	return Reader(f, buf)
}
