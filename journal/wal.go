package journal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/cespare/xxhash/v2"
	"golang.org/x/sys/unix"

	"github.com/cmfs-project/cmfs/internal/mapped"
)

// The write-ahead file (WAL) in front of bbolt: a group commit writes its
// events there and makes them durable with one data-only fdatasync — the
// file is preallocated and written once with zeros, so a sync never needs
// the file system's own journal — and the events are applied to bbolt
// behind it, many groups per bbolt transaction (see writer.go).
//
// Layout: a header page, then two segments of equal size used in turn.
//
//	header (4 KiB): "CMFSWAL1" | segment size u64 | durable u64 | xxh64 of the 24 bytes before
//	record:         body length u32 | xxh64(body) u64 | body
//	body:           first id u64 | count u32 | durable u64 | count × (length u32 | event record)
//
// An event record is what bbolt stores under the event's id (its checksum,
// then its JSON). "durable" is the newest id whose group's flush had
// completed — content and everything the events name on disk — when the
// record (or the header) was written; the header's copy is rewritten,
// without a sync, after every flush, so that after a kill -9 (the page
// cache survives) it names the last group, and after a power loss it is
// at worst older than it could be. All integers are big-endian.
//
// A segment holds records back to back from its start; its valid records
// are the prefix whose checksums hold and whose ids run on without a gap.
// The writer reuses a segment only once bbolt holds every event in it, and
// starts it again at offset 0: whatever lies beyond the new records is
// older — smaller ids — and ends the valid prefix. Open replays the valid
// records beyond bbolt's newest id into bbolt and empties both segments
// (zeroes the first record of each), so a torn or damaged tail is simply
// not part of any valid prefix and is cut back.
//
// Records are stored through a shared mapping of the file (internal/mapped),
// not written with a pwrite each (where the file system can map it): the mapping costs a fraction of the
// system call, and what is stored is in the page cache, so a kill -9 loses
// nothing of a record whose store finished; the fdatasync of a flush writes
// the mapped pages back with the rest. A store cut short by the process's
// death leaves a record whose checksum fails: the end of the valid prefix,
// as a torn write would. The header is still written with pwrite: a
// 32-byte write within one page lands whole or not at all, which a
// process killed between stores would not give.
const (
	walMagic      = "CMFSWAL1"
	walHeaderSize = 4 << 10
	walRecHead    = 4 + 8
	walBodyHead   = 8 + 4 + 8
	// DefaultWALSegment is the size of each of the WAL's two segments (less
	// on a file system with under 1 GiB free: a 128th of what is free):
	// tens of thousands of events, while bbolt applies them within
	// milliseconds.
	DefaultWALSegment = 8 << 20
	minWALSegment     = 256 << 10
)

// walPath is where the WAL of the journal at path lives.
func walPath(path string) string { return path + "-wal" }

// wal is the open write-ahead file. The leader owns cur, off and
// segLast; the header is written under the Log's syncMu.
type wal struct {
	f       *os.File
	seg     int64     // segment size
	cur     int       // segment written now
	off     int64     // next write offset within cur
	segLast [2]uint64 // newest id written into each segment since it was started (0: none)
	buf     []byte
	m       *mapped.Region // the whole file, read-write; nil when opened read-only
}

// walRecord is one valid record found by a scan.
type walRecord struct {
	first   uint64
	durable uint64
	events  [][]byte // event records, ids first, first+1, …
	seg     int
	end     int64 // offset within its segment just past it
}

func (r *walRecord) last() uint64 { return r.first + uint64(len(r.events)) - 1 }

// createWAL makes a new WAL at p with segments of seg bytes, written with
// zeros and synced, and syncs its directory.
func createWAL(p string, seg int64) error {
	tmp := p + ".tmp"
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	zero := make([]byte, 1<<20)
	total := walHeaderSize + 2*seg
	for off := int64(0); off < total; off += int64(len(zero)) {
		n := min(int64(len(zero)), total-off)
		if _, err := f.WriteAt(zero[:n], off); err != nil {
			f.Close()
			return err
		}
	}
	if _, err := f.WriteAt(walHeader(seg, 0), 0); err != nil {
		f.Close()
		return err
	}
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, p); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(p))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func walHeader(seg int64, durable uint64) []byte {
	h := make([]byte, 32)
	copy(h, walMagic)
	binary.BigEndian.PutUint64(h[8:], uint64(seg))
	binary.BigEndian.PutUint64(h[16:], durable)
	binary.BigEndian.PutUint64(h[24:], xxhash.Sum64(h[:24]))
	return h
}

// openWAL opens the WAL at p, creating it with segments of seg bytes when
// it is missing (or readOnly is false and it was left half made). An
// existing WAL keeps the segment size it was made with.
func openWAL(p string, seg int64, readOnly bool) (*wal, uint64, error) {
	flag := os.O_RDWR
	if readOnly {
		flag = os.O_RDONLY
	}
	f, err := os.OpenFile(p, flag, 0)
	if errors.Is(err, os.ErrNotExist) && !readOnly {
		// A small file system gets small segments: a WAL takes at most
		// a 64th of the room left, but at least two minimal segments.
		var st unix.Statfs_t
		if unix.Statfs(filepath.Dir(p), &st) == nil {
			seg = max(minWALSegment, min(seg, int64(st.Bavail)*st.Bsize/128))
		}
		if err = createWAL(p, seg); err != nil {
			return nil, 0, fmt.Errorf("create %s: %w", p, err)
		}
		f, err = os.OpenFile(p, flag, 0)
	}
	if err != nil {
		return nil, 0, err
	}
	h := make([]byte, 32)
	if _, err := f.ReadAt(h, 0); err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("%s: header: %v: %w", p, err, ErrCorrupt)
	}
	if string(h[:8]) != walMagic || binary.BigEndian.Uint64(h[24:]) != xxhash.Sum64(h[:24]) {
		f.Close()
		return nil, 0, fmt.Errorf("%s: damaged header: %w", p, ErrCorrupt)
	}
	w := &wal{f: f, seg: int64(binary.BigEndian.Uint64(h[8:]))}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	if w.seg < minWALSegment || fi.Size() < walHeaderSize+2*w.seg {
		f.Close()
		return nil, 0, fmt.Errorf("%s: %d bytes, header says segments of %d: %w", p, fi.Size(), w.seg, ErrCorrupt)
	}
	if !readOnly {
		// A file system that cannot map the file (a FUSE one serving
		// it direct_io) is written with pwrite.
		w.m, _ = mapped.Map(f, walHeaderSize+2*w.seg)
	}
	return w, binary.BigEndian.Uint64(h[16:]), nil
}

// scan returns the valid records of both segments, in id order, starting
// after base (bbolt's newest id): records wholly at or below base are
// left out. It fails with ErrCorrupt when the records beyond base do not
// start at base+1 or leave a gap between the segments.
func (w *wal) scan(base uint64) ([]walRecord, error) {
	var segs [2][]walRecord
	for s := range 2 {
		recs, holes, err := w.scanSegment(s)
		if err != nil {
			return nil, err
		}
		for _, h := range holes {
			if h[1] > base {
				return nil, fmt.Errorf("WAL segment %d: the record of events %d–%d is damaged, and later events follow it: %w", s, h[0], h[1], ErrCorrupt)
			}
		}
		segs[s] = recs
	}
	if len(segs[0]) > 0 && len(segs[1]) > 0 && segs[1][0].first < segs[0][0].first {
		segs[0], segs[1] = segs[1], segs[0]
	}
	var out []walRecord
	for _, recs := range segs {
		for _, r := range recs {
			if r.last() <= base {
				continue
			}
			want := base + 1
			if n := len(out); n > 0 {
				want = out[n-1].last() + 1
			}
			if r.first > want {
				return nil, fmt.Errorf("WAL: event %d follows %d: %w", r.first, want-1, ErrCorrupt)
			}
			if r.first < want { // partly applied already
				r.events = r.events[want-r.first:]
				r.first = want
			}
			out = append(out, r)
		}
	}
	return out, nil
}

// scanSegment reads segment s's valid prefix. A damaged record followed
// by a good one of later events is damage in the middle, not a torn end:
// its ids are returned as a hole, which scan refuses unless bbolt holds
// them already.
func (w *wal) scanSegment(s int) (out []walRecord, holes [][2]uint64, err error) {
	// Read as far as the records go, not the whole segment: after a clean
	// stop it starts with zeros.
	var data []byte
	var rerr error
	have := func(end int64) bool {
		if end > w.seg {
			return false
		}
		if int64(len(data)) >= end || rerr != nil {
			return int64(len(data)) >= end
		}
		to := min(w.seg, max(end, 2*int64(len(data)), 64<<10))
		buf := make([]byte, to)
		copy(buf, data)
		_, err := w.f.ReadAt(buf[len(data):], walHeaderSize+int64(s)*w.seg+int64(len(data)))
		if err != nil && !errors.Is(err, io.EOF) {
			rerr = err
			return false
		}
		data = buf
		return true
	}
	var off int64
	for have(off + walRecHead + walBodyHead) {
		n := int64(binary.BigEndian.Uint32(data[off:]))
		if n < walBodyHead || !have(off+walRecHead+n) {
			break
		}
		body := data[off+walRecHead : off+walRecHead+n]
		if xxhash.Sum64(body) != binary.BigEndian.Uint64(data[off+4:]) {
			// A torn or damaged last record ends the segment. One with a
			// good record of later events behind it is damage in the
			// middle: refuse rather than drop what was acknowledged.
			if k := len(out); k > 0 {
				next := off + walRecHead + n
				if have(next + walRecHead) {
					have(next + walRecHead + int64(binary.BigEndian.Uint32(data[next:])))
				}
				if next, ok := recordAt(data, next); ok && next > out[k-1].last() {
					holes = append(holes, [2]uint64{out[k-1].last() + 1, next - 1})
					off += walRecHead + n
					continue
				}
			}
			break
		}
		r := walRecord{
			first:   binary.BigEndian.Uint64(body),
			durable: binary.BigEndian.Uint64(body[12:]),
			seg:     s,
		}
		count := int(binary.BigEndian.Uint32(body[8:]))
		p := body[walBodyHead:]
		for range count {
			if len(p) < 4 || int64(binary.BigEndian.Uint32(p)) > int64(len(p)-4) {
				break
			}
			k := binary.BigEndian.Uint32(p)
			r.events = append(r.events, p[4:4+k])
			p = p[4+k:]
		}
		if len(r.events) != count || count == 0 || r.first == 0 {
			break
		}
		if k := len(out); k > 0 && out[k-1].last()+1 != r.first && !(len(holes) > 0 && holes[len(holes)-1][1]+1 == r.first) {
			break // an older record beyond the segment's current end
		}
		off += walRecHead + n
		r.end = off
		out = append(out, r)
	}
	if rerr != nil {
		return nil, nil, rerr
	}
	return out, holes, nil
}

// recordAt returns the first id of a valid record at off in data.
func recordAt(data []byte, off int64) (uint64, bool) {
	if off+walRecHead+walBodyHead > int64(len(data)) {
		return 0, false
	}
	n := int64(binary.BigEndian.Uint32(data[off:]))
	if n < walBodyHead || off+walRecHead+n > int64(len(data)) {
		return 0, false
	}
	body := data[off+walRecHead : off+walRecHead+n]
	if xxhash.Sum64(body) != binary.BigEndian.Uint64(data[off+4:]) {
		return 0, false
	}
	return binary.BigEndian.Uint64(body), true
}

// encode builds the record of events first… (records back to back in
// arena, record i ending at ends[i]) into w.buf.
func (w *wal) encode(first, durable uint64, arena []byte, ends []int) []byte {
	b := append(w.buf[:0], make([]byte, walRecHead)...)
	b = binary.BigEndian.AppendUint64(b, first)
	b = binary.BigEndian.AppendUint32(b, uint32(len(ends)))
	b = binary.BigEndian.AppendUint64(b, durable)
	start := 0
	for _, end := range ends {
		b = binary.BigEndian.AppendUint32(b, uint32(end-start))
		b = append(b, arena[start:end]...)
		start = end
	}
	binary.BigEndian.PutUint32(b, uint32(len(b)-walRecHead))
	binary.BigEndian.PutUint64(b[4:], xxhash.Sum64(b[walRecHead:]))
	w.buf = b
	return b
}

// recordSize is the size of the record of events with these record sizes.
func recordSize(records int, bytes int) int64 {
	return int64(walRecHead + walBodyHead + 4*records + bytes)
}

// write stores rec at the current offset of the current segment.
func (w *wal) write(rec []byte) (off int64, err error) {
	off = w.off
	if err = w.writeAt(rec, walHeaderSize+int64(w.cur)*w.seg+off); err != nil {
		return off, err
	}
	w.off += int64(len(rec))
	return off, nil
}

// retract makes the record written at off of the current segment invalid
// and takes the write offset back to it.
func (w *wal) retract(off int64) error {
	if err := w.writeAt(make([]byte, walRecHead), walHeaderSize+int64(w.cur)*w.seg+off); err != nil {
		return err
	}
	w.off = off
	return nil
}

// writeAt stores b at off through the mapping, or writes it where there
// is none.
func (w *wal) writeAt(b []byte, off int64) error {
	if w.m != nil {
		return w.m.Write(off, b)
	}
	_, err := w.f.WriteAt(b, off)
	return err
}

// start begins segment s again at offset 0.
func (w *wal) start(s int) {
	w.cur, w.off, w.segLast[s] = s, 0, 0
}

// setDurable rewrites the header's durable id, without a sync.
func (w *wal) setDurable(id uint64) error {
	_, err := w.f.WriteAt(walHeader(w.seg, id), 0)
	return err
}

// reset empties both segments (their first record zeroed) and syncs.
func (w *wal) reset(durable uint64) error {
	zero := make([]byte, walRecHead)
	for s := range 2 {
		if _, err := w.f.WriteAt(zero, walHeaderSize+int64(s)*w.seg); err != nil {
			return err
		}
	}
	if _, err := w.f.WriteAt(walHeader(w.seg, durable), 0); err != nil {
		return err
	}
	w.segLast = [2]uint64{}
	w.start(0)
	return unix.Fdatasync(int(w.f.Fd()))
}

func (w *wal) sync() error { return unix.Fdatasync(int(w.f.Fd())) }

func (w *wal) close() error {
	var err error
	if w.m != nil {
		err = w.m.Close()
	}
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	return err
}
