// Package container is replicad's unit of cross-host durability, after
// Apache Ozone's containers: a directory of blocks, addressed by content
// (xxh64 and size), that is filled while OPEN, then CLOSED (immutable,
// every checksum written) and copied whole between hosts as a tarball.
//
// Contract:
//
//   - Put appends a block to the open container of its replication config
//     (PutReplication; each config has its own, created on demand on the
//     volume with the most free space, so blocks put with replica:2 never
//     land in a replica:3 container); the same bytes twice in one
//     container are stored once. A container closes at
//     Options.ContainerSize, after Options.IdleClose, on CloseContainer or
//     on Store.Close. Put does not fsync: a block survives a killed
//     process at once and a power loss once its container is closed.
//     CloseContainer makes everything durable (chunk data, index,
//     checksum file, then the descriptor, CLOSED last). A close that
//     fails part-way (a full volume) leaves the container CLOSING with
//     its blocks served; CloseContainer again, or Verify, finishes it
//     from its index once the writes can succeed (OpenStore does after a
//     restart), and neither condemns it for the close it lost.
//   - OpenBlock serves a block from any OPEN, CLOSING or CLOSED container
//     holding it (an imported or crash-recovered one once its scan has
//     passed), and checks its xxh64 as it is read.
//   - Export streams a CLOSED or UNHEALTHY container as a tar (none, gzip,
//     snappy, lz4 or zstd) straight from its files; Import takes one in:
//     reservation, tarball in tmp, descriptor checked, extraction through
//     an os.Root of only the format's names, atomic rename, RECOVERING,
//     then a background scan (WaitScan) that makes it CLOSED or UNHEALTHY.
//     Nothing partial is ever visible under <volume>/<id>; nothing is
//     written outside <volume>/tmp before the rename; every failure path
//     removes the tarball and the temporary directory and releases the
//     reservation; a kill -9 leaves them in tmp, which OpenStore empties.
//   - EC. A container whose replication is ec:rs-D-P-CELLk is written
//     whole (replicaIndex 0) like any other. Encode stripes a CLOSED one
//     into its D+P index replicas (package ec), checking every block as
//     it streams past, and Reconstruct rebuilds some indexes from the
//     cells of D others (any ec.CellSource: local ReadCells, peers);
//     both stage the indexes under <volume>/tmp/ec-stage, space
//     reserved, and return a Staged: Export of an index (the tarball
//     Store.Export gives), Adopt (an atomic rename into the volume,
//     RECOVERING, then the scan, as an Import), Close (removes what was
//     not adopted). A failure leaves nothing staged. An index replica
//     holds cells, not blocks: OpenBlock never serves from it; ReadCells,
//     ECInfo, LocateBlock and OpenMeta read a CLOSED one.
//   - Prune forgets the containers (OPEN ones aside) whose directory was
//     removed behind the Store's back, so List stops claiming them.
//   - Verify re-reads everything a container holds and records CLOSED or
//     UNHEALTHY durably. No container becomes CLOSED without every
//     checksum matching, except by CloseContainer of the open one, whose
//     data this process wrote.
//   - A Store is safe for concurrent use. One Store at a time holds a
//     volume (flock on <volume>/.lock; ErrInUse otherwise).
//
// On-disk format (layout version 1) of a volume:
//
//	<volume>/.lock                     held by the Store that has the volume
//	<volume>/<id>/                     a container; id is a random non-zero uint64 in decimal
//	<volume>/tmp/container-copy/       tarballs being received: <id>.tar[.gz|.sz|.lz4|.zst]
//	<volume>/tmp/container-extract/    tarballs being unpacked: <id>-<random>/
//	<volume>/tmp/container-new/        containers being created
//	<volume>/tmp/container-delete/     containers being removed
//	<volume>/tmp/ec-stage/             EC index replicas being built: <id>-<random>/<index>/
//
// and of a container directory (the tarball holds the same names, in this
// order, container.yaml first):
//
//	container.yaml               the descriptor (Descriptor), YAML
//	metadata/container.checksum  the container checksum: 16 hex digits and "\n"
//	metadata/container.db        the block index, bbolt
//	chunks/<n>.data              block data, n = 0 … chunks-1, blocks back to back
//
// container.yaml has the fields layoutVersion (2), containerID, state
// (OPEN CLOSING CLOSED RECOVERING UNHEALTHY DELETED), reason (why
// UNHEALTHY), checksumType ("xxh64"), replicaIndex, replication
// ("replica:N" or "ec:rs-D-P-CELLk"), bytes (data in the chunks), blocks,
// chunks (number of chunk files), metadataBytes and metadataChecksum (size
// and xxh64 of container.db, checked before bbolt opens a file that came
// from elsewhere), maxSize, created, containerChecksum, and last
// descriptorChecksum: the xxh64 of the file's exact bytes with that line
// reading `descriptorChecksum: ""`. Checking raw bytes, not re-encoded
// YAML, means no byte can change unnoticed. While a container is OPEN its
// file on disk keeps bytes, blocks and the checksums at their initial
// values; CLOSING and later carry the final ones.
//
// The index has one bucket, "blocks": key = xxh64 (8 bytes big-endian)
// then size (8), value = chunk number (4), offset in the chunk file (8),
// length (8, equal to the size). The container checksum is the xxh64 of
// every key followed by its value, in key order. Chunk files hold exactly
// the indexed blocks: sorted by offset they cover each file from 0 to its
// end with no gap or overlap, which the scan checks along with each
// block's xxh64. A chunk file starts when the previous one reaches
// Options.ChunkSize; a block never spans two.
//
// An EC index replica i (1 … D+P) of container X has X's id, replicaIndex
// i, replication "ec:rs-D-P-CELLk" (ec.ParseScheme's; the descriptor
// check refuses i beyond D+P, more than one chunk, OPEN or CLOSING) and:
//
//	chunks/0.data                index i's cells back to back, bytes = Layout.IndexSize(i)
//	metadata/container.db        "blocks": the whole container's records, as above (chunk
//	                             and offset in its chunk files); "ec": "layout" → JSON
//	                             {"scheme":"ec:rs-6-3-1024k","size":<logical bytes>,
//	                             "chunks":[<size of chunk file 0>, …]}, "cells" → the
//	                             ec.Table (an xxh64 per cell of every index, 8 bytes
//	                             big-endian each, stripe by stripe, index by index)
//	metadata/container.checksum  the whole container's checksum
//
// blocks is the whole container's count, and containerChecksum (over
// "blocks" only) the whole container's, the same on every index and on
// the whole copy. Every index's container.db has the same bytes, so a
// node that reconstructs an index takes a source's as its own. The
// logical stream is the whole container's chunk files back to back: a
// block is at the sizes of the chunk files before its own plus its
// offset (ECInfo.Offset). The scan of an index replica checks what every
// container's does up to the index, then that the "ec" bucket parses and
// agrees with the descriptor (scheme, IndexSize(i) = bytes), that the
// blocks tile the chunk sizes it lists, that chunks/0.data is bytes long,
// and every cell's xxh64 against the table: CLOSED, or UNHEALTHY naming
// the first thing wrong (a cell by stripe and index).
package container
