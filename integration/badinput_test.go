package integration

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/journal"
)

// populate gives a backing directory some content to lose.
func populate(t *testing.T, dir string) {
	t.Helper()
	writeFile(t, filepath.Join(dir, "keep"), []byte("keep me\n"))
	writeFile(t, filepath.Join(dir, "sales.db/orders/dt=1/part-0"), original("part-0"))
}

func TestBadInput(t *testing.T) {
	requireFUSE(t)
	// Each case prepares world (a fresh directory holding everything the
	// command may touch) and returns the command line. The command must
	// exit non-zero with exactly one line on stderr and leave world as it
	// was.
	type badCase struct {
		name    string
		prepare func(t *testing.T, world string) []string
	}
	dirs := func(t *testing.T, world string) (backing, mnt string) {
		backing, mnt = filepath.Join(world, "backing"), filepath.Join(world, "mnt")
		populate(t, backing)
		if err := os.Mkdir(mnt, 0o755); err != nil {
			t.Fatal(err)
		}
		return backing, mnt
	}
	cases := []badCase{
		{"missing backing", func(t *testing.T, world string) []string {
			_, mnt := dirs(t, world)
			return []string{"mount", "--daemon", filepath.Join(world, "absent"), mnt}
		}},
		{"backing is a file", func(t *testing.T, world string) []string {
			backing, mnt := dirs(t, world)
			return []string{"mount", "--daemon", filepath.Join(backing, "keep"), mnt}
		}},
		{"mountpoint inside backing", func(t *testing.T, world string) []string {
			backing, _ := dirs(t, world)
			if err := os.Mkdir(filepath.Join(backing, "sub"), 0o755); err != nil {
				t.Fatal(err)
			}
			return []string{"mount", "--daemon", backing, filepath.Join(backing, "sub")}
		}},
		{"mountpoint equal to backing", func(t *testing.T, world string) []string {
			backing, _ := dirs(t, world)
			return []string{"mount", "--daemon", backing, backing}
		}},
		{"mountpoint equal to backing, spelled differently", func(t *testing.T, world string) []string {
			backing, _ := dirs(t, world)
			return []string{"mount", "--daemon", backing, backing + "/sales.db/.."}
		}},
		{"unwritable state dir", func(t *testing.T, world string) []string {
			backing, mnt := dirs(t, world)
			ro := mountTmpfs(t, "1m", "ro")
			return []string{"mount", "--daemon", "--state", ro, backing, mnt}
		}},
		{"state dir is a file", func(t *testing.T, world string) []string {
			backing, mnt := dirs(t, world)
			return []string{"mount", "--daemon", "--state", filepath.Join(backing, "keep"), backing, mnt}
		}},
		{"journal of garbage", func(t *testing.T, world string) []string {
			backing, mnt := dirs(t, world)
			writeFile(t, filepath.Join(backing, ".cmfs", "journal.db"), garbage(64<<10))
			return []string{"mount", "--daemon", backing, mnt}
		}},
		{"events from a journal of garbage", func(t *testing.T, world string) []string {
			backing, _ := dirs(t, world)
			writeFile(t, filepath.Join(backing, ".cmfs", "journal.db"), garbage(64<<10))
			return []string{"events", "--state", filepath.Join(backing, ".cmfs"), "--json"}
		}},
		{"fsck of a journal of garbage", func(t *testing.T, world string) []string {
			backing, _ := dirs(t, world)
			writeFile(t, filepath.Join(backing, ".cmfs", "journal.db"), garbage(64<<10))
			return []string{"fsck", "--state", filepath.Join(backing, ".cmfs")}
		}},
		{"journal that fails Verify", func(t *testing.T, world string) []string {
			backing, mnt := dirs(t, world)
			corruptJournal(t, backing)
			return []string{"mount", "--daemon", backing, mnt}
		}},
		{"cmroot equal to backing", func(t *testing.T, world string) []string {
			backing, mnt := dirs(t, world)
			return []string{"mount", "--daemon", "--cmroot", backing, backing, mnt}
		}},
		{"cmroot equal to backing, spelled differently", func(t *testing.T, world string) []string {
			backing, mnt := dirs(t, world)
			return []string{"mount", "--daemon", "--cmroot", backing + "/sales.db/..", backing, mnt}
		}},
		{"cmroot containing backing", func(t *testing.T, world string) []string {
			backing, mnt := dirs(t, world)
			return []string{"mount", "--daemon", "--cmroot", world, backing, mnt}
		}},
		{"cmroot inside a visible directory of backing", func(t *testing.T, world string) []string {
			backing, mnt := dirs(t, world)
			return []string{"mount", "--daemon", "--cmroot", filepath.Join(backing, "sales.db", "cm"), backing, mnt}
		}},
		{"cmroot inside scratch space of backing", func(t *testing.T, world string) []string {
			backing, mnt := dirs(t, world)
			return []string{"mount", "--daemon", "--cmroot", filepath.Join(backing, "_temporary", "cm"), backing, mnt}
		}},
		{"cmroot equal to the state directory", func(t *testing.T, world string) []string {
			backing, mnt := dirs(t, world)
			return []string{"mount", "--daemon", "--cmroot", filepath.Join(backing, ".cmfs"), backing, mnt}
		}},
		{"state directory equal to backing", func(t *testing.T, world string) []string {
			backing, mnt := dirs(t, world)
			return []string{"mount", "--daemon", "--state", backing, backing, mnt}
		}},
		{"state directory inside a visible directory of backing", func(t *testing.T, world string) []string {
			backing, mnt := dirs(t, world)
			return []string{"mount", "--daemon", "--state", filepath.Join(backing, "sales.db", "state"), backing, mnt}
		}},
		{"state directory equal to the mountpoint", func(t *testing.T, world string) []string {
			backing, mnt := dirs(t, world)
			return []string{"mount", "--daemon", "--state", mnt, backing, mnt}
		}},
		{"cmroot equal to the mountpoint", func(t *testing.T, world string) []string {
			backing, mnt := dirs(t, world)
			return []string{"mount", "--daemon", "--cmroot", mnt, backing, mnt}
		}},
		{"unknown flag", func(t *testing.T, world string) []string {
			backing, mnt := dirs(t, world)
			return []string{"mount", "--daemon", "--no-such-flag", backing, mnt}
		}},
		{"unknown flag of events", func(t *testing.T, world string) []string {
			backing, _ := dirs(t, world)
			return []string{"events", "--no-such-flag", backing}
		}},
		{"unknown command", func(t *testing.T, world string) []string {
			return []string{"frobnicate"}
		}},
		{"missing mountpoint argument", func(t *testing.T, world string) []string {
			backing, _ := dirs(t, world)
			return []string{"mount", "--daemon", backing}
		}},
		{"bad retention", func(t *testing.T, world string) []string {
			backing, mnt := dirs(t, world)
			return []string{"mount", "--daemon", "--retain", "forever", backing, mnt}
		}},
		{"restore of an event that does not exist", func(t *testing.T, world string) []string {
			backing, _ := dirs(t, world)
			m := mountAt(t, backing)
			writeFile(t, m.path("x"), []byte("x"))
			m.unmount(t)
			return []string{"restore", "--state", m.State, "--event", "999999"}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			world := t.TempDir()
			args := c.prepare(t, world)
			before := userView(snapshot(t, world))
			res := cmfs(t, args...)
			expectOneLineFailure(t, args, res)
			if d := diffTrees(userView(snapshot(t, world)), before); d != "" {
				t.Errorf("cmfs %s changed what it was given:\n%s", strings.Join(args, " "), d)
			}
			for _, mp := range []string{filepath.Join(world, "mnt"), filepath.Join(world, "backing"), filepath.Join(world, "backing", "sub")} {
				if isMounted(mp) {
					t.Errorf("cmfs %s mounted %s", strings.Join(args, " "), mp)
					(&mounted{Mnt: mp}).unmount(t)
				}
			}
		})
	}

	t.Run("mountpoint busy", func(t *testing.T) {
		m := mount(t)
		writeFile(t, m.path("first"), []byte("first mount\n"))
		world := t.TempDir()
		backing := filepath.Join(world, "backing")
		populate(t, backing)
		before := userView(snapshot(t, world))
		args := []string{"mount", "--daemon", backing, m.Mnt}
		res := cmfs(t, args...)
		expectOneLineFailure(t, args, res)
		if d := diffTrees(userView(snapshot(t, world)), before); d != "" {
			t.Errorf("cmfs %s changed the second backing:\n%s", strings.Join(args, " "), d)
		}
		if got := readFile(t, m.path("first")); string(got) != "first mount\n" {
			t.Errorf("the first mount serves %q", got)
		}
		writeFile(t, m.path("second"), []byte("still works\n"))
		if _, err := os.Stat(filepath.Join(m.Backing, "second")); err != nil {
			t.Errorf("the first mount no longer passes through: %v", err)
		}
	})
}

// userView drops from a snapshot what cmfs may write in its own state
// directory on a refusal (a log, the cmroot index), but keeps the journal:
// a refused command must not rewrite, repair or replace it.
func userView(tree map[string]node) map[string]node {
	out := map[string]node{}
	for k, v := range tree {
		if i := strings.Index(k, ".cmfs/"); i >= 0 && !strings.HasSuffix(k, ".cmfs/journal.db") {
			continue
		}
		out[k] = v
	}
	return out
}

// expectOneLineFailure checks a refusal: non-zero exit, one line on stderr.
func expectOneLineFailure(t *testing.T, args []string, res result) {
	t.Helper()
	cmd := "cmfs " + strings.Join(args, " ")
	if res.Code == 0 {
		t.Errorf("%s: exit 0, want a refusal\n%v", cmd, res)
		return
	}
	msg := strings.TrimSuffix(res.Stderr, "\n")
	if strings.TrimSpace(msg) == "" || strings.Contains(msg, "\n") {
		t.Errorf("%s: exit %d with stderr %q, want exactly one line", cmd, res.Code, res.Stderr)
		return
	}
	t.Logf("%s: exit %d: %s", cmd, res.Code, msg)
}

func garbage(n int) []byte {
	rng := rand.New(rand.NewPCG(1, 2))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.UintN(256))
	}
	return b
}

// corruptJournal makes a real journal in backing and flips a byte inside
// a stored event, so that the file is a valid bbolt database whose events
// fail Verify. It skips the test if the journal keeps no path verbatim.
func corruptJournal(t *testing.T, backing string) {
	t.Helper()
	m := mountAt(t, backing)
	const marker = "corruptme-7f3a9c"
	for i := range 3 {
		writeFile(t, m.path(marker+string(rune('a'+i))), []byte("content"))
	}
	m.unmount(t)
	m.NoCheck = true
	path := filepath.Join(m.State, "journal.db")
	b := readFile(t, path)
	n := bytes.Count(b, []byte(marker))
	if n == 0 {
		t.Skipf("no event path stored verbatim in %s: cannot corrupt it precisely", path)
	}
	b = bytes.ReplaceAll(b, []byte(marker), []byte("CORRUPTME-7f3a9c"))
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := journal.Open(path, journal.Options{ReadOnly: true, LockTimeout: time.Second})
	if err == nil {
		err = l.Verify()
		l.Close()
	}
	if err == nil {
		t.Skipf("flipping %d copies of an event path left the journal valid", n)
	}
	if !errors.Is(err, journal.ErrCorrupt) {
		t.Logf("corrupted journal: %v (not ErrCorrupt)", err)
	}
}
