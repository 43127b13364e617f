package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/internal/wait"
)

// createModes is the program a caller runs to create, with its own umask,
// a file, a directory and a fifo of each mode in the directory argv[1],
// and print each one's mode as the file system has it.
const createModes = `
import os, sys
d = sys.argv[1]
for m in (0o777, 0o4777, 0o620):
    f = os.path.join(d, "f%o" % m)
    os.close(os.open(f, os.O_CREAT | os.O_EXCL | os.O_WRONLY, m))
    os.mkdir(os.path.join(d, "d%o" % m), m)
    os.mkfifo(os.path.join(d, "p%o" % m), m)
for n in sorted(os.listdir(d)):
    print(n, oct(os.lstat(os.path.join(d, n)).st_mode))
`

// TestCreationModes: a file, directory or fifo made through the mount gets
// the mode a native directory gives it — the caller's umask applied once,
// whatever umask the daemon was started under.
func TestCreationModes(t *testing.T) {
	requireFUSE(t)
	// cmfs's own files keep their modes whatever its umask.
	own := map[string]map[string]os.FileMode{}
	for _, daemon := range []string{"022", "077"} {
		t.Run("daemon umask "+daemon, func(t *testing.T) {
			m := mountUmask(t, daemon)
			// A preserved original: a cmroot entry and its directories.
			writeFile(t, m.path("kept"), []byte("kept content"))
			if err := os.Remove(m.path("kept")); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				m.unmount(t)
				own[daemon] = stateModes(t, m.State)
			})
			for _, caller := range []string{"000", "022"} {
				t.Run("caller umask "+caller, func(t *testing.T) {
					native := filepath.Join(t.TempDir(), "native")
					through := m.path("u" + caller)
					for _, d := range []string{native, through} {
						if err := os.Mkdir(d, 0o777); err != nil {
							t.Fatal(err)
						}
						if err := os.Chmod(d, 0o777); err != nil {
							t.Fatal(err)
						}
					}
					got := modes(t, caller, through)
					want := modes(t, caller, native)
					if got != want {
						t.Errorf("modes through the mount (daemon umask %s, caller %s):\n%s\nnative:\n%s", daemon, caller, got, want)
					}
				})
			}
		})
	}
	if len(own) != 2 {
		t.Fatalf("state directory modes of %d mounts, want 2", len(own))
	}
	for rel, m := range own["022"] {
		if m2, ok := own["077"][rel]; !ok || m2 != m {
			t.Errorf("state directory entry %s: mode %v under daemon umask 022, %v under 077", rel, m, m2)
		}
	}
}

// modes runs createModes in dir under umask.
func modes(t *testing.T, umask, dir string) string {
	t.Helper()
	res := runTool(t, 30*time.Second, "sh", "-c", fmt.Sprintf("umask %s; exec python3 -c \"$0\" \"$1\"", umask), createModes, dir)
	if res.Code != 0 {
		t.Fatalf("create in %s under umask %s: %v", dir, umask, res)
	}
	return res.Stdout
}

// mountUmask mounts a fresh backing directory with a daemon that runs
// under umask.
func mountUmask(t *testing.T, umask string) *mounted {
	t.Helper()
	backing := filepath.Join(t.TempDir(), "backing")
	mp := filepath.Join(t.TempDir(), "mnt")
	for _, d := range []string{backing, mp} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	m := &mounted{Backing: backing, Mnt: mp, State: filepath.Join(backing, ".cmfs")}
	m.CMRoot = filepath.Join(m.State, "cmroot")
	live.Store(mp, true)
	t.Cleanup(func() { m.unmountAndCheck(t) })
	res := runTool(t, 60*time.Second, "sh", "-c", "umask "+umask+`; exec "$0" "$@"`, cmfsBin, "mount", "--daemon", backing, mp)
	if res.Code != 0 {
		t.Fatalf("cmfs mount under umask %s: %v", umask, res)
	}
	wait.For(t, 10*time.Second, "mount of "+mp+" to appear", func() bool { return isMounted(mp) })
	return m
}

// stateModes returns the mode of every entry of the state directory, so a
// test can check that cmfs's own files keep their modes whatever its umask.
func stateModes(t *testing.T, state string) map[string]os.FileMode {
	t.Helper()
	got := map[string]os.FileMode{}
	err := filepath.Walk(state, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(state, p)
		if fi.Mode()&0o022 != 0 && fi.Mode()&os.ModeSocket == 0 {
			t.Errorf("%s: mode %v is group or other writable", rel, fi.Mode())
		}
		got[rel] = fi.Mode()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}
