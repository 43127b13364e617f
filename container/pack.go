package container

import (
	"archive/tar"
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// Export writes container id as a tarball to w, compressed with c:
// container.yaml first (Import checks it before it unpacks anything), then
// metadata/, metadata/container.checksum, metadata/container.db, chunks/
// and the chunk files in order, streamed from the files themselves. Only
// a CLOSED or UNHEALTHY container is exported (ErrNotClosed otherwise):
// those files no longer change. The same container exported twice with
// the same compression gives the same bytes (fixed times and owners), so
// a retried transfer is identical. Errors: ErrNotFound, ErrNotClosed,
// ErrBadCompression, ErrClosed, ctx's, w's.
func (s *Store) Export(ctx context.Context, id uint64, c Compression, w io.Writer) error {
	if err := s.export(ctx, id, c, w); err != nil {
		return fmt.Errorf("export container %d: %w", id, err)
	}
	return nil
}

func (s *Store) export(ctx context.Context, id uint64, comp Compression, w io.Writer) error {
	comp, err := comp.norm()
	if err != nil {
		return err
	}
	c, err := s.get(id)
	if err != nil {
		return err
	}
	c.rw.RLock()
	defer c.rw.RUnlock()
	if _, err := s.get(id); err != nil {
		return err // deleted while we waited
	}
	d := *c.desc.Load()
	if d.State != Closed && d.State != Unhealthy {
		return fmt.Errorf("state %s: %w", d.State, ErrNotClosed)
	}
	return pack(ctx, c.dir, d, comp, w)
}

// pack writes the container directory dir, whose descriptor is d, as a
// tarball (see Export); its files must not change meanwhile.
func pack(ctx context.Context, dir string, d Descriptor, comp Compression, w io.Writer) error {
	comp, err := comp.norm()
	if err != nil {
		return err
	}
	// The descriptor's bytes as they are on disk, so its checksum travels
	// unchanged.
	raw, err := os.ReadFile(filepath.Join(dir, descriptorName))
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(w, copyBufSize)
	zw, err := comp.newWriter(bw)
	if err != nil {
		return err
	}
	defer zw.Close() // frees encoder goroutines on the error paths
	p := packer{tw: tar.NewWriter(zw), mtime: d.Created.Truncate(time.Second), buf: make([]byte, copyBufSize)}
	if err := p.header(descriptorName, tar.TypeReg, int64(len(raw))); err != nil {
		return err
	}
	if _, err := p.tw.Write(raw); err != nil {
		return err
	}
	if err := p.header(metadataDir+"/", tar.TypeDir, 0); err != nil {
		return err
	}
	for _, name := range []string{checksumName, dbName} {
		if err := p.file(ctx, dir, name); err != nil {
			return err
		}
	}
	if err := p.header(chunksDir+"/", tar.TypeDir, 0); err != nil {
		return err
	}
	for n := 0; n < d.Chunks; n++ {
		if err := p.file(ctx, dir, chunkName(n)); err != nil {
			return err
		}
	}
	if err := p.tw.Close(); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return bw.Flush()
}

// packer writes a container's tar entries.
type packer struct {
	tw    *tar.Writer
	mtime time.Time
	buf   []byte
}

func (p *packer) header(name string, typ byte, size int64) error {
	mode := int64(0o644)
	if typ == tar.TypeDir {
		mode = 0o755
	}
	return p.tw.WriteHeader(&tar.Header{Name: name, Typeflag: typ, Size: size, Mode: mode, ModTime: p.mtime})
}

// file writes dir/name as an entry, copying exactly the size it had when
// opened.
func (p *packer) file(ctx context.Context, dir, name string) error {
	f, err := os.Open(filepath.Join(dir, name))
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if err := p.header(name, tar.TypeReg, fi.Size()); err != nil {
		return err
	}
	for left := fi.Size(); left > 0; {
		if err := ctx.Err(); err != nil {
			return err
		}
		n, err := f.Read(p.buf[:min(int64(len(p.buf)), left)])
		if n > 0 {
			if _, werr := p.tw.Write(p.buf[:n]); werr != nil {
				return werr
			}
			left -= int64(n)
		}
		if err == io.EOF && left > 0 {
			return fmt.Errorf("%s: shrank while exported: %w", name, io.ErrUnexpectedEOF)
		}
		if err != nil && err != io.EOF {
			return err
		}
	}
	return nil
}
