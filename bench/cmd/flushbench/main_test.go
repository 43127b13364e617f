package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/journal"
)

func TestParseFlags(t *testing.T) {
	opts, err := parseFlags([]string{"-quick", "-threads", "1, 4"})
	if err != nil {
		t.Fatal(err)
	}
	if opts.duration != 200*time.Millisecond || opts.reps != 1 || opts.big != 256<<20 || !slices.Equal(opts.threads, []int{1, 4}) {
		t.Errorf("-quick: %+v", opts)
	}
	opts, err = parseFlags([]string{"-quick", "-duration", "2s"})
	if err != nil || opts.duration != 2*time.Second {
		t.Errorf("-quick -duration 2s: %v, %v; want the explicit duration kept", opts.duration, err)
	}
	for _, bad := range [][]string{{"-threads", "0"}, {"-reps", "0"}, {"extra"}} {
		if _, err := parseFlags(bad); err == nil {
			t.Errorf("parseFlags(%q): nil error", bad)
		}
	}
}

// TestCells runs every alternative briefly and checks that it did
// operations, grouped them where it groups, and left nothing behind.
func TestCells(t *testing.T) {
	root := t.TempDir()
	w, err := openWAL(filepath.Join(root, "wal"), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer w.f.Close()
	for _, a := range alternatives {
		if a.mode == uring {
			continue
		}
		t.Run(a.key, func(t *testing.T) {
			dir := filepath.Join(root, "cell-"+a.key)
			r, err := runCell(context.Background(), dir, w, a, 2, 20*time.Millisecond, 4<<20)
			if err != nil {
				t.Fatal(err)
			}
			if r.ops == 0 || r.lat.Count() != uint64(r.ops) || r.elapsed <= 0 {
				t.Errorf("%d ops, %d timed, elapsed %v", r.ops, r.lat.Count(), r.elapsed)
			}
			if grouped := a.mode != none; grouped != (r.groups > 0) || r.groups > uint64(r.ops) {
				t.Errorf("%d groups for %d ops", r.groups, r.ops)
			}
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("cell directory after the run: %v, want it removed", err)
			}
		})
	}
	// The WAL's first record is an event, framed and checksummed.
	b := make([]byte, 4096)
	if _, err := w.f.ReadAt(b, 0); err != nil {
		t.Fatal(err)
	}
	n := binary.LittleEndian.Uint32(b)
	if n == 0 || n > 4000 {
		t.Fatalf("first record: length %d", n)
	}
	body := b[8 : 8+n]
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(b[4:]) {
		t.Error("first record: checksum mismatch")
	}
	var e journal.Event
	if err := json.Unmarshal(body, &e); err != nil || e.Type != journal.Insert || len(e.Files) != 1 {
		t.Errorf("first record: %+v, %v", e, err)
	}
	if n < 200 || n > 400 {
		t.Errorf("event of %d bytes, want about 300", n)
	}
}
