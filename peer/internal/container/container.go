// Package container stands in for github.com/cmfs-project/cmfs/container
// until that package lands: the types, constants and sentinels peer uses,
// as the issue-4 contract names them. peer imports this path only; the
// switch is the import path and deleting this directory.
package container

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

type State string

const (
	Open       State = "OPEN"
	Closing    State = "CLOSING"
	Closed     State = "CLOSED"
	Recovering State = "RECOVERING"
	Unhealthy  State = "UNHEALTHY"
	Deleted    State = "DELETED"
)

type Compression string

const (
	None   Compression = "none"
	Gzip   Compression = "gzip"
	Snappy Compression = "snappy"
	LZ4    Compression = "lz4"
	Zstd   Compression = "zstd"
)

var Compressions = []Compression{None, Gzip, Snappy, LZ4, Zstd}

func ParseCompression(s string) (Compression, error) {
	if s == "" {
		return None, nil
	}
	for _, c := range Compressions {
		if string(c) == s {
			return c, nil
		}
	}
	return "", fmt.Errorf("compression %q: %w", s, ErrBadCompression)
}

type BlockID struct {
	Sum  uint64
	Size int64
}

func (b BlockID) String() string {
	if b.Size < 0 {
		return fmt.Sprintf("%016x", b.Sum)
	}
	return fmt.Sprintf("%016x", b.Sum) + "-" + strconv.FormatInt(b.Size, 10)
}

type Descriptor struct {
	LayoutVersion      int
	ID                 uint64
	State              State
	Reason             string
	ChecksumType       string
	ReplicaIndex       int
	Replication        string
	Bytes              int64
	Blocks             int64
	Chunks             int
	MetadataBytes      int64
	MetadataChecksum   string
	MaxSize            int64
	Created            time.Time
	ContainerChecksum  string
	DescriptorChecksum string
}

func (d Descriptor) Size() int64 { return d.Bytes + d.MetadataBytes }

var (
	ErrNotFound       = errors.New("container: no such container")
	ErrExists         = errors.New("container: already exists")
	ErrImporting      = errors.New("container: being imported")
	ErrNoSpace        = errors.New("container: no volume has room")
	ErrHostile        = errors.New("container: tarball outside the format")
	ErrCorrupt        = errors.New("container: checksum mismatch or malformed data")
	ErrNotClosed      = errors.New("container: not closed")
	ErrNotOpen        = errors.New("container: not open")
	ErrBlockNotFound  = errors.New("container: no such block")
	ErrBadCompression = errors.New("container: unknown compression")
	ErrInUse          = errors.New("container: volume in use by another process")
	ErrClosed         = errors.New("container: store is closed")
)
