package repl

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

// followStatusFile is where a running Follower says how it is doing, in
// its work directory (FollowWork). The file goes with the work directory
// when the follow ends.
const followStatusFile = "follow.json"

// States of a follow.
const (
	FollowFollowing = "following"
	FollowRetrying  = "retrying" // the last round failed
)

// FollowStatus is what a running Follower says about itself.
type FollowStatus struct {
	PID    int    `json:"pid"`
	Source string `json:"source"`
	State  string `json:"state"`
	// Since is when State began: for "retrying", the first failure in a
	// row.
	Since     time.Time `json:"since"`
	Failures  int       `json:"failures,omitempty"` // rounds failed in a row
	LastError string    `json:"last_error,omitempty"`
	NextRetry time.Time `json:"next_retry,omitzero"`
	// Running is set by ReadFollowStatus, not stored: whether PID is
	// alive.
	Running bool `json:"running"`
}

// FollowWork is the work directory of a follow into target, where its
// dumps and status live: next to the target, never inside it.
func FollowWork(target string) string {
	return filepath.Join(filepath.Dir(target), "."+filepath.Base(target)+".repl-dumps")
}

// writeStatus replaces the status file with f.status.
func (f *Follower) writeStatus() error {
	b, err := json.Marshal(f.status)
	if err != nil {
		return err
	}
	if err := durable.WriteFile(filepath.Join(f.work, followStatusFile), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write follow status: %w", err)
	}
	return nil
}

// ReadFollowStatus reads the status a follow into target left, if any
// (ok false: none is following it, or none says so).
func ReadFollowStatus(target string) (st FollowStatus, ok bool, err error) {
	name := filepath.Join(FollowWork(target), followStatusFile)
	b, err := os.ReadFile(name)
	if errors.Is(err, fs.ErrNotExist) {
		return st, false, nil
	}
	if err != nil {
		return st, false, err
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, false, fmt.Errorf("follow status %s: %w", name, err)
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
