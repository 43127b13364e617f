package statedir

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/cmfs-project/cmfs/internal/durable"
	"golang.org/x/sys/unix"
)

// Names cmfs reserves in the backing directory.
const (
	// Name is the state directory's name inside the backing directory
	// when none is given; it is hidden from the mount and never
	// replicated.
	Name = ".cmfs"
	// RestoreStagingPrefix starts the name of the directory `cmfs
	// restore` stages a restored original in, next to its destination.
	// Such a directory is always scratch space, and the rename out of it
	// is journaled as a RESTORE.
	RestoreStagingPrefix = ".cmfs-restore-"
)

// Names inside the state directory.
const (
	JournalFile      = "journal.db"
	SocketFile       = "control.sock"
	CMRootDir        = "cmroot"
	RecordFile       = "mount.json"
	RecordRoomFile   = ".mount.json.room"
	InflightFile     = "inflight"
	TmpDir           = "tmp"
	LogFile          = "cmfs.log"
	IngestCursorFile = "replicad-ingest.json"
	SlotsFile        = "slots.json"
	SlotsLockFile    = "slots.lock"
)

// DefaultExcludes are the engine scratch paths that are not protected: a
// job's temporary files never fill cmroot; the rename out of them into a
// table is the event that matters. Each glob is matched against every
// path component.
var DefaultExcludes = []string{"_temporary", ".hive-staging*", ".spark-staging*", "_SUCCESS", "_started_*", "_committed_*"}

// Excluded says whether a component of the slash-separated path rel
// matches one of the globs (path.Match syntax). Every cmfs operation asks,
// so the shapes engines use — a name, a name's start followed by one '*'
// — are compared directly; any other glob goes to path.Match.
func Excluded(globs []string, rel string) bool {
	for comp := range strings.SplitSeq(rel, "/") {
		for _, g := range globs {
			if matchGlob(g, comp) {
				return true
			}
		}
	}
	return false
}

// matchGlob is path.Match(glob, name), false for a malformed glob.
func matchGlob(glob, name string) bool {
	if lit, prefix, ok := directGlob(glob); ok {
		if prefix {
			return strings.HasPrefix(name, lit)
		}
		return name == lit
	}
	ok, _ := path.Match(glob, name)
	return ok
}

// directGlob says whether glob is a plain name or a name's start followed
// by one '*' (prefix), and returns that name or start.
func directGlob(glob string) (lit string, prefix, ok bool) {
	switch m := strings.IndexAny(glob, `*?[\`); {
	case m < 0:
		return glob, false, true
	case m == len(glob)-1 && glob[m] == '*':
		return glob[:m], true, true
	}
	return "", false, false
}

// Record is the mount record every mount writes into its state directory
// (RecordFile).
type Record struct {
	Backing    string `json:"backing"`
	Mountpoint string `json:"mountpoint"`
	CMRoot     string `json:"cmroot"`
	Retain     string `json:"retain"`
	PID        int    `json:"pid"`
	// Started is when the mount began, and BootID the kernel's boot id
	// then (BootID): a record whose boot id is not the running kernel's
	// was written before the machine last booted.
	Started time.Time `json:"started,omitzero"`
	BootID  string    `json:"boot_id,omitempty"`
	// Clean says the mount stopped cleanly: everything it wrote, and
	// everything its journal names, was durable when it exited. A mount
	// writes its record with Clean false as it starts and sets it as it
	// exits.
	Clean bool `json:"clean"`
}

// LostWrites says whether the mount r records may have lost writes to a
// power loss: it did not stop cleanly and the machine has booted since
// (boot is the running kernel's BootID). A mount killed without a reboot
// lost nothing it wrote — the page cache kept it — and its in-flight
// table is intact; after a reboot, what it wrote without flushing may be
// gone. A record from before boot ids were kept, or a machine whose boot
// id is unknown (boot ""), counts as rebooted. The zero Record (never
// mounted) lost nothing.
func (r Record) LostWrites(boot string) bool {
	return r.Backing != "" && !r.Clean && (boot == "" || r.BootID != boot)
}

// BootIDFile is where the kernel says which boot this is.
const BootIDFile = "/proc/sys/kernel/random/boot_id"

// TestBootIDEnv, for tests only, replaces the boot id BootID returns, so
// that a test can make a mount see a reboot without one.
const TestBootIDEnv = "CMFS_TEST_BOOT_ID"

// BootID returns the running kernel's boot id: a random UUID the kernel
// draws at every boot ("" where /proc does not say).
func BootID() string {
	if id := os.Getenv(TestBootIDEnv); id != "" {
		return id
	}
	b, err := os.ReadFile(BootIDFile)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
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

// MarkClean sets Clean in the mount record of state: its mount stopped
// cleanly.
func MarkClean(state string) error {
	r, err := ReadRecord(state)
	if err != nil {
		return err
	}
	r.Clean = true
	return WriteRecord(state, r)
}

// WriteRecord writes the mount record durably, replacing the last one
// atomically. A mount writes its record as it starts and as it stops, and
// both must work on a full file system: each write also keeps room for the
// next (recordRoom bytes allocated in RecordRoomFile), which that write
// fills and renames over the record.
func WriteRecord(state string, r Record) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	path := filepath.Join(state, RecordFile)
	used, err := writeIntoRoom(state, path, b)
	if !used {
		err = durable.WriteFile(path, b, 0o600) // names path
	} else if err != nil {
		err = fmt.Errorf("write %s: %w", path, err)
	}
	if err != nil {
		return err
	}
	// Best effort: with no room left, the next write tries the usual way
	// (and makes the room again if it can).
	keepRoom(state)
	return nil
}

// recordRoom is how much RecordRoomFile keeps allocated: a record is a few
// hundred bytes.
const recordRoom = 4096

// writeIntoRoom writes b over the allocated room, makes it durable and
// renames it over path. used is false when there is no room file, or it is
// not allocated: the caller writes the usual way.
func writeIntoRoom(state, path string, b []byte) (used bool, err error) {
	room := filepath.Join(state, RecordRoomFile)
	f, err := os.OpenFile(room, os.O_WRONLY, 0)
	if err != nil {
		return false, nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil || st.Blocks*512 < int64(len(b)) || int64(len(b)) > recordRoom {
		f.Close()
		return false, nil
	}
	err = func() error {
		if _, err := f.WriteAt(b, 0); err != nil {
			return err
		}
		if err := f.Truncate(int64(len(b))); err != nil {
			return err
		}
		if err := f.Chmod(0o600); err != nil {
			return err
		}
		return f.Sync()
	}()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(room) // what it holds now is neither room nor a record
		return true, err
	}
	if err := os.Rename(room, path); err != nil {
		return true, err
	}
	return true, durable.SyncDir(state)
}

// keepRoom allocates RecordRoomFile for the next WriteRecord, if it is not
// there; a failure (no room) leaves no file behind.
func keepRoom(state string) {
	room := filepath.Join(state, RecordRoomFile)
	f, err := os.OpenFile(room, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return
	}
	err = unix.Fallocate(int(f.Fd()), 0, 0, recordRoom)
	if errors.Is(err, unix.EOPNOTSUPP) {
		_, err = f.Write(make([]byte, recordRoom))
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err != nil || cerr != nil {
		os.Remove(room)
	}
}

// Retention is the record's retention; def (cmroot.DefaultRetain, which
// this package cannot name without importing the store) when unset or
// unreadable.
func (r Record) Retention(def time.Duration) time.Duration {
	d, err := time.ParseDuration(r.Retain)
	if err != nil || d <= 0 {
		return def
	}
	return d
}
