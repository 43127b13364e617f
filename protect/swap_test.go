package protect

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/cmfs-project/cmfs/cmroot"
	"github.com/cmfs-project/cmfs/internal/checksum"
	"github.com/cmfs-project/cmfs/internal/failpoint"
)

// TestSwapUndone: an O_TRUNC overwrite or a truncation to 0, which puts a
// new inode in the file's place, is undone when the journal fails to take
// its event: the old inode is back at the path, whichever way cmroot kept
// it — as the entry itself (a link, renamed over on the way in), or beside
// an entry with its content from before (exchanged, its name kept aside).
func TestSwapUndone(t *testing.T) {
	const rel, twin, content = "d/f", "d/twin", "the original content\n"
	ops := []struct {
		name string
		op   func(h *harness) error
	}{
		{"O_TRUNC", func(h *harness) error { return h.write(rel, os.O_WRONLY|os.O_TRUNC, "new\n") }},
		{"truncate to 0", func(h *harness) error {
			return h.core.Truncate(ctx, rel, 0, nil, Use{}, h.core.Prepare(rel, true), nil)
		}},
	}
	entry := cmroot.Name(checksum.Bytes([]byte(content)), int64(len(content)))
	for _, o := range ops {
		for _, shared := range []bool{false, true} {
			name := o.name + "/own entry"
			if shared {
				name = o.name + "/shared entry"
			}
			t.Run(name, func(t *testing.T) {
				backing := t.TempDir()
				if err := os.Mkdir(filepath.Join(backing, "d"), 0o755); err != nil {
					t.Fatal(err)
				}
				h := openHarness(t, backing)
				defer h.buried()
				defer h.core.Close()
				if err := h.write(rel, os.O_WRONLY|os.O_CREATE, content); err != nil {
					t.Fatal(err)
				}
				if shared {
					// cmroot holds the content already, from another file.
					if err := h.write(twin, os.O_WRONLY|os.O_CREATE, content); err != nil {
						t.Fatal(err)
					}
					if err := h.core.Unlink(ctx, twin, Use{}); err != nil {
						t.Fatal(err)
					}
				}
				var before syscall.Stat_t
				if err := syscall.Lstat(filepath.Join(backing, rel), &before); err != nil {
					t.Fatal(err)
				}
				closed := false
				reset := failpoint.Set(func(name string) {
					if name == "truncate/applied" && !closed {
						closed = true
						h.log.Close() // the journal refuses the event
					}
				})
				err := o.op(h)
				reset()
				if !closed {
					t.Fatal("never reached truncate/applied")
				}
				if err == nil {
					t.Fatal("succeeded with the journal closed before its event")
				}
				got, rerr := os.ReadFile(filepath.Join(backing, rel))
				var after syscall.Stat_t
				if serr := syscall.Lstat(filepath.Join(backing, rel), &after); rerr != nil || serr != nil {
					t.Fatal(rerr, serr)
				}
				if string(got) != content || after.Ino != before.Ino || after.Mode != before.Mode || after.Nlink != 1 {
					t.Errorf("after the undo: %q, inode %d mode %o nlink %d; want %q, inode %d mode %o nlink 1",
						got, after.Ino, after.Mode, after.Nlink, content, before.Ino, before.Mode)
				}
				_, lerr := h.store.Lookup(entry)
				if shared && lerr != nil {
					t.Errorf("the entry kept before is gone: %v", lerr)
				}
				if !shared && lerr == nil {
					t.Errorf("the entry made for the undone change is still in cmroot")
				}
				h.core.leftovers.close() // drains: what it had to unlink is gone
				left, err := os.ReadDir(h.core.tmpDir)
				if err != nil || len(left) != 0 {
					t.Errorf("temporary directory after the undo: %v %v, want empty", left, err)
				}
			})
		}
	}
}
