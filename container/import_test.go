package container

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/cmfs-project/cmfs/internal/wait"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

func TestExportImportRoundTrip(t *testing.T) {
	src := newTestStore(t, Options{ChunkSize: 1 << 20})
	blocks := [][]byte{randBytes(1, 1500<<10), textBytes(2, 700<<10), {}, randBytes(3, 10)}
	d, ids := closedContainer(t, src, blocks...)
	for _, c := range Compressions {
		t.Run(string(c), func(t *testing.T) {
			tarball := export(t, src, d.ID, c)
			if again := export(t, src, d.ID, c); !bytes.Equal(again, tarball) {
				t.Errorf("two exports differ: a retried transfer would not be identical")
			}
			dst := newTestStore(t, Options{})
			got, err := dst.Import(context.Background(), d.ID, d.Bytes, c, bytes.NewReader(tarball))
			if err != nil {
				t.Fatal(err)
			}
			if got.State != Recovering {
				t.Fatalf("Import returned %s, want RECOVERING", got.State)
			}
			got, err = dst.WaitScan(context.Background(), d.ID)
			if err != nil || got.State != Closed {
				t.Fatalf("after scan %s %q, %v; want CLOSED", got.State, got.Reason, err)
			}
			want := d
			want.DescriptorChecksum = got.DescriptorChecksum
			if got != want {
				t.Fatalf("imported %+v\nwant %+v", got, want)
			}
			for i, b := range ids {
				if data, err := readBlock(t, dst, b); err != nil || !bytes.Equal(data, blocks[i]) {
					t.Fatalf("block %s: %v", b, err)
				}
			}
			v := dst.Volumes()[0]
			if v.Containers != 1 || v.Used < d.Bytes {
				t.Fatalf("volume accounts %d containers, %d bytes", v.Containers, v.Used)
			}
			if _, err := dst.Import(context.Background(), d.ID, d.Bytes, c, bytes.NewReader(tarball)); !errors.Is(err, ErrExists) {
				t.Fatalf("second import: %v, want ErrExists", err)
			}
			// The imported copy exports the same bytes but for its descriptor.
			if c == None {
				again := export(t, dst, d.ID, c)
				if len(again) != len(tarball) {
					t.Fatalf("re-export %d bytes, first %d", len(again), len(tarball))
				}
			}
		})
	}
}

func TestExportRefusesOpen(t *testing.T) {
	s := newTestStore(t, Options{})
	id, _ := mustPut(t, s, []byte("open"))
	if err := s.Export(context.Background(), id, None, io.Discard); !errors.Is(err, ErrNotClosed) {
		t.Fatalf("Export of OPEN: %v, want ErrNotClosed", err)
	}
	if err := s.Export(context.Background(), 7, None, io.Discard); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Export of nothing: %v, want ErrNotFound", err)
	}
	if err := s.Export(context.Background(), id, "rar", io.Discard); !errors.Is(err, ErrBadCompression) {
		t.Fatalf("Export rar: %v, want ErrBadCompression", err)
	}
}

// TestImportFlippedByte flips one byte of the tarball: in chunk data the
// import succeeds and the scan finds it; in the descriptor the import is
// refused; and for every compression, anywhere, the container never
// becomes CLOSED.
func TestImportFlippedByte(t *testing.T) {
	src := newTestStore(t, Options{})
	marker := []byte("MARKER-in-the-middle-of-a-block")
	data := append(append(randBytes(1, 300<<10), marker...), randBytes(2, 300<<10)...)
	d, _ := closedContainer(t, src, textBytes(3, 100<<10), data)

	t.Run("chunk data", func(t *testing.T) {
		tarball := export(t, src, d.ID, None)
		i := bytes.Index(tarball, marker)
		if i < 0 {
			t.Fatal("marker not in the tarball")
		}
		tarball[i] ^= 1
		dst := newTestStore(t, Options{})
		if _, err := dst.Import(context.Background(), d.ID, d.Bytes, None, bytes.NewReader(tarball)); err != nil {
			t.Fatal(err)
		}
		got, err := dst.WaitScan(context.Background(), d.ID)
		if err != nil || got.State != Unhealthy {
			t.Fatalf("after scan %s, %v; want UNHEALTHY", got.State, err)
		}
		t.Logf("reason: %s", got.Reason)
	})
	t.Run("descriptor", func(t *testing.T) {
		tarball := export(t, src, d.ID, None)
		tarball[512+20] ^= 1 // inside container.yaml, after its 512-byte header
		dst := newTestStore(t, Options{})
		_, err := dst.Import(context.Background(), d.ID, d.Bytes, None, bytes.NewReader(tarball))
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Import = %v, want ErrCorrupt", err)
		}
		assertEmptyVolume(t, dst)
	})
	for _, c := range Compressions {
		t.Run("anywhere/"+string(c), func(t *testing.T) {
			tarball := export(t, src, d.ID, c)
			dst := newTestStore(t, Options{})
			for k, off := range []int{len(tarball) / 3, len(tarball) / 2, len(tarball) - 40} {
				flipped := bytes.Clone(tarball)
				flipped[off] ^= 0x10
				_, err := dst.Import(context.Background(), d.ID, d.Bytes, c, bytes.NewReader(flipped))
				if err != nil {
					t.Logf("flip %d at %d: refused: %v", k, off, err)
					continue
				}
				got, err := dst.WaitScan(context.Background(), d.ID)
				if err != nil || got.State == Closed {
					t.Fatalf("flip %d at %d: %s, %v; never CLOSED", k, off, got.State, err)
				}
				t.Logf("flip %d at %d: %s: %s", k, off, got.State, got.Reason)
				if err := dst.Delete(d.ID); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

func assertEmptyVolume(t *testing.T, s *Store) {
	t.Helper()
	for _, v := range s.Volumes() {
		if got := tree(t, v.Path); !sameStrings(got, emptyVolumeTree) {
			t.Fatalf("volume %s holds %v", v.Path, got)
		}
		if v.Reserved != 0 {
			t.Fatalf("volume %s: %d bytes reserved", v.Path, v.Reserved)
		}
	}
}

// entry is one tar entry of a hand-made tarball.
type entry struct {
	hdr  tar.Header
	body []byte
}

func reg(name string, body []byte) entry {
	return entry{tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body))}, body}
}

func dir(name string) entry {
	return entry{tar.Header{Name: name, Typeflag: tar.TypeDir, Mode: 0o755}, nil}
}

func makeTar(t *testing.T, es ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range es {
		if err := tw.WriteHeader(&e.hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(e.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// goodDescriptor is a CLOSED container.yaml for id with one chunk of size
// bytes.
func goodDescriptor(t *testing.T, id uint64, size int64, mutate ...func(*Descriptor)) []byte {
	t.Helper()
	d := Descriptor{LayoutVersion: layoutVersion, ID: id, State: Closed, ChecksumType: ChecksumType, Replication: DefaultReplication,
		Bytes: size, Blocks: 1, Chunks: 1, MetadataBytes: 32 << 10, MetadataChecksum: "0000000000000000", MaxSize: 1 << 30,
		ContainerChecksum: "0000000000000000"}
	for _, m := range mutate {
		m(&d)
	}
	b, err := d.marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestImportHostile(t *testing.T) {
	const id = 77
	_, err := os.Lstat("/etc/x")
	etcXBefore := err == nil
	outside := t.TempDir() // a place a hostile tarball would like to write to
	abs := filepath.Join(outside, "abs")
	desc := goodDescriptor(t, id, 1000)
	yaml := reg(descriptorName, desc)
	link := func(typ byte, name, target string) entry {
		return entry{tar.Header{Name: name, Typeflag: typ, Linkname: target, Mode: 0o777}, nil}
	}
	for _, tc := range []struct {
		name    string
		entries []entry
		want    error
	}{
		{"dotdot", []entry{yaml, reg("../x", []byte("evil"))}, ErrHostile},
		{"dotdot in chunks", []entry{yaml, dir("chunks/"), reg("chunks/../../x", []byte("evil"))}, ErrHostile},
		{"absolute", []entry{yaml, reg("/etc/x", []byte("evil"))}, ErrHostile},
		{"absolute outside", []entry{yaml, reg(abs, []byte("evil"))}, ErrHostile},
		{"symlink dir then write through it", []entry{yaml, link(tar.TypeSymlink, "chunks", outside), reg("chunks/0.data", []byte("evil"))}, ErrHostile},
		{"symlink file", []entry{yaml, dir("chunks/"), link(tar.TypeSymlink, "chunks/0.data", abs)}, ErrHostile},
		{"hardlink", []entry{yaml, dir("chunks/"), link(tar.TypeLink, "chunks/0.data", "/etc/passwd")}, ErrHostile},
		{"char device", []entry{yaml, dir("chunks/"), {tar.Header{Name: "chunks/0.data", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3, Mode: 0o666}, nil}}, ErrHostile},
		{"block device", []entry{yaml, {tar.Header{Name: "metadata/container.db", Typeflag: tar.TypeBlock, Devmajor: 8, Mode: 0o666}, nil}}, ErrHostile},
		{"fifo", []entry{yaml, {tar.Header{Name: "metadata/container.db", Typeflag: tar.TypeFifo, Mode: 0o666}, nil}}, ErrHostile},
		{"unknown name", []entry{yaml, reg("metadata/evil.sh", []byte("#!/bin/sh"))}, ErrHostile},
		{"unknown dir", []entry{yaml, dir("etc/")}, ErrHostile},
		{"non-canonical chunk", []entry{yaml, reg("chunks/00.data", []byte("x"))}, ErrHostile},
		{"dot slash", []entry{yaml, reg("./chunks/0.data", []byte("x"))}, ErrHostile},
		{"chunk beyond descriptor", []entry{yaml, reg("chunks/1.data", []byte("x"))}, ErrHostile},
		{"duplicate", []entry{yaml, reg(checksumName, []byte("0000000000000000\n")), reg(checksumName, []byte("1111111111111111\n"))}, ErrHostile},
		{"duplicate descriptor", []entry{yaml, yaml}, ErrHostile},
		{"duplicate dir", []entry{yaml, dir("chunks/"), dir("chunks")}, ErrHostile},
		{"chunk larger than descriptor says", []entry{yaml, reg("chunks/0.data", make([]byte, 1001))}, ErrHostile},
		{"checksum file too large", []entry{yaml, reg(checksumName, make([]byte, 65))}, ErrHostile},
		{"descriptor not first", []entry{dir("chunks/"), yaml}, ErrHostile},
		{"descriptor for another id", []entry{reg(descriptorName, goodDescriptor(t, id+1, 1000))}, ErrHostile},
		{"descriptor OPEN", []entry{reg(descriptorName, goodDescriptor(t, id, 1000, func(d *Descriptor) { d.State = Open }))}, ErrHostile},
		{"descriptor larger than the reservation", []entry{reg(descriptorName, goodDescriptor(t, id, 1<<40))}, ErrHostile},
		{"descriptor checksum", []entry{reg(descriptorName, bytes.Replace(desc, []byte("bytes: 1000"), []byte("bytes: 1001"), 1))}, ErrCorrupt},
		{"missing files", []entry{yaml, reg("chunks/0.data", make([]byte, 1000))}, ErrCorrupt},
		{"empty", nil, ErrCorrupt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestStore(t, Options{})
			tarball := makeTar(t, tc.entries...)
			_, err := s.Import(context.Background(), id, 1000, None, bytes.NewReader(tarball))
			if !errors.Is(err, tc.want) {
				t.Fatalf("Import = %v, want %v", err, tc.want)
			}
			t.Logf("%v", err)
			assertEmptyVolume(t, s)
			if got := tree(t, outside); len(got) != 0 {
				t.Fatalf("written outside the volume: %v", got)
			}
			if _, err := os.Lstat(filepath.Join(filepath.Dir(s.Volumes()[0].Path), "x")); err == nil {
				t.Fatal("../x written")
			}
			if len(s.List()) != 0 {
				t.Fatalf("List = %v", s.List())
			}
		})
	}
	if _, err := os.Lstat("/etc/x"); err == nil && !etcXBefore {
		t.Fatal("/etc/x written")
	}
}

// TestImportSparse refuses a PAX (GNU 1.0) sparse file, which
// archive/tar presents as a regular file whose data is not its content.
// archive/tar cannot write one, so its headers are made by hand.
func TestImportSparse(t *testing.T) {
	const id = 78
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	desc := goodDescriptor(t, id, 1000)
	tw.WriteHeader(&tar.Header{Name: descriptorName, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(desc))})
	tw.Write(desc)
	tw.Flush()
	var recs string
	for _, kv := range [][2]string{{"GNU.sparse.major", "1"}, {"GNU.sparse.minor", "0"}, {"GNU.sparse.name", "chunks/0.data"}, {"GNU.sparse.realsize", "1000"}} {
		rec := " " + kv[0] + "=" + kv[1] + "\n"
		n := len(rec) + 2
		if len(strconv.Itoa(n)) == 1 {
			n--
		}
		recs += strconv.Itoa(n) + rec
	}
	buf.Write(rawHeader("PaxHeaders/0.data", tar.TypeXHeader, len(recs)))
	buf.WriteString(recs)
	buf.Write(make([]byte, (512-len(recs)%512)%512))
	data := append([]byte("1\n0\n1000\n"), make([]byte, 512)...) // a sparse map, then data
	data = data[:512]
	buf.Write(rawHeader("GNUSparseFile.0/0.data", tar.TypeReg, len(data)))
	buf.Write(data)
	buf.Write(make([]byte, 1024))

	s := newTestStore(t, Options{})
	_, err := s.Import(context.Background(), id, 1000, None, &buf)
	if !errors.Is(err, ErrHostile) || !strings.Contains(err.Error(), "sparse") {
		t.Fatalf("Import = %v, want ErrHostile for a sparse file", err)
	}
	assertEmptyVolume(t, s)
}

// rawHeader is a USTAR header block.
func rawHeader(name string, typ byte, size int) []byte {
	h := make([]byte, 512)
	copy(h[0:100], name)
	copy(h[100:108], "0000644\x00")
	copy(h[108:116], "0000000\x00")
	copy(h[116:124], "0000000\x00")
	copy(h[124:136], fmt.Sprintf("%011o\x00", size))
	copy(h[136:148], "00000000000\x00")
	h[156] = typ
	copy(h[257:265], "ustar\x0000")
	copy(h[148:156], "        ")
	sum := 0
	for _, c := range h {
		sum += int(c)
	}
	copy(h[148:156], fmt.Sprintf("%06o\x00 ", sum))
	return h
}

// TestImportTooLong refuses a stream longer than the reservation without
// keeping any of it.
func TestImportTooLong(t *testing.T) {
	s := newTestStore(t, Options{})
	_, err := s.Import(context.Background(), 5, 0, None, io.LimitReader(zeros{}, 10<<20))
	if !errors.Is(err, ErrHostile) {
		t.Fatalf("Import = %v, want ErrHostile", err)
	}
	assertEmptyVolume(t, s)
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

func TestImportNoSpace(t *testing.T) {
	root := t.TempDir()
	a, b := filepath.Join(root, "a"), filepath.Join(root, "b")
	var mu sync.Mutex
	free := map[string]int64{a: 50 << 20, b: 30 << 20}
	statfs := func(dir string) (int64, int64, error) {
		mu.Lock()
		defer mu.Unlock()
		return 1 << 30, free[dir], nil
	}
	src := newTestStore(t, Options{})
	d, _ := closedContainer(t, src, randBytes(1, 10<<20))
	tarball := export(t, src, d.ID, None)

	s := newTestStore(t, Options{Statfs: statfs}, a, b)
	// 2 × (10 MiB + slack) fits a only.
	if _, err := s.Import(context.Background(), d.ID, d.Bytes, None, bytes.NewReader(tarball)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(a, strconv.FormatUint(d.ID, 10))); err != nil {
		t.Fatalf("not on the volume with room: %v", err)
	}
	if _, err := s.WaitScan(context.Background(), d.ID); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	free[a], free[b] = 15<<20, 20<<20
	mu.Unlock()
	if err := s.Delete(d.ID); err != nil {
		t.Fatal(err)
	}
	// Neither volume can hold 2× now: refused before reading anything.
	r := &countingReader{r: bytes.NewReader(tarball)}
	_, err := s.Import(context.Background(), d.ID, d.Bytes, None, r)
	if !errors.Is(err, ErrNoSpace) {
		t.Fatalf("Import = %v, want ErrNoSpace", err)
	}
	if r.n != 0 {
		t.Fatalf("read %d bytes before refusing", r.n)
	}
	assertEmptyVolume(t, s)
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// TestImportReservation checks an import in flight holds its reservation,
// which steers the next import to another volume, and releases it when it
// fails.
func TestImportReservation(t *testing.T) {
	root := t.TempDir()
	a, b := filepath.Join(root, "a"), filepath.Join(root, "b")
	free := map[string]int64{a: 100 << 20, b: 80 << 20}
	s := newTestStore(t, Options{Statfs: func(dir string) (int64, int64, error) { return 1 << 30, free[dir], nil }}, a, b)
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := s.Import(context.Background(), 1, 30<<20, None, pr)
		done <- err
	}()
	wait.For(t, 10*time.Second, "the reservation", func() bool { return s.Volumes()[0].Reserved > 0 })
	if got := s.Volumes()[0].Reserved; got < 60<<20 {
		t.Fatalf("reserved %d, want 2× the size", got)
	}
	// a has 100 - ~62 MiB left now, so b takes the next one.
	pr2, pw2 := io.Pipe()
	done2 := make(chan error, 1)
	go func() {
		_, err := s.Import(context.Background(), 2, 30<<20, None, pr2)
		done2 <- err
	}()
	wait.For(t, 10*time.Second, "the second reservation", func() bool { return s.Volumes()[1].Reserved > 0 })
	boom := errors.New("peer went away")
	pw.CloseWithError(boom)
	pw2.CloseWithError(boom)
	for _, ch := range []chan error{done, done2} {
		if err := <-ch; !errors.Is(err, boom) {
			t.Fatalf("Import = %v, want the stream's error", err)
		}
	}
	assertEmptyVolume(t, s)
}

func TestConcurrentImportsOneWins(t *testing.T) {
	src := newTestStore(t, Options{})
	d, _ := closedContainer(t, src, randBytes(1, 2<<20))
	tarball := export(t, src, d.ID, None)

	t.Run("second while the first streams", func(t *testing.T) {
		s := newTestStore(t, Options{})
		pr, pw := io.Pipe()
		done := make(chan error, 1)
		go func() {
			_, err := s.Import(context.Background(), d.ID, d.Bytes, None, pr)
			done <- err
		}()
		if _, err := pw.Write(tarball[:1000]); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Import(context.Background(), d.ID, d.Bytes, None, bytes.NewReader(tarball)); !errors.Is(err, ErrImporting) {
			t.Fatalf("second import: %v, want ErrImporting", err)
		}
		if err := s.Delete(d.ID); !errors.Is(err, ErrImporting) {
			t.Fatalf("Delete while importing: %v, want ErrImporting", err)
		}
		pw.Write(tarball[1000:])
		pw.Close()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if _, err := s.Import(context.Background(), d.ID, d.Bytes, None, bytes.NewReader(tarball)); !errors.Is(err, ErrExists) {
			t.Fatalf("third import: %v, want ErrExists", err)
		}
	})
	t.Run("racing", func(t *testing.T) {
		s := newTestStore(t, Options{})
		const n = 6
		errs := make([]error, n)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				<-start
				_, errs[i] = s.Import(context.Background(), d.ID, d.Bytes, None, bytes.NewReader(tarball))
			})
		}
		close(start)
		wg.Wait()
		wins := 0
		for _, err := range errs {
			switch {
			case err == nil:
				wins++
			case errors.Is(err, ErrImporting), errors.Is(err, ErrExists):
			default:
				t.Fatalf("import: %v", err)
			}
		}
		if wins != 1 {
			t.Fatalf("%d imports won: %v", wins, errs)
		}
		if got, err := s.WaitScan(context.Background(), d.ID); err != nil || got.State != Closed {
			t.Fatalf("winner %s, %v", got.State, err)
		}
	})
}

// TestImportKilledMidway leaves what a kill -9 in the middle of an import
// leaves, then checks a reopened store has nothing of it and a retry works.
func TestImportKilledMidway(t *testing.T) {
	src := newTestStore(t, Options{})
	d, ids := closedContainer(t, src, randBytes(1, 3<<20))
	tarball := export(t, src, d.ID, Zstd)

	vol := filepath.Join(t.TempDir(), "vol")
	s := newTestStore(t, Options{}, vol)
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := s.Import(context.Background(), d.ID, d.Bytes, Zstd, pr)
		done <- err
	}()
	pw.Write(tarball[:len(tarball)/2])
	wait.For(t, 10*time.Second, "the tarball in tmp", func() bool {
		return len(dirNames(t, filepath.Join(vol, copyDir))) == 1
	})
	// Kill: nothing of the import is cleaned by the process.
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	partial, _ := os.ReadDir(filepath.Join(vol, copyDir))
	keep := filepath.Join(t.TempDir(), "partial")
	os.Rename(filepath.Join(vol, copyDir, partial[0].Name()), keep)
	pw.CloseWithError(errors.New("killed"))
	<-done
	s.crash()
	os.Rename(keep, filepath.Join(vol, copyDir, partial[0].Name()))
	os.MkdirAll(filepath.Join(vol, extractDir, fmt.Sprintf("%d-5", d.ID), "chunks"), 0o755)

	s2 := newTestStore(t, Options{}, vol)
	assertEmptyVolume(t, s2)
	if _, err := s2.Import(context.Background(), d.ID, d.Bytes, Zstd, bytes.NewReader(tarball)); err != nil {
		t.Fatal(err)
	}
	if got, err := s2.WaitScan(context.Background(), d.ID); err != nil || got.State != Closed {
		t.Fatalf("retry: %s, %v", got.State, err)
	}
	if _, err := readBlock(t, s2, ids[0]); err != nil {
		t.Fatal(err)
	}
}

// TestRecoveringRescanned: an import renamed into place whose scan never
// ran (killed) is scanned by the next OpenStore.
func TestRecoveringRescanned(t *testing.T) {
	src := newTestStore(t, Options{})
	d, ids := closedContainer(t, src, randBytes(1, 1<<20))
	tarball := export(t, src, d.ID, None)
	vol := filepath.Join(t.TempDir(), "vol")
	s := newTestStore(t, Options{Scanners: 1}, vol)
	// Hold the only scanner slot so the import's scan cannot run.
	s.scanSem <- struct{}{}
	if _, err := s.Import(context.Background(), d.ID, d.Bytes, None, bytes.NewReader(tarball)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.OpenBlock(ids[0]); !errors.Is(err, ErrBlockNotFound) {
		t.Fatalf("RECOVERING container serves blocks: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := s.WaitScan(ctx, d.ID); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitScan = %v, want a timeout", err)
	}
	s.crash()
	<-s.scanSem

	s2 := newTestStore(t, Options{}, vol)
	got, err := s2.WaitScan(context.Background(), d.ID)
	if err != nil || got.State != Closed {
		t.Fatalf("%s, %v; want CLOSED", got.State, err)
	}
	if _, err := readBlock(t, s2, ids[0]); err != nil {
		t.Fatal(err)
	}
}

// TestImportTinyBlocks imports a container whose index outweighs its data
// (thousands of 8-byte blocks), with Bytes as the size: the tarball and the
// extraction outgrow the first reservation, which grows.
func TestImportTinyBlocks(t *testing.T) {
	src := newTestStore(t, Options{})
	id := putTiny(t, src, 25000)
	d, err := src.CloseContainer(id)
	if err != nil {
		t.Fatal(err)
	}
	tarball := export(t, src, d.ID, None)
	if first := 2 * (d.Bytes + importSlack(d.Bytes)); int64(len(tarball)) <= first {
		t.Fatalf("tarball %d bytes, index %d: fits the first reservation of %d, test shows nothing", len(tarball), d.MetadataBytes, first)
	}
	t.Logf("tarball %d bytes, index %d, data %d", len(tarball), d.MetadataBytes, d.Bytes)
	dst := newTestStore(t, Options{})
	if _, err := dst.Import(context.Background(), d.ID, d.Bytes, None, bytes.NewReader(tarball)); err != nil {
		t.Fatal(err)
	}
	if got, err := dst.WaitScan(context.Background(), d.ID); err != nil || got.State != Closed {
		t.Fatalf("%s %s, %v", got.State, got.Reason, err)
	}
}

// putTiny adds n distinct 8-byte blocks to a new open container the way
// Put does, but in one index transaction: 40000 Puts would each commit.
func putTiny(t *testing.T, s *Store, n int) uint64 {
	t.Helper()
	id, _ := mustPut(t, s, []byte("first"))
	s.putMu.Lock()
	defer s.putMu.Unlock()
	c := s.open[DefaultReplication]
	var data []byte
	var recs []record
	for i := range n {
		p := []byte(fmt.Sprintf("%08d", i))
		recs = append(recs, record{id: BlockIDOf(p), chunk: c.chunkN, off: c.chunkOff + int64(len(data))})
		data = append(data, p...)
	}
	// In key order: bbolt inserts those by appending.
	slices.SortFunc(recs, func(a, b record) int { return bytes.Compare(a.key(), b.key()) })
	err := c.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(blocksBucket)
		for _, r := range recs {
			if err := b.Put(r.key(), r.value()); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.chunk.WriteAt(data, c.chunkOff); err != nil {
		t.Fatal(err)
	}
	c.chunkOff += int64(len(data))
	d := *c.desc.Load()
	d.Bytes += int64(len(data))
	d.Blocks += int64(n)
	c.setDesc(d)
	return id
}
