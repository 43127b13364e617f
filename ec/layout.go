package ec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Scheme is a Reed-Solomon configuration: Data cells and Parity cells of
// Cell bytes per stripe.
type Scheme struct {
	Data, Parity int
	Cell         int
}

// Limits of a scheme: reedsolomon's own (data+parity ≤ 256) and a cell
// from 1 KiB to 64 MiB.
const (
	maxShards = 256
	minCell   = 1 << 10
	maxCell   = 64 << 20
)

// DefaultScheme is rs-6-3-1024k, Ozone's default.
var DefaultScheme = Scheme{Data: 6, Parity: 3, Cell: 1 << 20}

// ErrScheme is wrapped by ParseScheme's and Validate's errors.
var ErrScheme = errors.New("bad EC scheme")

// ParseScheme reads "ec:rs-D-P-CELLk" (or "rs-D-P-CELLk"), CELL in KiB.
func ParseScheme(s string) (Scheme, error) {
	bad := fmt.Errorf("ec scheme %q: want ec:rs-D-P-CELLk: %w", s, ErrScheme)
	rest, ok := strings.CutPrefix(strings.TrimPrefix(s, "ec:"), "rs-")
	f := strings.Split(rest, "-")
	if !ok || len(f) != 3 || !strings.HasSuffix(f[2], "k") {
		return Scheme{}, bad
	}
	var v [3]int
	for k, x := range []string{f[0], f[1], strings.TrimSuffix(f[2], "k")} {
		n, err := strconv.Atoi(x)
		if err != nil || n < 1 || n > maxCell>>10 {
			return Scheme{}, bad
		}
		v[k] = n
	}
	sc := Scheme{Data: v[0], Parity: v[1], Cell: v[2] << 10}
	if err := sc.Validate(); err != nil {
		return Scheme{}, fmt.Errorf("ec scheme %q: %w", s, err)
	}
	return sc, nil
}

// Validate refuses a scheme reedsolomon or the layout cannot use.
func (sc Scheme) Validate() error {
	switch {
	case sc.Data < 1 || sc.Parity < 1:
		return fmt.Errorf("%d data and %d parity cells: want at least 1 of each: %w", sc.Data, sc.Parity, ErrScheme)
	case sc.Data+sc.Parity > maxShards:
		return fmt.Errorf("%d cells per stripe: at most %d: %w", sc.Data+sc.Parity, maxShards, ErrScheme)
	case sc.Cell < minCell || sc.Cell > maxCell || sc.Cell%minCell != 0:
		return fmt.Errorf("cell of %d bytes: want a multiple of 1 KiB up to 64 MiB: %w", sc.Cell, ErrScheme)
	}
	return nil
}

func (sc Scheme) String() string {
	return fmt.Sprintf("ec:rs-%d-%d-%dk", sc.Data, sc.Parity, sc.Cell>>10)
}

// Total is how many indexes a container has: D+P.
func (sc Scheme) Total() int { return sc.Data + sc.Parity }

// StripeBytes is the data one full stripe holds: D cells.
func (sc Scheme) StripeBytes() int64 { return int64(sc.Data) * int64(sc.Cell) }

// Layout is a scheme applied to Size logical bytes.
type Layout struct {
	Scheme
	Size int64
}

// Stripes is how many stripes hold Size bytes: 0 for none.
func (l Layout) Stripes() int64 {
	sb := l.StripeBytes()
	return (l.Size + sb - 1) / sb
}

// CellLen is the length of cell (stripe, index), index 1…D+P.
func (l Layout) CellLen(stripe int64, index int) int {
	n := l.Stripes()
	if stripe < 0 || stripe >= n || index < 1 || index > l.Total() {
		return 0
	}
	if stripe < n-1 {
		return l.Cell
	}
	left := l.Size - stripe*l.StripeBytes() // data in the last stripe, > 0
	if index > l.Data {
		index = 1 // a parity cell is as long as the stripe's first cell
	}
	return int(min(int64(l.Cell), max(0, left-int64(index-1)*int64(l.Cell))))
}

// IndexSize is the size of index's file: its cells back to back.
func (l Layout) IndexSize(index int) int64 {
	n := l.Stripes()
	if n == 0 || index < 1 || index > l.Total() {
		return 0
	}
	return (n-1)*int64(l.Cell) + int64(l.CellLen(n-1, index))
}

// cellsLen is the length of cells first…first+n-1 of index, back to back.
func (l Layout) cellsLen(index int, first, n int64) int64 {
	end := min(first+n, l.Stripes())
	if first >= end {
		return 0
	}
	return (end-1-first)*int64(l.Cell) + int64(l.CellLen(end-1, index))
}

// Table holds the xxh64 of every cell, stripe by stripe, index by index.
type Table struct {
	total int
	sums  []uint64
}

// NewTable returns an all-zero table for l.
func NewTable(l Layout) Table {
	return Table{total: l.Total(), sums: make([]uint64, l.Stripes()*int64(l.Total()))}
}

// Sum is the checksum of cell (stripe, index).
func (t Table) Sum(stripe int64, index int) uint64 {
	return t.sums[stripe*int64(t.total)+int64(index-1)]
}

func (t Table) set(stripe int64, index int, v uint64) {
	t.sums[stripe*int64(t.total)+int64(index-1)] = v
}

// Equal reports whether two tables are the same.
func (t Table) Equal(u Table) bool {
	if t.total != u.total || len(t.sums) != len(u.sums) {
		return false
	}
	for k := range t.sums {
		if t.sums[k] != u.sums[k] {
			return false
		}
	}
	return true
}

// MarshalBinary encodes the table: the sums as 8-byte big-endian values,
// stripe by stripe, index by index.
func (t Table) MarshalBinary() ([]byte, error) {
	b := make([]byte, 8*len(t.sums))
	for k, v := range t.sums {
		binary.BigEndian.PutUint64(b[8*k:], v)
	}
	return b, nil
}

// ParseTable decodes a table MarshalBinary wrote for l.
func ParseTable(l Layout, b []byte) (Table, error) {
	t := NewTable(l)
	if len(b) != 8*len(t.sums) {
		return Table{}, fmt.Errorf("cell table of %d bytes: want %d for %d stripes of %d cells", len(b), 8*len(t.sums), l.Stripes(), l.Total())
	}
	for k := range t.sums {
		t.sums[k] = binary.BigEndian.Uint64(b[8*k:])
	}
	return t, nil
}
