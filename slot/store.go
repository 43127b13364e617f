package slot

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/cmfs-project/cmfs/internal/durable"
	"github.com/cmfs-project/cmfs/internal/statedir"
)

// Errors returned by the package, wrapped with what was tried.
var (
	// ErrInvalid: a slot name that is empty, too long, not UTF-8 or holds
	// a control character.
	ErrInvalid = errors.New("slot: invalid slot name")
	// ErrNotFound: no slot of that name.
	ErrNotFound = errors.New("slot: no such slot")
	// ErrFormat: the slots file is damaged.
	ErrFormat = errors.New("slot: damaged slots file")
)

// Slot is one registered destination.
type Slot struct {
	Name string `json:"name"`
	// Position is the id of the last event the destination applied.
	Position uint64 `json:"position"`
	// Created is when the slot was registered, Updated when its
	// position was last confirmed.
	Created time.Time `json:"created"`
	Updated time.Time `json:"updated"`
	// Checked is the horizon this slot's destination was last found able
	// to catch up from (FirstLost found nothing): a slot behind the
	// horizon but checked against it is not lost.
	Checked uint64 `json:"checked,omitempty"`
}

// State is the content of the slots file.
type State struct {
	Slots []Slot `json:"slots"`
	// Horizon is the newest event that names an entry gc removed (an upper
	// bound): a destination at or past it can always catch up.
	Horizon uint64 `json:"horizon"`
}

// Lost reports whether the slot is behind the horizon: gc may have
// removed an original an event after its position needs.
func (st State) Lost(s Slot) bool { return s.Position < st.Horizon && s.Checked < st.Horizon }

// Oldest returns the smallest position of a slot that is not lost, and
// false when there is none: the events after it are the ones gc keeps
// the originals of.
func (st State) Oldest() (pos uint64, ok bool) {
	for _, s := range st.Slots {
		if st.Lost(s) {
			continue
		}
		if !ok || s.Position < pos {
			pos, ok = s.Position, true
		}
	}
	return pos, ok
}

// Find returns the slot called name.
func (st State) Find(name string) (Slot, bool) {
	for _, s := range st.Slots {
		if s.Name == name {
			return s, true
		}
	}
	return Slot{}, false
}

// Store is the slots file of one state directory. It holds nothing open:
// every call takes the lock, reads the file and, to change it, writes it
// again, so that several processes can share it.
type Store struct {
	dir string
}

// Open returns the store of state directory dir (which must exist; the
// file is created at the first change).
func Open(dir string) *Store { return &Store{dir: dir} }

// Path is the slots file.
func (s *Store) Path() string { return filepath.Join(s.dir, statedir.SlotsFile) }

// CheckName refuses a slot name that cannot be one: empty, longer than
// 200 bytes, not UTF-8, or with a control character.
func CheckName(name string) error {
	if name == "" || len(name) > 200 || !utf8.ValidString(name) ||
		strings.ContainsFunc(name, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return fmt.Errorf("%q: %w (1 to 200 bytes of UTF-8, no control characters)", name, ErrInvalid)
	}
	return nil
}

// Load reads the slots (none when the file does not exist). It takes no
// lock: the file is only ever replaced whole, by a rename.
func (s *Store) Load() (State, error) { return s.read() }

// Update changes the slots under the exclusive lock: fn changes st, which
// is then written durably unless fn fails (its error is returned).
func (s *Store) Update(fn func(st *State) error) error {
	return s.locked(unix.LOCK_EX, func() error {
		st, err := s.read()
		if err != nil {
			return err
		}
		before, _ := json.Marshal(st)
		if err := fn(&st); err != nil {
			return err
		}
		slices.SortFunc(st.Slots, func(a, b Slot) int { return strings.Compare(a.Name, b.Name) })
		b, err := json.MarshalIndent(st, "", "  ")
		if err != nil {
			return err
		}
		if after, _ := json.Marshal(st); string(after) == string(before) {
			return nil
		}
		return durable.WriteFile(s.Path(), append(b, '\n'), 0o600)
	})
}

// Advance registers the slot called name if there is none, and sets its
// position. It returns the slot and the state after the change.
func (s *Store) Advance(name string, pos uint64, now time.Time) (Slot, State, error) {
	if err := CheckName(name); err != nil {
		return Slot{}, State{}, err
	}
	var got Slot
	var after State
	err := s.Update(func(st *State) error {
		i := slices.IndexFunc(st.Slots, func(x Slot) bool { return x.Name == name })
		if i < 0 {
			st.Slots = append(st.Slots, Slot{Name: name, Created: now})
			i = len(st.Slots) - 1
		}
		st.Slots[i].Position, st.Slots[i].Updated = pos, now
		got, after = st.Slots[i], *st
		after.Slots = slices.Clone(st.Slots)
		return nil
	})
	return got, after, err
}

// Checked records that the slot called name, at position pos, was found
// able to catch up from the horizon h (FirstLost found nothing). It does
// nothing if the slot has moved since.
func (s *Store) Checked(name string, pos, h uint64) error {
	return s.Update(func(st *State) error {
		i := slices.IndexFunc(st.Slots, func(x Slot) bool { return x.Name == name })
		if i >= 0 && st.Slots[i].Position == pos {
			st.Slots[i].Checked = max(st.Slots[i].Checked, h)
		}
		return nil
	})
}

// Drop removes the slot called name: what it pinned is left to the
// retention.
func (s *Store) Drop(name string) error {
	return s.Update(func(st *State) error {
		i := slices.IndexFunc(st.Slots, func(x Slot) bool { return x.Name == name })
		if i < 0 {
			return fmt.Errorf("drop %q: %w", name, ErrNotFound)
		}
		st.Slots = slices.Delete(st.Slots, i, i+1)
		return nil
	})
}

// RaiseHorizon records that gc removed entries named by events up to h.
func (s *Store) RaiseHorizon(h uint64) error {
	return s.Update(func(st *State) error {
		st.Horizon = max(st.Horizon, h)
		return nil
	})
}

// read reads the file; the caller holds the lock.
func (s *Store) read() (State, error) {
	var st State
	b, err := os.ReadFile(s.Path())
	if errors.Is(err, fs.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("read slots: %w", err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("%s: %v: %w", s.Path(), err, ErrFormat)
	}
	for _, x := range st.Slots {
		if CheckName(x.Name) != nil {
			return st, fmt.Errorf("%s: slot name %q: %w", s.Path(), x.Name, ErrFormat)
		}
	}
	return st, nil
}

// locked runs fn holding the lock file with how (LOCK_EX).
func (s *Store) locked(how int, fn func() error) error {
	f, err := os.OpenFile(filepath.Join(s.dir, statedir.SlotsLockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("slots lock: %w", err)
	}
	defer f.Close()
	for {
		err = unix.Flock(int(f.Fd()), how)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("slots lock %s: %w", f.Name(), err)
	}
	defer unix.Flock(int(f.Fd()), unix.LOCK_UN)
	return fn()
}
