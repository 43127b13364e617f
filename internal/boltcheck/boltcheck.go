// Package boltcheck checks the page structure of a bbolt file without
// bbolt, and turns bbolt's panics into errors.
//
// bbolt trusts its file: a damaged page header or element makes it panic
// (an assertion, an index out of range, a fault on the mmap), sometimes in
// a goroutine of its own that no caller can recover (the freelist rebuild
// of a writable Open with NoFreelistSync, Tx.Check). Check reads the file
// with bounds checks on every access and reports the first damaged page, so
// that a caller can refuse the file before bbolt walks it; Guard recovers
// the panics of the calls that read it lazily.
package boltcheck

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"runtime/debug"
)

// PageError is a damaged page found by Check.
type PageError struct {
	Page uint64 // the page id (0 and 1 are the meta pages)
	Msg  string
}

func (e *PageError) Error() string { return fmt.Sprintf("page %d: %s", e.Page, e.Msg) }

// ErrMeta is wrapped by Check when neither meta page is valid.
var ErrMeta = errors.New("no valid meta page")

// On-disk layout of bbolt (go.etcd.io/bbolt/internal/common).
const (
	pageHeaderSize  = 16
	elemSize        = 16
	branchFlag      = 0x01
	leafFlag        = 0x02
	metaFlag        = 0x04
	freelistFlag    = 0x10
	bucketLeafFlag  = 0x01
	magic           = 0xED0CDAED
	version         = 2
	metaSize        = 64 // up to and including the checksum
	metaSumOffset   = 56
	noFreelist      = ^uint64(0)
	bucketHeaderLen = 16
	maxDepth        = 64
)

type meta struct {
	pageSize uint32
	root     uint64
	freelist uint64
	hwm      uint64
	txid     uint64
}

// Check walks the bbolt file at path from its newest valid meta page
// through every bucket's B+tree, and returns a *PageError for the first
// page that bbolt would trip over: an id that is not its own, a page type
// that is not expected, a page past the end of the file or referenced
// twice, an element outside its page, keys out of order. It returns an
// error wrapping ErrMeta when neither meta page is valid (bbolt's Open
// refuses that itself, without panicking), and I/O errors as they are.
func Check(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	c := &checker{f: f, size: fi.Size(), seen: map[uint64]bool{}}
	m, err := c.meta()
	if err != nil {
		return err
	}
	c.m = m
	if m.freelist != noFreelist {
		p, err := c.page(m.freelist)
		if err != nil {
			return err
		}
		if flags(p) != freelistFlag {
			return &PageError{m.freelist, fmt.Sprintf("freelist page has type %#x", flags(p))}
		}
	}
	_, err = c.tree(m.root, nil, nil, 0)
	return err
}

type checker struct {
	f    *os.File
	size int64
	m    meta
	seen map[uint64]bool
}

// meta returns the meta page bbolt would use: the valid one with the
// highest transaction id.
func (c *checker) meta() (meta, error) {
	var best meta
	found := false
	var why [2]string
	// bbolt reads page 0 at offset 0 and finds the page size in it; page 1
	// is at that page size. Try the size page 0 claims, else the OS's.
	size0 := uint32(os.Getpagesize())
	buf := make([]byte, pageHeaderSize+metaSize)
	if _, err := c.f.ReadAt(buf, 0); err == nil {
		if ps := binary.LittleEndian.Uint32(buf[pageHeaderSize+8:]); ps >= 512 && ps <= 1<<20 && ps&(ps-1) == 0 {
			size0 = ps
		}
	}
	for i := uint64(0); i < 2; i++ {
		if _, err := c.f.ReadAt(buf, int64(i)*int64(size0)); err != nil {
			if err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF) {
				why[i] = "past the end of the file"
				continue
			}
			return meta{}, err
		}
		m, msg := parseMeta(i, buf)
		if msg != "" {
			why[i] = msg
			continue
		}
		if !found || m.txid > best.txid {
			best, found = m, true
		}
	}
	if !found {
		return meta{}, fmt.Errorf("%w (page 0: %s; page 1: %s)", ErrMeta, why[0], why[1])
	}
	return best, nil
}

func parseMeta(id uint64, buf []byte) (meta, string) {
	le := binary.LittleEndian
	if got := le.Uint64(buf); got != id {
		return meta{}, fmt.Sprintf("identifies as page %d", got)
	}
	if flags(buf) != metaFlag {
		return meta{}, fmt.Sprintf("type %#x, not a meta page", flags(buf))
	}
	b := buf[pageHeaderSize:]
	h := fnv.New64a()
	h.Write(b[:metaSumOffset])
	if h.Sum64() != le.Uint64(b[metaSumOffset:]) {
		return meta{}, "checksum mismatch"
	}
	if le.Uint32(b) != magic {
		return meta{}, "bad magic"
	}
	if le.Uint32(b[4:]) != version {
		return meta{}, fmt.Sprintf("version %d", le.Uint32(b[4:]))
	}
	return meta{
		pageSize: le.Uint32(b[8:]),
		root:     le.Uint64(b[16:]),
		freelist: le.Uint64(b[32:]),
		hwm:      le.Uint64(b[40:]),
		txid:     le.Uint64(b[48:]),
	}, ""
}

func flags(p []byte) uint16 { return binary.LittleEndian.Uint16(p[8:]) }
func count(p []byte) int    { return int(binary.LittleEndian.Uint16(p[10:])) }

// page reads page id with its overflow pages, after checking its header.
func (c *checker) page(id uint64) ([]byte, error) {
	ps := int64(c.m.pageSize)
	if id < 2 || id >= c.m.hwm {
		return nil, &PageError{id, fmt.Sprintf("referenced, but outside the data pages 2..%d", c.m.hwm-1)}
	}
	if (int64(id)+1)*ps > c.size {
		return nil, &PageError{id, "past the end of the file"}
	}
	hdr := make([]byte, pageHeaderSize)
	if _, err := c.f.ReadAt(hdr, int64(id)*ps); err != nil {
		return nil, err
	}
	if got := binary.LittleEndian.Uint64(hdr); got != id {
		return nil, &PageError{id, fmt.Sprintf("header identifies it as page %d", got)}
	}
	over := uint64(binary.LittleEndian.Uint32(hdr[12:]))
	if id+over >= c.m.hwm || (int64(id+over)+1)*ps > c.size {
		return nil, &PageError{id, fmt.Sprintf("%d overflow pages run past the end", over)}
	}
	p := make([]byte, int64(over+1)*ps)
	if _, err := c.f.ReadAt(p, int64(id)*ps); err != nil {
		return nil, err
	}
	return p, nil
}

// tree checks the B+tree rooted at page id, as bbolt's Tx.Check does:
// keys must lie in [lo, hi). It returns the greatest key of the subtree.
func (c *checker) tree(id uint64, lo, hi []byte, depth int) ([]byte, error) {
	if depth > maxDepth {
		return nil, &PageError{id, "tree deeper than any bbolt file"}
	}
	if c.seen[id] {
		return nil, &PageError{id, "referenced twice"}
	}
	p, err := c.page(id)
	if err != nil {
		return nil, err
	}
	over := uint64(len(p))/uint64(c.m.pageSize) - 1
	for i := uint64(0); i <= over; i++ {
		if c.seen[id+i] {
			return nil, &PageError{id + i, "referenced twice"}
		}
		c.seen[id+i] = true
	}
	switch flags(p) {
	case branchFlag:
		return c.branch(id, p, lo, hi, depth)
	case leafFlag:
		return c.leaf(id, p, lo, hi, depth)
	default:
		return nil, &PageError{id, fmt.Sprintf("type %#x where a branch or leaf page belongs", flags(p))}
	}
}

// element returns the key (and for a leaf the value) of element i.
func element(p []byte, i int, leaf bool) (k, v []byte, fl uint32, child uint64, msg string) {
	le := binary.LittleEndian
	at := pageHeaderSize + i*elemSize
	if at+elemSize > len(p) {
		return nil, nil, 0, 0, fmt.Sprintf("element %d of %d lies outside the page", i, count(p))
	}
	e := p[at : at+elemSize]
	var pos, ksize, vsize uint64
	if leaf {
		fl, pos, ksize, vsize = le.Uint32(e), uint64(le.Uint32(e[4:])), uint64(le.Uint32(e[8:])), uint64(le.Uint32(e[12:]))
	} else {
		pos, ksize, child = uint64(le.Uint32(e)), uint64(le.Uint32(e[4:])), le.Uint64(e[8:])
	}
	start := uint64(at) + pos
	if start+ksize+vsize > uint64(len(p)) {
		return nil, nil, 0, 0, fmt.Sprintf("element %d: key and value run past the page", i)
	}
	return p[start : start+ksize], p[start+ksize : start+ksize+vsize], fl, child, ""
}

func (c *checker) branch(id uint64, p, lo, hi []byte, depth int) ([]byte, error) {
	n := count(p)
	if n == 0 {
		return nil, &PageError{id, "empty branch page"}
	}
	min := lo
	var max []byte
	for i := 0; i < n; i++ {
		k, _, _, child, msg := element(p, i, false)
		if msg != "" {
			return nil, &PageError{id, msg}
		}
		if err := order(id, i, k, min, hi); err != nil {
			return nil, err
		}
		next := hi
		if i+1 < n {
			nk, _, _, _, msg := element(p, i+1, false)
			if msg != "" {
				return nil, &PageError{id, msg}
			}
			next = nk
		}
		var err error
		if max, err = c.tree(child, k, next, depth+1); err != nil {
			return nil, err
		}
		min = max
	}
	return max, nil
}

func (c *checker) leaf(id uint64, p, lo, hi []byte, depth int) ([]byte, error) {
	prev := lo
	for i := 0; i < count(p); i++ {
		k, v, fl, _, msg := element(p, i, true)
		if msg != "" {
			return nil, &PageError{id, msg}
		}
		if err := order(id, i, k, prev, hi); err != nil {
			return nil, err
		}
		prev = k
		if fl&bucketLeafFlag == 0 {
			continue
		}
		if len(v) < bucketHeaderLen {
			return nil, &PageError{id, fmt.Sprintf("element %d: bucket header of %d bytes", i, len(v))}
		}
		root := binary.LittleEndian.Uint64(v)
		if root == 0 {
			// An inline bucket: a leaf page inside the value.
			in := v[bucketHeaderLen:]
			if len(in) < pageHeaderSize || flags(in) != leafFlag {
				return nil, &PageError{id, fmt.Sprintf("element %d: inline bucket is not a leaf", i)}
			}
			var iprev []byte
			for j := 0; j < count(in); j++ {
				ik, _, _, _, msg := element(in, j, true)
				if msg != "" {
					return nil, &PageError{id, fmt.Sprintf("element %d: inline bucket: %s", i, msg)}
				}
				if iprev != nil && bytes.Compare(iprev, ik) >= 0 {
					return nil, &PageError{id, fmt.Sprintf("element %d: inline bucket: keys out of order", i)}
				}
				iprev = ik
			}
			continue
		}
		if _, err := c.tree(root, nil, nil, depth+1); err != nil {
			return nil, err
		}
	}
	return prev, nil
}

// order checks key k, element i of page id: after prev (the lower bound
// for the first element, which may equal it), below hi.
func order(id uint64, i int, k, prev, hi []byte) error {
	if prev != nil {
		if c := bytes.Compare(prev, k); c > 0 || (c == 0 && i > 0) {
			return &PageError{id, fmt.Sprintf("element %d: keys out of order", i)}
		}
	}
	if hi != nil && bytes.Compare(k, hi) >= 0 {
		return &PageError{id, fmt.Sprintf("element %d: key beyond its parent's range", i)}
	}
	return nil
}

// Guard runs fn and returns its error, or the panic fn raised as an error
// (with panics on memory faults enabled for the duration, so that a read
// of the mmap past its end is a panic too, not a crash).
func Guard(fn func() error) (err error) {
	old := debug.SetPanicOnFault(true)
	defer debug.SetPanicOnFault(old)
	defer func() {
		if p := recover(); p != nil {
			err = &Panic{Value: p}
		}
	}()
	return fn()
}

// Panic is a panic recovered by Guard.
type Panic struct{ Value any }

func (p *Panic) Error() string { return fmt.Sprint(p.Value) }
