// Package pagecache lets cmfs read a whole file — to copy an original
// into cmroot, to checksum new content — and leave the page cache as it
// found the file: the pages the read brought in are dropped after it, the
// ones that were cached before stay.
//
// Such a read would otherwise leave the whole file cached, in folios as
// large as readahead makes them: memory the workload never asked for, and,
// on filesystems that keep a buffer head per block in every folio (ext4),
// a tax on every later small write into the file, which walks all the
// blocks of the folio it lands in. Random 4 KiB writes into a 1 GiB file
// that cmfs had just copied at open ran at a tenth of their speed on a
// file no one had read.
//
// Residency comes from mincore(2) over a mapping of the file, which the
// kernel answers only to a process that owns the file or could write it;
// where cmfs is not root and does not own the file, nothing is recorded
// and the cache is left as the read leaves it. Small files are left alone:
// what they cost the cache is not worth two system calls.
package pagecache

import (
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Min is the size from which Note records anything.
const Min = 1 << 20

// Absent is the part of a file that was not in the page cache when Note
// looked.
type Absent struct {
	f     *os.File
	spans []span
}

// span is a byte range of the file.
type span struct{ off, n int64 }

// Note records which pages of the first size bytes of f are not in the
// page cache now. A file smaller than Min, one whose residency this
// process may not see, or one that cannot be mapped records nothing.
func Note(f *os.File, size int64) Absent {
	if size < Min || int64(int(size)) != size || !mayLook(f) {
		return Absent{}
	}
	data, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return Absent{}
	}
	defer unix.Munmap(data)
	page := int64(os.Getpagesize())
	vec := make([]byte, (size+page-1)/page)
	if mincore(data, vec) != nil {
		return Absent{}
	}
	a := Absent{f: f}
	for i := 0; i < len(vec); {
		if vec[i]&1 != 0 {
			i++
			continue
		}
		j := i
		for j < len(vec) && vec[j]&1 == 0 {
			j++
		}
		a.spans = append(a.spans, span{int64(i) * page, int64(j-i) * page})
		i = j
	}
	return a
}

// Resident returns how many bytes of the first size bytes of f are in
// the page cache (counted in whole pages), as this process may see them
// (see mayLook): what tests of a reader's footprint look at.
func Resident(f *os.File, size int64) (int64, error) {
	if size <= 0 {
		return 0, nil
	}
	data, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return 0, err
	}
	defer unix.Munmap(data)
	page := int64(os.Getpagesize())
	vec := make([]byte, (size+page-1)/page)
	if err := mincore(data, vec); err != nil {
		return 0, err
	}
	var n int64
	for _, v := range vec {
		if v&1 != 0 {
			n += page
		}
	}
	return n, nil
}

// mincore is mincore(2), which x/sys/unix does not wrap.
func mincore(data, vec []byte) error {
	_, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(unsafe.SliceData(data))), uintptr(len(data)), uintptr(unsafe.Pointer(unsafe.SliceData(vec))))
	if errno != 0 {
		return errno
	}
	return nil
}

// mayLook says whether mincore(2) tells this process the truth about f's
// page cache: it reveals residency to the file's owner, to a process
// with CAP_FOWNER, or to one that could open the file for writing
// (root's case covers the last two here).
func mayLook(f *os.File) bool {
	euid := os.Geteuid()
	if euid == 0 {
		return true
	}
	var st syscall.Stat_t
	return syscall.Fstat(int(f.Fd()), &st) == nil && st.Uid == uint32(euid)
}

// Drop evicts from the page cache the pages Note found absent, so that a
// read in between leaves the cache as Note found it. The kernel keeps
// pages that are dirty or mapped: what was written or mapped since stays.
// The file must still be open.
func (a Absent) Drop() {
	for _, s := range a.spans {
		unix.Fadvise(int(a.f.Fd()), s.off, s.n, unix.FADV_DONTNEED)
	}
}
