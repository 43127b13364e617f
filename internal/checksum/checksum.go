// Package checksum is how the project computes and spells a file's
// checksum: xxh64, written as the 16 lowercase hex digits `xxhsum -H64`
// prints. Events (journal.File.XXH64), cmroot entry names and the files
// a load fetches all use this spelling.
package checksum

import (
	"io"
	"os"

	"github.com/cespare/xxhash/v2"
)

const hexDigits = "0123456789abcdef"

// Format spells an xxh64 digest (as %016x would, without fmt's cost: it
// runs once per file of a listing).
func Format(d uint64) string {
	var b [16]byte
	for i := len(b) - 1; i >= 0; i-- {
		b[i] = hexDigits[d&0xf]
		d >>= 4
	}
	return string(b[:])
}

// Bytes returns the checksum of b.
func Bytes(b []byte) string { return Format(xxhash.Sum64(b)) }

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

// Reader returns how many bytes r delivers up to EOF and their checksum,
// reading through buf (nil: io.CopyBuffer's own).
func Reader(r io.Reader, buf []byte) (int64, string, error) {
	h := xxhash.New()
	n, err := io.CopyBuffer(h, r, buf)
	if err != nil {
		return n, "", err
	}
	return n, Format(h.Sum64()), nil
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
