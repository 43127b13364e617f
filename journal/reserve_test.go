package journal

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// fakeDisk is a file system for the reserve's fallocate calls: it records
// them and fails with ENOSPC once full is set.
type fakeDisk struct {
	mu    sync.Mutex
	full  bool
	calls [][2]int64 // offset, length
}

func (d *fakeDisk) fallocate(fd int, mode uint32, off, size int64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if mode != unix.FALLOC_FL_KEEP_SIZE {
		return syscall.EINVAL
	}
	if d.full {
		return syscall.ENOSPC
	}
	d.calls = append(d.calls, [2]int64{off, size})
	return unix.Fallocate(fd, mode, off, size)
}

func (d *fakeDisk) set(full bool) {
	d.mu.Lock()
	d.full = full
	d.mu.Unlock()
}

func (d *fakeDisk) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.calls)
}

func TestReserveAccounting(t *testing.T) {
	d := &fakeDisk{}
	path := filepath.Join(t.TempDir(), "f")
	if err := writeEmpty(path); err != nil {
		t.Fatal(err)
	}
	const want = 1 << 20
	r, err := newReserve(path, want, 8192, d.fallocate)
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	if got := r.end; got != 8192+want {
		t.Fatalf("after open the reserve ends at %d, want %d", got, 8192+want)
	}
	// Growth within the reserve allocates nothing more.
	n := d.count()
	for hwm := int64(8192); hwm <= 8192+want/4; hwm += 4096 {
		if !r.refill(hwm) {
			t.Fatalf("refill(%d) failed", hwm)
		}
	}
	if got := d.count(); got != n+1 {
		t.Errorf("%d fallocate calls for a quarter reserve of growth, want 1", got-n)
	}
	// A commit within the reserve needs no call.
	n = d.count()
	if err := r.room(8192, 64<<10); err != nil || d.count() != n {
		t.Errorf("room within the reserve: %v, %d calls", err, d.count()-n)
	}
	// Full: the refill fails and the reserve is short until one succeeds.
	d.set(true)
	if r.refill(r.end) {
		t.Fatal("refill succeeded on a full disk")
	}
	if !r.short.Load() {
		t.Fatal("reserve not short after a failed refill")
	}
	err = r.room(r.end, 4096)
	if !errors.Is(err, syscall.ENOSPC) || !errors.Is(err, ErrNoSpace) {
		t.Errorf("room past the reserve on a full disk: %v, want ErrNoSpace wrapping ENOSPC", err)
	}
	d.set(false)
	if !r.refill(r.end - want) {
		t.Error("refill failed with room again")
	}
	if r.short.Load() {
		t.Error("reserve still short after a refill")
	}
}

func TestAdmitAndAppendOnFullDisk(t *testing.T) {
	d := &fakeDisk{}
	path := filepath.Join(t.TempDir(), "journal.db")
	l := openTestLog(t, path, Options{NoSync: true, Reserve: minReserve, fallocate: d.fallocate})
	ctx := context.Background()
	if err := l.Admit(); err != nil {
		t.Fatalf("Admit with room: %v", err)
	}
	appendN(t, l, 10)
	d.set(true)
	// Commits go on inside the reserve; as soon as a refill fails, Admit
	// refuses.
	refused := false
	for i := 0; i < 10000 && !refused; i++ {
		if err := l.Append(ctx, testEvent(100+i)); err != nil {
			t.Fatalf("append %d inside the reserve: %v", i, err)
		}
		refused = l.Admit() != nil
	}
	if !refused {
		t.Fatal("Admit never refused on a full disk")
	}
	if err := l.Admit(); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("Admit on a full disk: %v, want ENOSPC", err)
	}
	// A batch larger than what is left fails before the commit: no ids.
	last := l.Last()
	big := make([]*Event, 0, 2000)
	for i := range 2000 {
		big = append(big, testEvent(100000+i))
	}
	if err := l.Append(ctx, big...); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("append of a batch larger than the reserve on a full disk: %v, want ENOSPC", err)
	}
	if l.Last() != last || big[0].ID != 0 {
		t.Errorf("a refused batch got ids: last %d → %d, first event id %d", last, l.Last(), big[0].ID)
	}
	// Room again: admitted, and the log goes on densely.
	d.set(false)
	if err := l.Admit(); err != nil {
		t.Fatalf("Admit with room again: %v", err)
	}
	appendN(t, l, 5)
	if got := l.Last(); got != last+5 {
		t.Errorf("last id %d, want %d", got, last+5)
	}
}

func writeEmpty(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	return f.Close()
}
