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
// Memory. Encode, Reconstruct and Reader work a batch of stripes at a
// time (at most batchBytes per index), never a whole container.
package ec
