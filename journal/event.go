package journal

import (
	"path"
	"strings"
	"time"

	"github.com/cmfs-project/cmfs/internal/checksum"
)

// Type says what an event did. Warehouse types are used where the path is
// in the warehouse layout (<db>.db/<table>/<k>=<v>/...); the generic file
// types everywhere else (and for file-level changes inside a table that
// have no Hive counterpart, with the warehouse fields still filled).
type Type string

// Warehouse event types.
const (
	CreateDatabase  Type = "CREATE_DATABASE"
	DropDatabase    Type = "DROP_DATABASE"
	RenameDatabase  Type = "RENAME_DATABASE"
	CreateTable     Type = "CREATE_TABLE"
	DropTable       Type = "DROP_TABLE"
	RenameTable     Type = "RENAME_TABLE"
	AddPartition    Type = "ADD_PARTITION"
	DropPartition   Type = "DROP_PARTITION"
	RenamePartition Type = "RENAME_PARTITION"
	// Insert is new content written into a file of a table or partition
	// (including a file renamed into a table from an excluded staging path).
	Insert Type = "INSERT"
)

// Generic event types.
const (
	Mkdir Type = "MKDIR"
	Rmdir Type = "RMDIR"
	// Write is new content of a file outside the warehouse layout.
	Write Type = "WRITE"
	// Delete is an unlink; Files holds the preserved original.
	Delete Type = "DELETE"
	// Truncate is an O_TRUNC open, truncate(2) or ftruncate(2) of a
	// non-empty file; Files holds the new state and the preserved original.
	Truncate Type = "TRUNCATE"
	// Rename of a file or of a directory outside the layout levels; a
	// replaced target is preserved and listed in Files.
	Rename  Type = "RENAME"
	Symlink Type = "SYMLINK"
	Link    Type = "LINK"
	// Restore is content put back from cmroot by `cmfs restore`.
	Restore Type = "RESTORE"
)

// File is one file named by an event: either the new content at Path
// (CM empty) or a preserved original, stored in cmroot under CM.
type File struct {
	Path  string `json:"path"`
	Size  int64  `json:"size"`
	XXH64 string `json:"xxh64"`
	CM    string `json:"cm"`
}

// Event is one completed change, as a replica needs it to reproduce the
// state right after it: names, sizes and checksums, and where every
// preserved original lives in cmroot.
type Event struct {
	ID        uint64    `json:"id"`
	Time      time.Time `json:"time"`
	Type      Type      `json:"type"`
	Path      string    `json:"path"`
	NewPath   string    `json:"new_path,omitempty"`
	DB        string    `json:"db"`
	Table     string    `json:"table"`
	Partition string    `json:"partition"`
	// Target is the target of a symlink.
	Target string `json:"target,omitempty"`
	Files  []File `json:"files"`
}

// Sum returns the xxh64 of b as File.XXH64 holds it (checksum.Bytes).
func Sum(b []byte) string { return checksum.Bytes(b) }

// FormatSum spells an xxh64 digest as File.XXH64 holds it
// (checksum.Format).
func FormatSum(s uint64) string { return checksum.Format(s) }

// Level is where a path sits in the warehouse layout.
type Level int

const (
	Outside   Level = iota // not in the layout
	Database               // <db>.db
	Table                  // <db>.db/<table>
	Partition              // <db>.db/<table>/<k>=<v>[/<k>=<v>...]
	Data                   // a file or directory below a table or partition
)

// Location is a path's place in the warehouse layout.
type Location struct {
	Level     Level
	DB        string
	Table     string
	Partition string // "k1=v1/k2=v2", empty for unpartitioned tables
}

// Locate parses a slash-separated path relative to the warehouse root.
// "sales.db" is a database, "sales.db/orders" a table, and every leading
// run of k=v components below a table is its partition.
func Locate(rel string) Location {
	rel = strings.Trim(path.Clean("/"+rel), "/")
	if rel == "" {
		return Location{}
	}
	parts := strings.Split(rel, "/")
	db, ok := strings.CutSuffix(parts[0], ".db")
	if !ok || db == "" {
		return Location{}
	}
	loc := Location{Level: Database, DB: db}
	if len(parts) == 1 {
		return loc
	}
	loc.Level, loc.Table = Table, parts[1]
	i := 2
	for ; i < len(parts); i++ {
		k, v, ok := strings.Cut(parts[i], "=")
		if !ok || k == "" || v == "" {
			break
		}
	}
	if i > 2 {
		loc.Level, loc.Partition = Partition, strings.Join(parts[2:i], "/")
	}
	if i < len(parts) {
		loc.Level = Data
	}
	return loc
}

// Stamp fills the event's warehouse fields from its path.
func (e *Event) Stamp() {
	loc := Locate(e.Path)
	e.DB, e.Table, e.Partition = loc.DB, loc.Table, loc.Partition
}
