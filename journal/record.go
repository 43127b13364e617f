package journal

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"github.com/cespare/xxhash/v2"

	"github.com/cmfs-project/cmfs/internal/checksum"
)

// Bucket and key names of the on-disk layout (see the package doc).
var (
	eventsBucket = []byte("events")
	metaBucket   = []byte("meta")
	versionKey   = []byte("version")
)

const (
	formatVersion = "2"
	keyLen        = 8
	sumLen        = 8
)

func putKey(b []byte, id uint64) { binary.BigEndian.PutUint64(b, id) }

func keyID(k []byte) (uint64, bool) {
	if len(k) != keyLen {
		return 0, false
	}
	return binary.BigEndian.Uint64(k), true
}

// appendRecord appends the record of e (checksum, then payload) to buf.
func appendRecord(buf []byte, e *Event) ([]byte, error) {
	start := len(buf)
	buf = append(buf, make([]byte, sumLen)...)
	buf, err := appendJSON(buf, e)
	if err != nil {
		return buf[:start], err
	}
	binary.BigEndian.PutUint64(buf[start:], xxhash.Sum64(buf[start+sumLen:]))
	return buf, nil
}

// decodeRecord checks a record's checksum and decodes its payload. The
// errors it returns wrap ErrCorrupt and name the id.
func decodeRecord(id uint64, v []byte) (*Event, error) {
	if len(v) < sumLen {
		return nil, fmt.Errorf("event %d: record of %d bytes: %w", id, len(v), ErrCorrupt)
	}
	payload := v[sumLen:]
	if got, want := xxhash.Sum64(payload), binary.BigEndian.Uint64(v); got != want {
		return nil, fmt.Errorf("event %d: checksum %016x, stored %016x: %w", id, got, want, ErrCorrupt)
	}
	e := new(Event)
	if err := json.Unmarshal(payload, e); err != nil {
		return nil, fmt.Errorf("event %d: decode: %v: %w", id, err, ErrCorrupt)
	}
	if e.ID != id {
		return nil, fmt.Errorf("event %d: stored under key %d: %w", e.ID, id, ErrCorrupt)
	}
	return e, nil
}

// validate reports what makes e unfit for the journal, or nil.
func validate(e *Event) error {
	if e.Type == "" {
		return fmt.Errorf("empty type")
	}
	if e.Path == "" {
		return fmt.Errorf("empty path")
	}
	var b [64]byte
	if _, err := e.Time.AppendText(b[:0]); err != nil {
		return fmt.Errorf("time: %v", err)
	}
	for _, s := range [...]string{string(e.Type), e.Path, e.NewPath, e.DB, e.Table, e.Partition, e.Target} {
		if !utf8.ValidString(s) {
			return fmt.Errorf("%q is not valid UTF-8", s)
		}
	}
	for i := range e.Files {
		f := &e.Files[i]
		if !utf8.ValidString(f.Path) || !utf8.ValidString(f.CM) {
			return fmt.Errorf("file %q: name is not valid UTF-8", f.Path)
		}
		if f.Size < 0 {
			return fmt.Errorf("file %q: size %d", f.Path, f.Size)
		}
		if !checksum.Valid(f.XXH64) {
			return fmt.Errorf("file %q: xxh64 %q is not 16 lowercase hex digits", f.Path, f.XXH64)
		}
	}
	return nil
}
