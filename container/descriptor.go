package container

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/cmfs-project/cmfs/ec"
	"github.com/cmfs-project/cmfs/internal/checksum"
	"go.yaml.in/yaml/v3"
)

// State is a container's place in its life cycle.
type State string

// The states, as Ozone names them.
const (
	// Open: Put appends blocks to it. Only one container per Store is open.
	Open State = "OPEN"
	// Closing: being closed (or recovered after a crash while open); its
	// blocks are served, it is not exported.
	Closing State = "CLOSING"
	// Closed: immutable, every checksum written; exported and served.
	Closed State = "CLOSED"
	// Recovering: imported, its scan not yet done; not served.
	Recovering State = "RECOVERING"
	// Unhealthy: a scan found a block, the index or the descriptor wrong;
	// not served, still exported (a peer may hold good copies of the rest).
	Unhealthy State = "UNHEALTHY"
	// Deleted: being removed.
	Deleted State = "DELETED"
)

// States are every state, in life-cycle order.
var States = []State{Open, Closing, Closed, Recovering, Unhealthy, Deleted}

func (s State) valid() bool { return slices.Contains(States, s) }

// layoutVersion is the on-disk format this package writes and reads.
// Version 1 addressed a block longer than checksum.BlockSize by the xxh64
// of its whole content, version 2 by its block checksum (package
// checksum), as events spell it.
const layoutVersion = 2

// ChecksumType is the only checksum the format uses: xxh64, of a block's
// bytes as package checksum defines it, of everything else plainly.
const ChecksumType = "xxh64"

// DefaultReplication is a new container's replication config unless
// Options.Replication says otherwise.
const DefaultReplication = "replica:3"

// Descriptor is a container's container.yaml. Bytes, Blocks, Chunks and the
// checksums are final once the container is CLOSED; while it is OPEN the
// descriptor List returns counts what Put has written so far, the file on
// disk does not.
type Descriptor struct {
	LayoutVersion int    `yaml:"layoutVersion"`
	ID            uint64 `yaml:"containerID"`
	State         State  `yaml:"state"`
	// Reason says why the container is UNHEALTHY.
	Reason       string `yaml:"reason,omitempty"`
	ChecksumType string `yaml:"checksumType"`
	ReplicaIndex int    `yaml:"replicaIndex"`
	// Replication is "replica:N" or "ec:rs-D-P-CELLk".
	Replication string `yaml:"replication"`
	// Bytes is the data in the chunk files, Blocks how many blocks hold it,
	// Chunks how many chunk files (chunks/0.data … chunks/<Chunks-1>.data).
	Bytes  int64 `yaml:"bytes"`
	Blocks int64 `yaml:"blocks"`
	Chunks int   `yaml:"chunks"`
	// MetadataBytes and MetadataChecksum are the size and xxh64 of
	// metadata/container.db as closed: the scan checks them before it lets
	// bbolt read the file.
	MetadataBytes    int64     `yaml:"metadataBytes"`
	MetadataChecksum string    `yaml:"metadataChecksum"`
	MaxSize          int64     `yaml:"maxSize"`
	Created          time.Time `yaml:"created"`
	// ContainerChecksum is the xxh64 over the block index (see doc.go);
	// metadata/container.checksum holds it too.
	ContainerChecksum string `yaml:"containerChecksum"`
	// DescriptorChecksum is the xxh64 of container.yaml with this field
	// empty. It must stay the last field: the checksum line ends the file.
	DescriptorChecksum string `yaml:"descriptorChecksum"`
}

// Size is what the container takes on disk, about: Import's size argument
// for it. Bytes alone also does (Import adds room for metadata).
func (d Descriptor) Size() int64 { return d.Bytes + d.MetadataBytes }

// The descriptor's checksum line, which ends container.yaml.
const (
	sumLinePrefix = "descriptorChecksum: \""
	sumLineEmpty  = sumLinePrefix + "\"\n"
	sumLineLen    = len(sumLinePrefix) + 16 + len("\"\n")
	maxDescriptor = 64 << 10
)

// marshal returns container.yaml for d, with its checksum; it also sets
// d.DescriptorChecksum.
func (d *Descriptor) marshal() ([]byte, error) {
	d.DescriptorChecksum = ""
	b, err := yaml.Marshal(d)
	if err != nil {
		return nil, fmt.Errorf("encode descriptor %d: %w", d.ID, err)
	}
	if !bytes.HasSuffix(b, []byte("\n"+sumLineEmpty)) {
		return nil, fmt.Errorf("encode descriptor %d: checksum field is not the last line", d.ID)
	}
	d.DescriptorChecksum = checksum.Format(xxhash.Sum64(b))
	b = append(b[:len(b)-len(sumLineEmpty)], sumLinePrefix+d.DescriptorChecksum+"\"\n"...)
	return b, nil
}

// parseDescriptor checks container.yaml's own checksum over its raw bytes
// (so no byte can change unnoticed, whatever the YAML parser would make of
// it), then decodes it strictly and checks its fields. Failures wrap
// ErrCorrupt.
func parseDescriptor(b []byte) (Descriptor, error) {
	var d Descriptor
	if len(b) > maxDescriptor {
		return d, fmt.Errorf("descriptor of %d bytes: %w", len(b), ErrCorrupt)
	}
	if len(b) < sumLineLen {
		return d, fmt.Errorf("descriptor truncated: %w", ErrCorrupt)
	}
	head, line := b[:len(b)-sumLineLen], b[len(b)-sumLineLen:]
	if (len(head) > 0 && head[len(head)-1] != '\n') || !bytes.HasPrefix(line, []byte(sumLinePrefix)) || !bytes.HasSuffix(line, []byte("\"\n")) {
		return d, fmt.Errorf("descriptor does not end with its checksum: %w", ErrCorrupt)
	}
	want := string(line[len(sumLinePrefix) : len(sumLinePrefix)+16])
	h := xxhash.New()
	h.Write(head)
	h.WriteString(sumLineEmpty)
	if got := checksum.Format(h.Sum64()); got != want {
		return d, fmt.Errorf("descriptor checksum %s, file says %s: %w", got, want, ErrCorrupt)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&d); err != nil {
		return d, fmt.Errorf("decode descriptor: %v: %w", err, ErrCorrupt)
	}
	if err := d.validate(); err != nil {
		return d, fmt.Errorf("descriptor %d: %v: %w", d.ID, err, ErrCorrupt)
	}
	return d, nil
}

// maxChunks bounds a descriptor's chunk count, so a hostile one cannot
// make a scan or an import allocate without end.
const maxChunks = 1 << 20

func (d *Descriptor) validate() error {
	switch {
	case d.LayoutVersion != layoutVersion:
		return fmt.Errorf("layout version %d, want %d", d.LayoutVersion, layoutVersion)
	case d.ID == 0:
		return fmt.Errorf("id 0")
	case !d.State.valid():
		return fmt.Errorf("state %q", d.State)
	case d.ChecksumType != ChecksumType:
		return fmt.Errorf("checksum type %q", d.ChecksumType)
	case d.Bytes < 0 || d.Blocks < 0 || d.MetadataBytes < 0 || d.MaxSize < 0 || d.ReplicaIndex < 0:
		return fmt.Errorf("negative size or count")
	case d.Chunks < 0 || d.Chunks > maxChunks:
		return fmt.Errorf("%d chunks", d.Chunks)
	}
	if err := ValidateReplication(d.Replication); err != nil {
		return err
	}
	if d.ReplicaIndex == 0 {
		return nil
	}
	// An EC index replica: one chunk file of cells, never written to.
	sc, err := ec.ParseScheme(d.Replication)
	switch {
	case err != nil:
		return fmt.Errorf("replica index %d: %v", d.ReplicaIndex, err)
	case d.ReplicaIndex > sc.Total():
		return fmt.Errorf("replica index %d of %s", d.ReplicaIndex, sc)
	case d.Chunks != 1:
		return fmt.Errorf("EC index replica of %d chunks", d.Chunks)
	case d.State == Open || d.State == Closing:
		return fmt.Errorf("EC index replica %s", d.State)
	}
	return nil
}

// ValidateReplication checks a replication config: "replica:N" (N ≥ 1) or
// "ec:rs-D-P-CELLk" (D, P ≥ 1, CELL ≥ 1, in KiB).
func ValidateReplication(s string) error {
	bad := fmt.Errorf("replication %q: want replica:N or ec:rs-D-P-CELLk", s)
	if n, ok := strings.CutPrefix(s, "replica:"); ok {
		if v, err := strconv.Atoi(n); err != nil || v < 1 {
			return bad
		}
		return nil
	}
	rest, ok := strings.CutPrefix(s, "ec:rs-")
	if !ok {
		return bad
	}
	f := strings.Split(rest, "-")
	if len(f) != 3 || !strings.HasSuffix(f[2], "k") {
		return bad
	}
	f[2] = strings.TrimSuffix(f[2], "k")
	for _, x := range f {
		if v, err := strconv.Atoi(x); err != nil || v < 1 {
			return bad
		}
	}
	return nil
}

// Names inside a container directory.
const (
	descriptorName = "container.yaml"
	metadataDir    = "metadata"
	dbName         = "metadata/container.db"
	checksumName   = "metadata/container.checksum"
	chunksDir      = "chunks"
)

// chunkName is chunk file n's name relative to the container directory.
func chunkName(n int) string { return chunksDir + "/" + strconv.Itoa(n) + ".data" }

// parseChunkName returns n for "chunks/<n>.data" with n in canonical
// decimal (no sign, no leading zero), or false.
func parseChunkName(name string) (int, bool) {
	digits, ok := strings.CutPrefix(name, chunksDir+"/")
	if !ok {
		return 0, false
	}
	digits, ok = strings.CutSuffix(digits, ".data")
	if !ok || digits == "" || len(digits) > 7 || (len(digits) > 1 && digits[0] == '0') {
		return 0, false
	}
	n := 0
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return 0, false
		}
		n = n*10 + int(digits[i]-'0')
	}
	return n, true
}

// readDescriptor reads and checks dir/container.yaml.
func readDescriptor(dir string) (Descriptor, error) {
	f, err := os.Open(filepath.Join(dir, descriptorName))
	if err != nil {
		return Descriptor{}, err
	}
	defer f.Close()
	b, err := readAllLimit(f, maxDescriptor+1)
	if err != nil {
		return Descriptor{}, err
	}
	return parseDescriptor(b)
}

// writeDescriptor replaces dir/container.yaml durably (or not, when sync
// is false: tests), and sets d.DescriptorChecksum.
func writeDescriptor(dir string, d *Descriptor, sync bool) error {
	b, err := d.marshal()
	if err != nil {
		return err
	}
	return writeFile(filepath.Join(dir, descriptorName), b, sync)
}
