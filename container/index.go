package container

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/cmfs-project/cmfs/internal/checksum"
	bolt "go.etcd.io/bbolt"
)

// BlockID addresses a block by content: its checksum (package checksum:
// the file checksum of its bytes) and its length. Size -1 in a lookup means any size.
type BlockID struct {
	Sum  uint64
	Size int64
}

// BlockIDOf returns the BlockID of p.
func BlockIDOf(p []byte) BlockID { return BlockID{Sum: checksum.Sum64(p), Size: int64(len(p))} }

// String formats b as "<16 hex digits>-<size>", the way cmroot names its
// entries, or as the bare sum when the size is unknown.
func (b BlockID) String() string {
	if b.Size < 0 {
		return checksum.Format(b.Sum)
	}
	return checksum.Format(b.Sum) + "-" + strconv.FormatInt(b.Size, 10)
}

// ParseBlockID parses "<xxh64>-<size>" or a bare 16-hex-digit xxh64 (Size
// -1: any block with that sum).
func ParseBlockID(s string) (BlockID, error) {
	sum, size, hasSize := strings.Cut(s, "-")
	if len(sum) != 16 {
		return BlockID{}, fmt.Errorf("block id %q: want <16 hex digits>[-<size>]", s)
	}
	v, err := strconv.ParseUint(sum, 16, 64)
	if err != nil {
		return BlockID{}, fmt.Errorf("block id %q: want <16 hex digits>[-<size>]", s)
	}
	b := BlockID{Sum: v, Size: -1}
	if hasSize {
		n, err := strconv.ParseInt(size, 10, 64)
		if err != nil || n < 0 {
			return BlockID{}, fmt.Errorf("block id %q: bad size", s)
		}
		b.Size = n
	}
	return b, nil
}

// The block index: one bucket, key = sum (8 bytes, big endian) then size
// (8), value = chunk (4), offset (8), length (8). Big-endian keys make
// bbolt's order the order the container checksum is computed in.
var blocksBucket = []byte("blocks")

const (
	keyLen   = 16
	valueLen = 20
)

// record is one index entry: where a block's bytes are.
type record struct {
	id    BlockID
	chunk int
	off   int64
}

func (r record) key() []byte {
	var k [keyLen]byte
	binary.BigEndian.PutUint64(k[0:], r.id.Sum)
	binary.BigEndian.PutUint64(k[8:], uint64(r.id.Size))
	return k[:]
}

func (r record) value() []byte {
	var v [valueLen]byte
	binary.BigEndian.PutUint32(v[0:], uint32(r.chunk))
	binary.BigEndian.PutUint64(v[4:], uint64(r.off))
	binary.BigEndian.PutUint64(v[12:], uint64(r.id.Size))
	return v[:]
}

func decodeRecord(k, v []byte) (record, error) {
	if len(k) != keyLen || len(v) != valueLen {
		return record{}, fmt.Errorf("index record of %d+%d bytes", len(k), len(v))
	}
	r := record{
		id:    BlockID{Sum: binary.BigEndian.Uint64(k), Size: int64(binary.BigEndian.Uint64(k[8:]))},
		chunk: int(binary.BigEndian.Uint32(v)),
		off:   int64(binary.BigEndian.Uint64(v[4:])),
	}
	length := int64(binary.BigEndian.Uint64(v[12:]))
	if r.id.Size < 0 || r.off < 0 || length != r.id.Size || r.chunk >= maxChunks {
		return record{}, fmt.Errorf("index record %s: chunk %d offset %d length %d", r.id, r.chunk, r.off, length)
	}
	return r, nil
}

// openIndex opens (creating if needed) a container's index for writing.
// Commits are not fsynced: CloseContainer syncs once (see doc.go).
func openIndex(dir string) (*bolt.DB, error) {
	db, err := bolt.Open(filepath.Join(dir, dbName), 0o644, &bolt.Options{Timeout: time.Second, NoSync: true})
	if err != nil {
		return nil, fmt.Errorf("open index %s: %w", dir, err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(blocksBucket)
		return err
	}); err != nil {
		db.Close()
		return nil, fmt.Errorf("open index %s: %w", dir, err)
	}
	return db, nil
}

// readIndex reads every record of the index at path in key order and
// returns them with the container checksum over them.
func readIndex(path string) (recs []record, sum uint64, err error) {
	h := xxhash.New()
	err = viewIndex(path, func(tx *bolt.Tx) error {
		b := tx.Bucket(blocksBucket)
		if b == nil {
			return errors.New("no blocks bucket")
		}
		return b.ForEach(func(k, v []byte) error {
			r, err := decodeRecord(k, v)
			if err != nil {
				return err
			}
			h.Write(k)
			h.Write(v)
			recs = append(recs, r)
			return nil
		})
	})
	if err != nil {
		return nil, 0, err
	}
	return recs, h.Sum64(), nil
}

// viewIndex runs fn in a read-only transaction on the index at path.
// bbolt trusts its file and panics on some corruptions; a panic here
// becomes ErrCorrupt, as does fn's error, so a bad file can only make its
// container UNHEALTHY, never stop the node.
func viewIndex(path string, fn func(tx *bolt.Tx) error) (err error) {
	if _, err := os.Stat(path); err != nil {
		return err // bolt.Open would create it
	}
	db, err := bolt.Open(path, 0o644, &bolt.Options{Timeout: time.Second, ReadOnly: true})
	if err != nil {
		return fmt.Errorf("open index %s: %v: %w", path, err, ErrCorrupt)
	}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("read index %s: %v: %w", path, p, ErrCorrupt)
		}
		db.Close()
	}()
	if err := db.View(fn); err != nil {
		return fmt.Errorf("read index %s: %v: %w", path, err, ErrCorrupt)
	}
	return nil
}

// indexChecksum computes the container checksum over an open index.
func indexChecksum(db *bolt.DB) (uint64, error) {
	h := xxhash.New()
	err := db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(blocksBucket).ForEach(func(k, v []byte) error {
			h.Write(k)
			h.Write(v)
			return nil
		})
	})
	return h.Sum64(), err
}

// fileChecksum returns the size and xxh64 of the file at path.
func fileChecksum(path string) (int64, uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	h := xxhash.New()
	n, err := io.CopyBuffer(h, struct{ io.Reader }{f}, make([]byte, 256<<10))
	return n, h.Sum64(), err
}
