package checksum

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
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
