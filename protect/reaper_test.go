package protect

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// Every name queued is gone once close returns, also past a full queue,
// and a nil reaper (a Core without a temporary directory) unlinks at once.
func TestReaperUnlinksEveryName(t *testing.T) {
	dir := t.TempDir()
	touch := func(i int) string {
		p := filepath.Join(dir, fmt.Sprintf("replace-%d", i))
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	r := newReaper()
	for i := range 3 * reaperQueue {
		r.remove(touch(i))
	}
	r.close()
	r.close() // a second close is harmless
	if des, _ := os.ReadDir(dir); len(des) != 0 {
		t.Fatalf("%d names left after close, want 0", len(des))
	}

	var none *reaper
	p := touch(0)
	none.remove(p)
	if _, err := os.Lstat(p); !os.IsNotExist(err) {
		t.Fatalf("nil reaper left %s: %v", p, err)
	}
	none.close()
}
