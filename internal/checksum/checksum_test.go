package checksum

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
)

func TestFormat(t *testing.T) {
	for _, d := range []uint64{0, 1, 0xef46db3751d8e999, 1<<64 - 1} {
		if got, want := Format(d), fmt.Sprintf("%016x", d); got != want || !Valid(got) {
			t.Errorf("Format(%#x) = %q (valid %t), want %q", d, got, Valid(got), want)
		}
	}
	// xxhsum -H64 of no bytes and of "abc".
	if got := Bytes(nil); got != "ef46db3751d8e999" {
		t.Errorf("Bytes(nil) = %s, want ef46db3751d8e999", got)
	}
	if got := Bytes([]byte("abc")); got != "44bc2cf5ad770999" {
		t.Errorf(`Bytes("abc") = %s, want 44bc2cf5ad770999`, got)
	}
}

func TestValid(t *testing.T) {
	for _, tc := range []struct {
		s    string
		want bool
	}{
		{"ef46db3751d8e999", true},
		{"EF46DB3751D8E999", false},
		{"ef46db3751d8e99", false},
		{"ef46db3751d8e9990", false},
		{"ef46db3751d8e99g", false},
		{"", false},
	} {
		t.Run(tc.s, func(t *testing.T) {
			if got := Valid(tc.s); got != tc.want {
				t.Errorf("Valid(%q) = %t, want %t", tc.s, got, tc.want)
			}
		})
	}
}

func TestFile(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789"), 10000) // several buffers' worth
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, buf := range [][]byte{nil, make([]byte, 7)} {
		n, sum, err := File(p, buf)
		if err != nil || n != int64(len(data)) || sum != Bytes(data) {
			t.Errorf("File with a %d-byte buffer = %d, %s, %v; want %d, %s", len(buf), n, sum, err, len(data), Bytes(data))
		}
	}
	if _, _, err := File(filepath.Join(t.TempDir(), "missing"), nil); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("File of a missing file: %v, want ErrNotExist", err)
	}
}

// blockSums is the definition, spelled out: xxh64 of each block, then of
// their big-endian concatenation.
func blockSums(b []byte) uint64 {
	if len(b) <= BlockSize {
		return xxhash.Sum64(b)
	}
	var top []byte
	for len(b) > 0 {
		k := min(len(b), BlockSize)
		top = binary.BigEndian.AppendUint64(top, xxhash.Sum64(b[:k]))
		b = b[k:]
	}
	return xxhash.Sum64(top)
}

// sizes around every block boundary that changes how the sum is made.
var sizes = []int{0, 1, BlockSize - 1, BlockSize, BlockSize + 1, 2*BlockSize - 1, 2 * BlockSize, 2*BlockSize + 1, 5*BlockSize + 77}

func TestDigest(t *testing.T) {
	data := make([]byte, 6*BlockSize)
	rand.New(rand.NewSource(1)).Read(data)
	for _, n := range sizes {
		b := data[:n]
		want := blockSums(b)
		if got := Sum64(b); got != want {
			t.Errorf("Sum64 of %d bytes = %x, want %x", n, got, want)
		}
		// Written in pieces that straddle the boundaries every way.
		for _, step := range []int{1 << 20, BlockSize, 4096, 7777} {
			d := NewKeeping()
			for off := 0; off < n; off += step {
				d.Write(b[off:min(off+step, n)])
			}
			if got := d.Sum64(); got != want {
				t.Errorf("Digest of %d bytes in writes of %d = %x, want %x", n, step, got, want)
			}
			blocks := d.Blocks()
			if len(blocks) != BlockCount(int64(n)) || Combine(blocks) != want {
				t.Errorf("%d bytes in writes of %d: %d block sums combining to %x, want %d, %x", n, step, len(blocks), Combine(blocks), BlockCount(int64(n)), want)
			}
			d.Reset()
			if d.Write(b); d.Sum64() != want {
				t.Errorf("Digest of %d bytes after Reset = %x, want %x", n, d.Sum64(), want)
			}
		}
	}
}

// TestByHand checks the recipe the package documents against the real
// xxhsum, where it is installed.
func TestByHand(t *testing.T) {
	for _, tool := range []string{"xxhsum", "xxd", "split", "sh"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s not installed (CI=true makes this skip a failure)", tool)
			}
			t.Skipf("%s not installed", tool)
		}
	}
	data := make([]byte, 3*BlockSize+5)
	rand.New(rand.NewSource(3)).Read(data)
	dir := t.TempDir()
	for _, n := range []int{BlockSize, len(data)} {
		p := filepath.Join(dir, fmt.Sprint(n))
		if err := os.WriteFile(p, data[:n], 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := "xxhsum -H64 - < \"$1\""
		if n > BlockSize {
			cmd = "split -b 256K --filter='xxhsum -H64 - | cut -c1-16' \"$1\" | xxd -r -p | xxhsum -H64 -"
		}
		out, err := exec.Command("sh", "-c", cmd, "sh", p).Output()
		if err != nil {
			t.Fatalf("%s: %v", cmd, err)
		}
		got, _, _ := strings.Cut(string(out), " ")
		if _, want, _ := File(p, nil); got != want {
			t.Errorf("%d bytes: by hand %q, File %s", n, got, want)
		}
	}
}

// BenchmarkDigest: the block checksum of 64 MiB against the library's
// plain xxh64 of the same bytes (the baseline: the block sums' second
// hash is all it adds).
func BenchmarkDigest(b *testing.B) {
	data := make([]byte, 64<<20)
	rand.New(rand.NewSource(1)).Read(data)
	b.Run("xxhash", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			xxhash.Sum64(data)
		}
	})
	b.Run("checksum", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			Sum64(data)
		}
	})
}
