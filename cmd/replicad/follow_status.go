package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/cmfs-project/cmfs/internal/durable"
)

// followStatusFile is where a running follow says how it is doing, in its
// work directory (followWork): `replicad status --target` shows it. The
// file goes with the work directory when follow ends.
const followStatusFile = "follow.json"

// States of a follow.
const (
	stateFollowing = "following"
	stateRetrying  = "retrying" // the last round failed
)

// followStatus is the content of followStatusFile.
type followStatus struct {
	PID    int    `json:"pid"`
	Source string `json:"source"`
	State  string `json:"state"`
	// Since is when State began: for "retrying", the first failure in a
	// row.
	Since     time.Time `json:"since"`
	Failures  int       `json:"failures,omitempty"` // rounds failed in a row
	LastError string    `json:"last_error,omitempty"`
	NextRetry time.Time `json:"next_retry,omitzero"`
	// Running is set by status, not stored: whether PID is alive.
	Running bool `json:"running"`
}

// followWork is the work directory of a follow into target: next to it,
// never inside it.
func followWork(target string) string {
	return filepath.Join(filepath.Dir(target), "."+filepath.Base(target)+".repl-dumps")
}

// writeStatus replaces the status file with f.status.
func (f *follower) writeStatus() error {
	b, err := json.Marshal(f.status)
	if err != nil {
		return err
	}
	if err := durable.WriteFile(filepath.Join(f.work, followStatusFile), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write follow status: %w", err)
	}
	return nil
}

// readFollowStatus reads the status a follow into target left, if any
// (ok false: none is following it, or none says so).
func readFollowStatus(target string) (st followStatus, ok bool, err error) {
	b, err := os.ReadFile(filepath.Join(followWork(target), followStatusFile))
	if errors.Is(err, fs.ErrNotExist) {
		return st, false, nil
	}
	if err != nil {
		return st, false, err
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, false, fmt.Errorf("follow status %s: %w", filepath.Join(followWork(target), followStatusFile), err)
	}
	// A follow killed (-9) leaves its file behind: say so.
	st.Running = st.PID > 0 && alive(st.PID)
	return st, true, nil
}

// alive reports whether a process pid exists.
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
