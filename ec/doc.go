// Package ec is replicad's Reed-Solomon striping, after Ozone's EC
// containers: a container's bytes, taken as one logical stream (its chunk
// files back to back), are cut into stripes of D data cells of Cell bytes;
// P parity cells are computed for each stripe (klauspost/reedsolomon);
// replica index i (1…D data, D+1…D+P parity) holds cell i of every
// stripe, back to back, in its own container replica on its own node. Any
// D indexes give back the rest.
//
// Layout. Every stripe but the last is full. In the last one the data
// cells hold what is left, in order (some may be short or empty) and the
// parity cells are as long as its first cell; encoding pads the short
// cells with zeros in memory only. So cell (s, i) sits at offset s*Cell of
// index i's file and an index file is Layout.IndexSize(i) bytes.
//
// Table. Every cell of every index has an xxh64 (Table), written when
// the container is encoded and kept with every index, so that a reader
// checks each cell it gets, from whichever node, against a table that
// did not come with the cell. A cell that fails its checksum counts as
// missing.
//
// Reading. Reconstruct rebuilds whole indexes from any D others; a
// Reader serves the logical bytes, reading only the data cells that
// hold them and decoding a stripe only where a data cell is missing or
// bad (a degraded read, counted by Reader.Degraded). Both read their
// cells through a CellSource, D at once, check each against the table,
// drop an index that fails and take the next, and refuse to decode from
// fewer than D good cells (ErrTooFewCells): nothing is invented.
//
// Memory. Encode, Reconstruct and Reader work a batch of stripes at a
// time (at most 4 MiB per index), never a whole container: Encode holds
// two batches of D+P cells (72 MiB for rs-6-3-1024k), Reconstruct the D
// cells it reads and the cells it rebuilds of one batch, a Reader as
// much per ReadAt in flight. Batch buffers are pooled between calls.
package ec
