// Package mapped writes small records into a file through a shared memory
// mapping instead of a write(2) each.
//
// The journal's write-ahead file and the in-flight table are written on
// every change through the mount, a few hundred bytes at a time, and read
// back only by the next mount. A pwrite of a few hundred bytes into a page
// the page cache holds costs 4–12 µs on ext4 (the write path, the file's
// times, a journal handle); a store into a mapping of the same page costs
// well under one, and faults only when the page was cleaned by a flush
// since. What is stored is in the page cache the moment the store is: a
// kill -9 of the process loses none of it, and fsync/fdatasync of the file
// write it back like any other dirty page.
//
// A store can fault where a write would have failed: on a filesystem that
// must allocate to overwrite (copy on write) and has no room, or after an
// I/O error. The runtime is told to turn such a fault into a panic for the
// storing goroutine (debug.SetPanicOnFault), which Write and StoreUint32
// recover and return as EIO: the caller fails its change as it would on a
// failed write, and the process lives on. Callers map only what they have
// allocated on disk ahead (written with zeros, or fallocated), so that on
// filesystems that overwrite in place a store never needs new space.
package mapped

import (
	"encoding/binary"
	"fmt"
	"os"
	"runtime/debug"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Region is a shared, writable mapping of the start of a file.
type Region struct {
	name string
	data []byte
}

// Map maps the first size bytes of f (opened read-write) shared and
// writable. The mapping may extend beyond the file's end: a store there
// faults (Write returns EIO) until the file is extended to cover it.
func Map(f *os.File, size int64) (*Region, error) {
	data, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map %s: %w", f.Name(), err)
	}
	return &Region{name: f.Name(), data: data}, nil
}

// Len is the size of the mapping.
func (r *Region) Len() int64 { return int64(len(r.data)) }

// Write copies p to offset off of the file. A store is not atomic against
// the process's death: callers order their stores so that a record is
// whole before it is reachable (StoreUint32 last), or checksum it.
func (r *Region) Write(off int64, p []byte) (err error) {
	if off < 0 || off+int64(len(p)) > int64(len(r.data)) {
		return fmt.Errorf("%s: write of %d bytes at %d beyond the mapping (%d bytes): %w", r.name, len(p), off, len(r.data), syscall.EINVAL)
	}
	defer r.catch(off, &err)()
	copy(r.data[off:], p)
	return nil
}

// StoreUint32 stores v at off (4-byte aligned) little-endian in one
// atomic store: a reader after the process's death sees the old value or
// the new one, never a mix.
func (r *Region) StoreUint32(off int64, v uint32) (err error) {
	if off < 0 || off%4 != 0 || off+4 > int64(len(r.data)) {
		return fmt.Errorf("%s: 4-byte store at %d outside the mapping (%d bytes) or unaligned: %w", r.name, off, len(r.data), syscall.EINVAL)
	}
	var le [4]byte
	binary.LittleEndian.PutUint32(le[:], v)
	defer r.catch(off, &err)()
	atomic.StoreUint32((*uint32)(unsafe.Pointer(&r.data[off])), binary.NativeEndian.Uint32(le[:]))
	return nil
}

// catch arms the conversion of a fault into a panic for the calling
// goroutine and returns what its caller defers: it restores the setting
// and turns the panic of a fault at the mapping into EIO. Any other panic
// goes on.
func (r *Region) catch(off int64, err *error) func() {
	old := debug.SetPanicOnFault(true)
	return func() {
		debug.SetPanicOnFault(old)
		v := recover()
		if v == nil {
			return
		}
		if f, ok := v.(interface{ Addr() uintptr }); ok {
			*err = fmt.Errorf("%s: store at %d faulted (address %#x): %w", r.name, off, f.Addr(), syscall.EIO)
			return
		}
		panic(v)
	}
}

// Close unmaps the region.
func (r *Region) Close() error {
	if r.data == nil {
		return nil
	}
	err := unix.Munmap(r.data)
	r.data = nil
	return err
}
