package protect

import (
	"os"
	"slices"
	"syscall"

	"github.com/cmfs-project/cmfs/internal/checksum"
	"github.com/cmfs-project/cmfs/internal/extents"
)

// A write into part of a large file is journaled with the checksum of the
// whole file, at close. Writes pass through to the backing file (FUSE
// passthrough) and cmfs never sees where they land; but on a filesystem
// with reflinks the original the open kept in cmroot is a clone that
// shares every extent of the file, and each block written since has moved
// to an extent of its own (copy on write). Where the file and the clone
// still map the same physical bytes, the file holds the original's data,
// whose block sums the cache kept from the hash that made its checksum:
// only the other blocks are read (rehash). Anything unclear — no block
// sums, no clone, a filesystem without FIEMAP, a file that changes
// meanwhile — is a full hash, as before.

// dirtyShare is the most of a file's size, as a fraction 1/dirtyShare,
// that may still be unwritten to disk for a rehash to be tried: its
// extent map first writes the dirty pages back (FIEMAP_FLAG_SYNC), which
// native close never waits for, and past that share a full hash of the
// cached pages is cheaper.
const dirtyShare = 16

// sumWritten returns the checksum and stat of the handle's content for a
// close (h.mu held), with src reading it and st its fstat just taken:
// from the cache, by rehash of the blocks written where it can, by full
// hash otherwise.
func (h *Handle) sumWritten(src *os.File, st *syscall.Stat_t) (string, *syscall.Stat_t, error) {
	c := h.c
	if sum, ok := c.sums.get(statState(st)); ok {
		return sum, st, nil
	}
	if h.orig != nil && st.Size > checksum.BlockSize && (st.Blocks-h.openBlocks)*512 <= st.Size/dirtyShare {
		if blocks := c.sums.blocksFor(st.Ino, h.orig.XXH64, h.orig.Size); blocks != nil {
			if sum, cur, ok := c.rehash(src, st, h.orig, blocks); ok {
				return sum, cur, nil
			}
		}
	}
	return c.sumFileFrom(src, st)
}

// rehash computes the checksum of f, which was in state st, from orig's
// block sums and the blocks of f that no longer share orig's cmroot
// entry's extents, and caches it with its block sums. It says false if
// it could not tell (the caller hashes it all).
func (c *Core) rehash(f *os.File, st *syscall.Stat_t, orig *preserved, blocks []uint64) (string, *syscall.Stat_t, bool) {
	ref, err := c.cm.Open(orig.CM)
	if err != nil {
		return "", nil, false
	}
	defer ref.Close()
	// The entry's map first: it has no dirty pages, and unless it was
	// cloned (it shares extents) there is nothing to compare, and no
	// reason to make the file's writes wait for the disk.
	rm, err := extents.Map(ref)
	if err != nil || !slices.ContainsFunc(rm, func(e extents.Extent) bool { return e.Flags&extents.Shared != 0 }) {
		return "", nil, false
	}
	fm, err := extents.Map(f)
	if err != nil {
		return "", nil, false
	}
	same := extents.Same(fm, rm)
	if len(same) == 0 {
		return "", nil, false
	}
	sums := make([]uint64, checksum.BlockCount(st.Size))
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := (*bp)[:checksum.BlockSize]
	var read int64
	k := 0
	for i := range sums {
		start := int64(i) * checksum.BlockSize
		end := min(start+checksum.BlockSize, st.Size)
		if i < len(blocks) && end == min(start+checksum.BlockSize, orig.Size) &&
			extents.Covers(same, &k, uint64(start), uint64(end)) {
			sums[i] = blocks[i]
			continue
		}
		n, err := f.ReadAt(buf[:end-start], start)
		read += int64(n)
		if err != nil {
			c.hashed.Add(read)
			return "", nil, false
		}
		sums[i] = checksum.Block(buf[:n])
	}
	c.hashed.Add(read)
	c.rehashed.Add(st.Size - read)
	var after syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &after); err != nil || statState(&after) != statState(st) {
		return "", nil, false // written meanwhile
	}
	sum := checksum.Format(checksum.Combine(sums))
	c.sums.put(statState(&after), sum, sums)
	return sum, &after, true
}
