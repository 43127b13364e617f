package ec

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
)

// TestMain shrinks batches to 16 KiB per index, so that small
// containers span many (TestFullBatches keeps the real size).
func TestMain(m *testing.M) {
	batchBytes = 16 << 10
	os.Exit(m.Run())
}

// withBatch sets the batch size for one test.
func withBatch(t *testing.T, n int64) {
	t.Helper()
	was := batchBytes
	batchBytes = n
	t.Cleanup(func() { batchBytes = was })
}

// memSource serves index files held in memory; a test can make an
// index's reads fail, flip a byte of its cells, and count its reads.
type memSource struct {
	cell int64

	mu    sync.Mutex
	files map[int][]byte
	fail  map[int]error
	calls map[int]int
	own   map[int]bool // files[i] is this source's copy
}

func newMemSource(l Layout, files [][]byte) *memSource {
	m := &memSource{cell: int64(l.Cell), files: map[int][]byte{}, fail: map[int]error{}, calls: map[int]int{}, own: map[int]bool{}}
	for i, f := range files {
		m.files[i+1] = f // shared until flip copies it
	}
	return m
}

// ReadCells returns a slice of the file itself (not a copy), capped,
// so that a caller writing into it would spoil later checks.
func (m *memSource) ReadCells(ctx context.Context, index int, first, n int64) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls[index]++
	if err := m.fail[index]; err != nil {
		return nil, err
	}
	f, ok := m.files[index]
	if !ok {
		return nil, fmt.Errorf("index %d: no such replica", index)
	}
	off, end := first*m.cell, min(int64(len(f)), (first+n)*m.cell)
	if off > end {
		return nil, fmt.Errorf("index %d: stripe %d past the end", index, first)
	}
	return f[off:end:end], nil
}

// lose makes index unreadable.
func (m *memSource) lose(index int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.fail[index] = errors.New("node down")
}

// flip inverts one byte of index's file, in stripe's cell.
func (m *memSource) flip(index int, stripe int64, at int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.own[index] {
		m.files[index] = bytes.Clone(m.files[index])
		m.own[index] = true
	}
	m.files[index][stripe*m.cell+int64(at)] ^= 0xff
}

func (m *memSource) reads(index int) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.calls[index]
}

func randomBytes(seed uint64, n int64) []byte {
	b := make([]byte, n)
	r := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), byte(seed >> 16)})
	_, _ = r.Read(b)
	return b
}

// encodeAll encodes data and returns the index files and the table.
func encodeAll(t *testing.T, l Layout, data []byte) ([][]byte, Table) {
	t.Helper()
	bufs := make([]bytes.Buffer, l.Total())
	w := make([]io.Writer, l.Total())
	for i := range w {
		w[i] = &bufs[i]
	}
	tab, err := Encode(l, bytes.NewReader(data), w)
	if err != nil {
		t.Fatalf("encode %v of %d bytes: %v", l.Scheme, l.Size, err)
	}
	files := make([][]byte, l.Total())
	for i := range files {
		files[i] = bufs[i].Bytes()
	}
	return files, tab
}
