package repl

import (
	"github.com/cmfs-project/cmfs/internal/durable"

	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Names a target keeps at its root.
const (
	stateFile  = ".replstate"
	stagingDir = ".repl-staging"
)

// State is the content of <target>/.replstate: how far the target is.
type State struct {
	// LastReplID is the id of the last event fully applied.
	LastReplID uint64 `json:"last_repl_id"`
	// Dump is the dump directory that event came from.
	Dump string `json:"dump"`
	// Time is when the state was written.
	Time time.Time `json:"time"`
	// Source is the source id of the dumps loaded so far.
	Source string `json:"source,omitempty"`
	// FuzzyUntil is the newest event that may have raced with the
	// BOOTSTRAP the target started from; events up to it are applied
	// tolerantly.
	FuzzyUntil uint64 `json:"fuzzy_until,omitempty"`
	// Bootstrapping identifies a BOOTSTRAP dump being loaded; set until
	// the load finishes, so that a rerun of the same dump continues.
	Bootstrapping string `json:"bootstrapping,omitempty"`
}

// ReadState reads a target's state; ok is false if the target has none
// (nothing was ever loaded into it).
func ReadState(target string) (st State, ok bool, err error) {
	b, err := os.ReadFile(filepath.Join(target, stateFile))
	if errors.Is(err, os.ErrNotExist) {
		return st, false, nil
	}
	if err != nil {
		return st, false, err
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, false, fmt.Errorf("%s: %v: %w", filepath.Join(target, stateFile), err, ErrFormat)
	}
	return st, true, nil
}

// writeState records st durably, after making everything the load wrote
// into the target durable with one syncfs: the state never claims an
// event whose files a power loss could still take back. Loads group many
// events between two writeStates (see syncBytes), instead of fsyncing
// every file, directory and state on its own.
func writeState(target string, st State) error {
	if err := durable.SyncFS(target); err != nil {
		return err
	}
	st.Time = time.Now().UTC()
	return writeJSON(target, stateFile, st)
}
