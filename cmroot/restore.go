package cmroot

import (
	"github.com/cmfs-project/cmfs/internal/durable"

	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Open opens the named entry for reading. It returns ErrNotFound if the
// entry does not exist.
func (s *Store) Open(name string) (*os.File, error) {
	if _, _, ok := ParseName(name); !ok {
		return nil, fmt.Errorf("open entry %s: %w", name, ErrNotFound)
	}
	f, err := os.Open(s.Path(name))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("open entry %s: %w", name, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("open entry %s: %w", name, err)
	}
	return f, nil
}

// Restore copies the named entry's content to dst atomically: through a
// temp file in dst's directory, fsynced and renamed over dst (replacing it
// if it exists), then dst's directory is fsynced. The entry stays. It fails
// with ErrChecksum, leaving dst untouched, if the content does not hash to
// the entry's name, and with ErrNotFound if there is no such entry. The
// restored file gets the entry's permission bits.
func (s *Store) Restore(name, dst string) error {
	if err := s.restore(name, dst, true); err != nil {
		return fmt.Errorf("restore %s to %s: %w", name, dst, err)
	}
	return nil
}

func (s *Store) restore(name, dst string, replace bool) error {
	sum, size, ok := ParseName(name)
	if !ok {
		return ErrNotFound
	}
	src, err := os.Open(s.Path(name))
	if errors.Is(err, os.ErrNotExist) {
		return ErrNotFound
	}
	if err != nil {
		return err
	}
	defer src.Close()
	fi, err := src.Stat()
	if err != nil {
		return err
	}
	return durable.Write(filepath.Dir(dst), fi.Mode().Perm(), true,
		func(f *os.File) error {
			n, got, _, err := s.fillSummed(f, src)
			if err != nil {
				return err
			}
			if n != size || got != sum {
				return fmt.Errorf("%w: entry has %d bytes hashing to %s", ErrChecksum, n, got)
			}
			return nil
		},
		func(tmp string) (string, error) {
			if replace {
				return dst, os.Rename(tmp, dst)
			}
			return dst, durable.RenameNoReplace(tmp, dst)
		})
}
