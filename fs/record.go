package fs

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/cmfs-project/cmfs/cmroot"
	"github.com/cmfs-project/cmfs/internal/durable"
)

// RecordFile is the mount record every mount writes into its state
// directory: how a command given only the state directory (cmfs fsck,
// replicad serve, …) finds the backing directory and cmroot again.
const RecordFile = "mount.json"

// Record is the mount record.
type Record struct {
	Backing    string `json:"backing"`
	Mountpoint string `json:"mountpoint"`
	CMRoot     string `json:"cmroot"`
	Retain     string `json:"retain"`
	PID        int    `json:"pid"`
}

// ReadRecord reads the mount record of a state directory; the zero Record
// when it was never mounted.
func ReadRecord(state string) (Record, error) {
	var r Record
	p := filepath.Join(state, RecordFile)
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return r, nil
	}
	if err != nil {
		return r, fmt.Errorf("read mount record: %w", err)
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("mount record %s: %w", p, err)
	}
	return r, nil
}

// WriteRecord writes the mount record durably.
func WriteRecord(state string, r Record) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return durable.WriteFile(filepath.Join(state, RecordFile), append(b, '\n'), 0o600)
}

// Retention is the record's retention, cmroot's default when unset.
func (r Record) Retention() time.Duration {
	d, err := time.ParseDuration(r.Retain)
	if err != nil || d <= 0 {
		return cmroot.DefaultRetain
	}
	return d
}
