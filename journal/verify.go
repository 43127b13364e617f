package journal

import (
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/cmfs-project/cmfs/internal/boltcheck"
)

// Verify checks the journal's invariants: ids dense from 1 and strictly
// increasing, every record's checksum, every event decodable, with a
// non-empty type and path, and every file's xxh64 well-formed.
//
// A read-only Log also checks every bbolt page (a writer did at Open):
// an id that is not its own, a page type that does not belong, elements
// outside their page, keys out of order.
//
// It reads the whole log in one read transaction. Errors: ErrCorrupt
// (wrapped, naming the id or the damaged page), ErrClosed, ErrLocked.
func (l *Log) Verify() error {
	if err := l.flushAll(); err != nil {
		return fmt.Errorf("verify journal %s: %w", l.path, err)
	}
	committed := l.last.Load()
	var last uint64
	err := l.view(func(tx *bolt.Tx) error {
		if l.db == nil {
			// Under the shared lock: no writer changes the file meanwhile.
			if err := boltcheck.Check(l.path); err != nil {
				return asCorrupt(err)
			}
		}
		if err := checkVersion(tx); err != nil {
			return fmt.Errorf("%v: %w", err, ErrCorrupt)
		}
		b := tx.Bucket(eventsBucket)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			id, ok := keyID(k)
			if !ok {
				return fmt.Errorf("after event %d: key %x: %w", last, k, ErrCorrupt)
			}
			if id != last+1 {
				return fmt.Errorf("event %d: missing (next stored is %d): %w", last+1, id, ErrCorrupt)
			}
			e, err := decodeRecord(id, v)
			if err != nil {
				return err
			}
			if err := validate(e); err != nil {
				return fmt.Errorf("event %d: %v: %w", id, err, ErrCorrupt)
			}
			last = id
			return nil
		})
	})
	if err != nil {
		return fmt.Errorf("verify journal %s: %w", l.path, err)
	}
	if l.db != nil && last < committed {
		return fmt.Errorf("verify journal %s: log ends at event %d, %d were committed: %w", l.path, last, committed, ErrCorrupt)
	}
	return nil
}
