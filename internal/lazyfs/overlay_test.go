package lazyfs

import (
	"bytes"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// TestOverlay runs random writes, truncates, syncs and crashes against an
// overlay and a model: what the file holds now (live) and what survives a
// crash (durable).
func TestOverlay(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 1))
		path := filepath.Join(t.TempDir(), "f")
		durable := bytes.Repeat([]byte("u"), rng.IntN(3*pageSize))
		if err := os.WriteFile(path, durable, 0o644); err != nil {
			t.Fatal(err)
		}
		live := bytes.Clone(durable)
		o := open(t, path)
		for step := range 200 {
			switch op := rng.IntN(10); {
			case op < 5:
				off := rng.Int64N(int64(len(live)) + pageSize)
				p := bytes.Repeat([]byte{byte('a' + step%26)}, 1+rng.IntN(2*pageSize))
				if _, err := o.WriteAt(p, off); err != nil {
					t.Fatal(err)
				}
				if end := off + int64(len(p)); end > int64(len(live)) {
					live = append(live, make([]byte, end-int64(len(live)))...)
				}
				copy(live[off:], p)
			case op < 8:
				size := rng.IntN(len(live) + 2*pageSize)
				o.Truncate(int64(size))
				if size < len(live) {
					live = live[:size]
				} else {
					live = append(live, make([]byte, size-len(live))...)
				}
			case op < 9:
				if err := o.Sync(); err != nil {
					t.Fatal(err)
				}
				durable = bytes.Clone(live)
			default:
				o.Close()
				o = open(t, path)
				live = bytes.Clone(durable)
			}
			got := make([]byte, o.size+7)
			n, err := o.ReadAt(got, 0)
			if err != nil && err != io.EOF {
				t.Fatal(err)
			}
			if o.size != int64(len(live)) || !bytes.Equal(got[:n], live) {
				t.Fatalf("seed %d step %d: size %d, read %d bytes %q..., want %d bytes %q...",
					seed, step, o.size, n, head(got[:n]), len(live), head(live))
			}
		}
		o.Close()
		if got, _ := os.ReadFile(path); !bytes.Equal(got, durable) {
			t.Fatalf("seed %d: the underlying file holds %d bytes, want the %d synced", seed, len(got), len(durable))
		}
	}
}

func open(t *testing.T, path string) *overlay {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	o, err := newOverlay(f)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func head(b []byte) []byte { return b[:min(len(b), 40)] }
