package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMountReports checks I6: what an operator must know is printed where
// they ran `cmfs mount`, not only in STATE/cmfs.log.
func TestMountReports(t *testing.T) {
	t.Run("recovery findings with --daemon", func(t *testing.T) {
		m, _, p := preservedOne(t, "original\n")
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
		res := remountDaemon(t, m.Backing)
		if !strings.Contains(res.Stderr, `level=WARN msg="recovery fsck" found="1 missing`) {
			t.Errorf("mount --daemon after losing a cmroot entry: %v; want the recovery findings on stderr", res)
		}
	})
	t.Run("findings as JSON", func(t *testing.T) {
		m, _, p := preservedOne(t, "original\n")
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
		res := remountDaemon(t, m.Backing, "--log-format", "json")
		var found bool
		for _, line := range strings.Split(strings.TrimSuffix(res.Stderr, "\n"), "\n") {
			var rec struct{ Level, Msg, Found string }
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Errorf("stderr line %q is not JSON: %v", line, err)
				continue
			}
			found = found || rec.Level == "WARN" && rec.Msg == "recovery fsck" && strings.Contains(rec.Found, "1 missing")
		}
		if res.Code != 0 || !found {
			t.Errorf("mount --daemon --log-format json after losing a cmroot entry: %v; want the recovery fsck's warning as a JSON line", res)
		}
	})
	t.Run("damaged in-flight table", func(t *testing.T) {
		m := mount(t)
		writeFile(t, m.path("sales.db/orders/dt=1/part-0"), []byte("original\n"))
		m.unmount(t)
		// A record whose size runs past its slot: nothing can be read of it.
		if err := os.WriteFile(filepath.Join(m.State, "inflight"), []byte{0xff, 0xff, 0, 0, '{'}, 0o600); err != nil {
			t.Fatal(err)
		}
		res := remountDaemon(t, m.Backing)
		if res.Code != 0 || !strings.Contains(res.Stderr, "level=WARN msg=recovery journaled=0 damaged=1") || !strings.Contains(res.Stderr, "1 damaged record(s) ignored") {
			t.Errorf("mount --daemon over a damaged in-flight table: %v; want it mounted, and the finding on stderr", res)
		}
	})
	t.Run("unknown mount option", func(t *testing.T) {
		requireFUSE(t)
		if os.Geteuid() != 0 {
			t.Skip("the kernel's reason reaches cmfs with a direct mount, as root")
		}
		backing, mnt := filepath.Join(t.TempDir(), "backing"), filepath.Join(t.TempDir(), "mnt")
		populate(t, backing)
		if err := os.Mkdir(mnt, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, daemon := range []bool{true, false} {
			args := []string{"mount", "-o", "bogusopt", backing, mnt}
			if daemon {
				args = append([]string{"mount", "--daemon"}, args[1:]...)
			}
			res := cmfs(t, args...)
			if isMounted(mnt) {
				(&mounted{Mnt: mnt}).unmount(t)
			}
			expectOneLineFailure(t, args, res)
			if !strings.Contains(res.Stderr, "invalid argument") || !strings.Contains(res.Stderr, "bogusopt") {
				t.Errorf("cmfs %s: stderr %q, want the kernel's reason (invalid argument) naming the option", strings.Join(args, " "), res.Stderr)
			}
		}
	})
}

// remountDaemon runs `cmfs mount --daemon` of backing on a fresh mount
// point, unmounted at cleanup if it mounted, and returns what it printed.
func remountDaemon(t *testing.T, backing string, flags ...string) result {
	t.Helper()
	mnt := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	res := cmfs(t, append(append([]string{"mount", "--daemon"}, flags...), backing, mnt)...)
	if isMounted(mnt) {
		t.Cleanup(func() { (&mounted{Mnt: mnt}).unmount(t) })
	}
	return res
}
