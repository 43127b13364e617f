// Package extents reads a file's extent map (FIEMAP) and compares two of
// them. On a filesystem with reflinks (XFS, btrfs) a clone shares every
// extent of the file it was made from, and a later write to the file
// moves the blocks written to new extents (copy on write): the byte
// ranges where the file and its clone still map the same physical bytes
// (Same) hold the same data in both, so they are unchanged since the
// clone was taken.
package extents

import (
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Extent is one extent of a file's map, as FIEMAP reports it.
type Extent struct {
	Logical, Physical, Length uint64
	Flags                     uint32
}

// Flags of an extent (include/uapi/linux/fiemap.h).
const (
	Last        = 0x1    // the file's last extent
	Unknown     = 0x2    // where the data lies is not known (yet)
	Delalloc    = 0x4    // not allocated yet; also sets Unknown
	Encoded     = 0x8    // compressed or encrypted: Physical is not the data's address
	Encrypted   = 0x80   // also sets Encoded
	NotAligned  = 0x100  // not block-aligned
	DataInline  = 0x200  // in the inode or metadata; also sets NotAligned
	DataTail    = 0x400  // packed with other files' tails; also sets NotAligned
	Unwritten   = 0x800  // allocated, not written: reads as zeros
	Merged      = 0x1000 // several extents reported as one
	Shared      = 0x2000 // the blocks belong to another file too
	notPhysical = Unknown | Delalloc | Encoded | Encrypted | NotAligned | DataInline | DataTail
)

// Map returns the extent map of the open file f, after writing back its
// dirty pages (FIEMAP_FLAG_SYNC): data written but still in the page
// cache has no extent of its own yet, and would show at the address it
// will leave. It fails with EOPNOTSUPP on a filesystem without FIEMAP
// (tmpfs, FUSE).
func Map(f *os.File) ([]Extent, error) {
	var all []Extent
	var start uint64
	for {
		var req request
		req.head = fiemap{start: start, length: ^uint64(0) - start, flags: flagSync, extentCount: batch}
		_, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), fsIocFiemap, uintptr(unsafe.Pointer(&req)))
		if errno != 0 {
			return nil, &os.PathError{Op: "FS_IOC_FIEMAP", Path: f.Name(), Err: errno}
		}
		n := int(req.head.mappedExtents)
		for _, e := range req.extents[:n] {
			all = append(all, Extent{Logical: e.logical, Physical: e.physical, Length: e.length, Flags: e.flags})
		}
		if n == 0 || req.extents[n-1].flags&Last != 0 {
			return all, nil
		}
		last := req.extents[n-1]
		start = last.logical + last.length
	}
}

// MapPath is Map of the file at path.
func MapPath(path string) ([]Extent, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Map(f)
}

// Span is the byte range [Start, End) of a file.
type Span struct{ Start, End uint64 }

// Same returns, in order and merged where they touch, the byte ranges
// where maps a and b (each sorted by Logical, as Map returns them) put
// the same logical offsets at the same physical addresses, in extents
// whose address is the data's own (not delayed, inline, encoded or
// packed) and written in both or in neither. Holes are never the same:
// a range only one side maps, or neither, is left out.
func Same(a, b []Extent) []Span {
	var out []Span
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		x, y := a[i], b[j]
		start, end := max(x.Logical, y.Logical), min(x.Logical+x.Length, y.Logical+y.Length)
		if start < end && x.Flags&notPhysical == 0 && y.Flags&notPhysical == 0 &&
			x.Flags&Unwritten == y.Flags&Unwritten &&
			x.Physical-x.Logical == y.Physical-y.Logical { // unsigned: both sides wrap alike
			if n := len(out); n > 0 && out[n-1].End == start {
				out[n-1].End = end
			} else {
				out = append(out, Span{start, end})
			}
		}
		if x.Logical+x.Length <= y.Logical+y.Length {
			i++
		} else {
			j++
		}
	}
	return out
}

// Covers says whether spans (as Same returns them) cover all of
// [start, end). It looks from spans[*k] on and leaves *k at the first
// span that may cover a later range: ranges asked in increasing order
// cost one pass over spans.
func Covers(spans []Span, k *int, start, end uint64) bool {
	for *k < len(spans) && spans[*k].End <= start {
		*k++
	}
	return *k < len(spans) && spans[*k].Start <= start && end <= spans[*k].End
}

// The kernel's struct fiemap and struct fiemap_extent, and FS_IOC_FIEMAP
// (_IOWR('f', 11, struct fiemap)).
type fiemap struct {
	start, length                             uint64
	flags, mappedExtents, extentCount, unused uint32
}

type fiemapExtent struct {
	logical, physical, length uint64
	reserved64                [2]uint64
	flags                     uint32
	reserved                  [3]uint32
}

const (
	fsIocFiemap = 0xc020660b
	flagSync    = 0x1
	batch       = 64
)

type request struct {
	head    fiemap
	extents [batch]fiemapExtent
}
