package cmroot

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"

	"github.com/cmfs-project/cmfs/internal/checksum"
)

// Report is what Fsck found.
type Report struct {
	Entries    int      // good entries
	Orphans    []string // entries no event references (only when referenced is not nil)
	Missing    []string // referenced names absent from the store
	Corrupt    []string // files whose content does not hash to their name, or that are no entry
	IndexFixed int      // index records that disagreed with the directory (fixed with repair)
}

// Fsck checks the store: it hashes every entry to check it against its
// name, and compares the index with the directory. referenced holds the
// entry names events refer to; nil means "unknown" and reports no orphans.
//
// With repair, Fsck makes the index agree with the directory and moves
// corrupt entries aside to <dir>/.corrupt/ (it never deletes data). Orphans
// are left in place: they are originals preserved just before a crash
// prevented their event from being written, and age out by retention.
// Missing entries cannot be repaired; they are reported. Fsck may run while
// the store is in use.
func (s *Store) Fsck(referenced map[string]bool, repair bool) (Report, error) {
	rep, err := s.fsck(referenced, repair)
	if err != nil {
		return rep, fmt.Errorf("fsck %s: %w", s.dir, err)
	}
	return rep, nil
}

func (s *Store) fsck(referenced map[string]bool, repair bool) (Report, error) {
	var rep Report
	good := make(map[string]bool)
	bad := make(map[string]bool) // reported as corrupt, so not as missing
	err := s.walk(func(path, name string, fi os.FileInfo) error {
		ok, err := s.checkEntry(path, name, fi)
		if err != nil {
			return err
		}
		if !ok {
			rep.Corrupt = append(rep.Corrupt, name)
			bad[name] = true
			if repair {
				return s.quarantine(path, name)
			}
			return nil
		}
		good[name] = true
		rep.Entries++
		if referenced != nil && !referenced[name] {
			rep.Orphans = append(rep.Orphans, name)
		}
		fixed, err := s.checkRecord(name, repair)
		if fixed {
			rep.IndexFixed++
		}
		return err
	})
	if err != nil {
		return rep, err
	}
	// Records whose file is gone.
	err = s.List(func(e Entry) error {
		if good[e.Name] {
			return nil
		}
		fixed, err := s.checkRecord(e.Name, repair)
		if fixed {
			rep.IndexFixed++
		}
		return err
	})
	if err != nil {
		return rep, err
	}
	for name := range referenced {
		if !referenced[name] || good[name] || bad[name] {
			continue
		}
		if _, _, ok := ParseName(name); ok {
			if _, err := os.Lstat(s.Path(name)); err == nil {
				continue // appeared while Fsck ran
			}
		}
		rep.Missing = append(rep.Missing, name)
	}
	sort.Strings(rep.Orphans)
	sort.Strings(rep.Missing)
	sort.Strings(rep.Corrupt)
	return rep, nil
}

// checkEntry says whether the file name in the fan-out directories is a
// good entry: a regular file in the right place whose content hashes to
// its name.
func (s *Store) checkEntry(path, name string, fi os.FileInfo) (bool, error) {
	sum, size, ok := ParseName(name)
	if !ok || path != s.Path(name) || !fi.Mode().IsRegular() || fi.Size() != size {
		return false, nil
	}
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return true, nil // removed (by GC or Drop) since the walk: not corrupt
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	n, got, err := checksum.Reader(f, *bp)
	if err != nil {
		return false, err
	}
	return n == size && got == sum, nil
}

// checkRecord compares name's index record with its file, and with repair
// makes the record agree. fixed says they disagreed.
func (s *Store) checkRecord(name string, repair bool) (fixed bool, err error) {
	mu := s.stripe(name)
	mu.Lock()
	defer mu.Unlock()
	r, err := s.get(name)
	if err != nil {
		return false, err
	}
	fi, err := os.Lstat(s.Path(name))
	if errors.Is(err, os.ErrNotExist) {
		if r == nil {
			return false, nil
		}
		if repair {
			return true, s.put(name, nil)
		}
		return true, nil
	}
	if err != nil {
		return false, err
	}
	want := statRecord(fi)
	if r != nil {
		if r.size == want.size && r.ino == want.ino {
			return false, nil
		}
		want.preserved, want.refreshed, want.shared = r.preserved, r.refreshed, r.shared || want.shared
	}
	if repair {
		return true, s.put(name, &want)
	}
	return true, nil
}

// quarantine moves a corrupt file aside to .corrupt/ and forgets its record.
func (s *Store) quarantine(path, name string) error {
	mu := s.stripe(name)
	mu.Lock()
	defer mu.Unlock()
	dst := filepath.Join(s.dir, corruptDir, name+"."+strconv.FormatInt(s.sys.now().UnixNano(), 10))
	if err := os.Rename(path, dst); err != nil {
		return err
	}
	if path != s.Path(name) {
		return nil
	}
	r, err := s.get(name)
	if err != nil || r == nil {
		return err
	}
	return s.put(name, nil)
}
