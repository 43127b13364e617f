package cmroot

import (
	"errors"
	"fmt"
	"os"
	"time"

	bolt "go.etcd.io/bbolt"
)

// List calls fn for every entry in name order, and stops at the first
// error fn returns, which List returns. fn may call the Store's methods:
// List reads the index in batches and holds no transaction while fn runs.
func (s *Store) List(fn func(Entry) error) error {
	// Entries preserved while List runs may be missed.
	if err := s.flush(); err != nil {
		return fmt.Errorf("list: %w", err)
	}
	var after []byte
	for {
		batch, err := s.batch(after, 1024)
		if err != nil {
			return fmt.Errorf("list: %w", err)
		}
		if len(batch) == 0 {
			return nil
		}
		for _, e := range batch {
			if err := fn(e); err != nil {
				return err
			}
		}
		after = []byte(batch[len(batch)-1].Name)
	}
}

// batch returns up to n entries whose names sort after after.
func (s *Store) batch(after []byte, n int) ([]Entry, error) {
	var out []Entry
	err := s.view(func(b *bolt.Bucket) error {
		c := b.Cursor()
		k, v := c.First()
		if after != nil {
			k, v = c.Seek(after)
			if k != nil && string(k) == string(after) {
				k, v = c.Next()
			}
		}
		for ; k != nil && len(out) < n; k, v = c.Next() {
			r, err := decodeRecord(v)
			if err != nil {
				continue // Fsck reports and repairs it
			}
			out = append(out, r.entry(string(k)))
		}
		return nil
	})
	return out, err
}

// GC removes the entries whose retention has run out — Refreshed+retain at
// or before now — except those keep (if not nil) returns true for, and
// returns what it removed. retain 0 means the store's retention. An entry
// younger than retain is never removed, even if it is refreshed while GC
// runs. On error GC returns what it removed so far.
func (s *Store) GC(retain time.Duration, now time.Time, keep func(Entry) bool) (removed []Entry, err error) {
	if retain == 0 {
		retain = s.retain
	}
	if retain < 0 {
		return nil, fmt.Errorf("gc: negative retention %v", retain)
	}
	err = s.List(func(e Entry) error {
		if now.Before(e.Refreshed.Add(retain)) || (keep != nil && keep(e)) {
			return nil
		}
		gone, err := s.expire(e.Name, retain, now)
		if err != nil {
			return err
		}
		if gone != nil {
			removed = append(removed, *gone)
		}
		return nil
	})
	if err != nil {
		return removed, fmt.Errorf("gc: %w", err)
	}
	return removed, nil
}

// expire removes entry name if, checked again under its stripe, its
// retention has run out.
func (s *Store) expire(name string, retain time.Duration, now time.Time) (*Entry, error) {
	mu := s.stripe(name)
	mu.Lock()
	defer mu.Unlock()
	r, err := s.get(name)
	if err != nil || r == nil {
		return nil, err
	}
	e := r.entry(name)
	if now.Before(e.Refreshed.Add(retain)) {
		return nil, nil
	}
	if err := os.Remove(s.Path(name)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if err := s.put(name, nil); err != nil {
		return nil, err
	}
	return &e, nil
}
