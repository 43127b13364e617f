package container

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"syscall"
	"testing"
)

// fullVolume is an Options.writeFault that fails every metadata write with
// ENOSPC once its first skip writes have gone through, until freed.
type fullVolume struct {
	mu     sync.Mutex
	skip   int
	full   bool
	failed int
}

func (f *fullVolume) fault(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.full {
		return nil
	}
	if f.skip > 0 {
		f.skip--
		return nil
	}
	f.failed++
	return syscall.ENOSPC
}

func (f *fullVolume) fill(skip int) {
	f.mu.Lock()
	f.full, f.skip, f.failed = true, skip, 0
	f.mu.Unlock()
}

func (f *fullVolume) free() {
	f.mu.Lock()
	f.full = false
	f.mu.Unlock()
}

// TestCloseRetriedAfterENOSPC fills the volume at each metadata write of a
// close (the CLOSING descriptor, the checksum file, the CLOSED descriptor):
// the close fails, a Verify while the volume is still full fails without
// condemning the container, its blocks stay readable, and once space is
// back a second CloseContainer (or a Verify) makes it CLOSED.
func TestCloseRetriedAfterENOSPC(t *testing.T) {
	for _, tt := range []struct {
		name  string
		skip  int // metadata writes of the close that succeed
		retry string
	}{
		{"closing descriptor", 0, "close"},
		{"checksum file", 1, "close"},
		{"closed descriptor", 2, "close"},
		{"closed descriptor, verify", 2, "verify"},
		{"checksum file, verify", 1, "verify"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			vol := &fullVolume{}
			s := newTestStore(t, Options{writeFault: vol.fault})
			blocks := [][]byte{randBytes(1, 5000), randBytes(2, 70000), textBytes(3, 300)}
			var id uint64
			var ids []BlockID
			for _, b := range blocks {
				cid, bid := mustPut(t, s, b)
				id = cid
				ids = append(ids, bid)
			}
			checkReadable := func(when string) {
				t.Helper()
				for i, b := range ids {
					got, err := readBlock(t, s, b)
					if err != nil || !bytes.Equal(got, blocks[i]) {
						t.Fatalf("%s: block %s: %d bytes, %v; want its %d bytes", when, b, len(got), err, len(blocks[i]))
					}
				}
			}

			vol.fill(tt.skip)
			if _, err := s.CloseContainer(id); !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("close on a full volume: %v, want ENOSPC", err)
			}
			if d, _ := s.Descriptor(id); d.State != Closing {
				t.Fatalf("after the failed close: %s, want CLOSING", d.State)
			}
			checkReadable("after the failed close")

			// Still full: a Verify can record nothing, and must not
			// condemn data this process wrote.
			d, err := s.Verify(context.Background(), id)
			if !errors.Is(err, syscall.ENOSPC) {
				t.Errorf("verify on a full volume: %s %v, want ENOSPC", d.State, err)
			}
			if d, _ := s.Descriptor(id); d.State != Closing {
				t.Fatalf("after verify on a full volume: %s (%s), want CLOSING", d.State, d.Reason)
			}
			checkReadable("after verify on a full volume")

			vol.free()
			switch tt.retry {
			case "close":
				d, err = s.CloseContainer(id)
			case "verify":
				d, err = s.Verify(context.Background(), id)
			}
			if err != nil || d.State != Closed {
				t.Fatalf("%s after space came back: %s (%s) %v, want CLOSED", tt.retry, d.State, d.Reason, err)
			}
			if d.Blocks != int64(len(blocks)) {
				t.Errorf("CLOSED with %d blocks, want %d", d.Blocks, len(blocks))
			}
			checkReadable("once CLOSED")
			// The cleanup's checkStore checks the CLOSED container in
			// full; a Verify says the same through the Store.
			if d, err := s.Verify(context.Background(), id); err != nil || d.State != Closed {
				t.Errorf("verify once CLOSED: %s (%s) %v", d.State, d.Reason, err)
			}
			if d, err := s.CloseContainer(id); err != nil || d.State != Closed {
				t.Errorf("close once CLOSED: %s %v", d.State, err)
			}
		})
	}
}
