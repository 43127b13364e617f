package ec

import (
	"context"
	"errors"
	"io"
)

// CellSource reads the cells of one container's indexes, wherever they
// are (a local index replica, a node over gRPC, a test's buffers).
type CellSource interface {
	// ReadCells returns the cells of index from stripe first to
	// first+n-1, back to back, each at its length in the layout. An
	// error makes Reconstruct and Reader take another index.
	ReadCells(ctx context.Context, index int, first, n int64) ([]byte, error)
}

// errTODO marks what the ec helper is writing now.
var errTODO = errors.New("ec: not implemented yet")

// Reconstruct writes the indexes in missing, cell by cell, to w (w[k]
// takes missing[k]), from the indexes in avail read through src: D of
// them per batch, in avail's order, each cell checked against t; an
// index whose read fails or whose cell fails its checksum is dropped and
// the next one read instead. It fails, having written part of w, when
// fewer than D good cells of some stripe can be had.
func Reconstruct(ctx context.Context, l Layout, t Table, src CellSource, avail, missing []int, w []io.Writer) error {
	return errTODO
}
