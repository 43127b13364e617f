package integration

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDamagedJournal damages the journal of an unmounted state directory
// (a flipped byte in a bbolt page header or in both meta pages) and runs
// every command that reads it: each must exit 1 with one line on stderr
// naming the file, and no panic (I5).
func TestDamagedJournal(t *testing.T) {
	requireFUSE(t)
	damages := []struct {
		name   string
		damage func(t *testing.T, path string)
	}{
		{"page header", func(t *testing.T, path string) {
			b := readFile(t, path)
			ps := int(binary.LittleEndian.Uint32(b[16+8:]))
			last := -1
			for id := 2; (id+1)*ps <= len(b); id++ {
				p := b[id*ps:]
				// A leaf page of events: 8-byte keys.
				if binary.LittleEndian.Uint64(p) == uint64(id) && binary.LittleEndian.Uint16(p[8:]) == 0x02 &&
					binary.LittleEndian.Uint16(p[10:]) > 0 && binary.LittleEndian.Uint32(p[16+8:]) == 8 {
					last = id
				}
			}
			if last < 0 {
				t.Fatalf("%s: no leaf page of events", path)
			}
			b[last*ps+8] ^= 0xff
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"both meta pages", func(t *testing.T, path string) {
			b := readFile(t, path)
			ps := int(binary.LittleEndian.Uint32(b[16+8:]))
			b[16+40] ^= 0xff
			b[ps+16+40] ^= 0xff
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, d := range damages {
		t.Run(d.name, func(t *testing.T) {
			backing := filepath.Join(t.TempDir(), "backing")
			populate(t, backing)
			m := mountAt(t, backing)
			for i := range 40 {
				writeFile(t, m.path(fmt.Sprintf("sales.db/orders/dt=%d/part-0", i)), []byte("some content"))
			}
			m.unmount(t)
			m.NoCheck = true
			path := filepath.Join(m.State, "journal.db")
			d.damage(t, path)
			mnt := filepath.Join(t.TempDir(), "mnt")
			if err := os.Mkdir(mnt, 0o755); err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct {
				tool string
				args []string
			}{
				{"cmfs", []string{"events", backing}},
				{"cmfs", []string{"events", "--json", "--state", m.State}},
				{"cmfs", []string{"fsck", backing}},
				{"cmfs", []string{"fsck", "--repair", backing}},
				{"cmfs", []string{"restore", backing, "--event", "1", "--to", t.TempDir()}},
				{"cmfs", []string{"status", backing}},
				{"cmfs", []string{"mount", "--daemon", backing, mnt}},
				{"cmfs", []string{"mount", backing, mnt}},
				{"replicad", []string{"dump", "--state", m.State, "--out", t.TempDir(), "--from", "1"}},
				{"replicad", []string{"dump", "--state", m.State, "--out", t.TempDir()}},
			} {
				var res result
				if c.tool == "cmfs" {
					res = cmfs(t, c.args...)
				} else {
					res = replicad(t, c.args...)
				}
				cmd := c.tool + " " + strings.Join(c.args, " ")
				msg := strings.TrimSuffix(res.Stderr, "\n")
				switch {
				case res.Code != 1:
					t.Errorf("%s: exit %d, want 1\n%v", cmd, res.Code, res)
				case strings.Contains(msg, "\n") || !strings.HasPrefix(msg, c.tool+": "):
					t.Errorf("%s: stderr %q, want one line starting %q", cmd, res.Stderr, c.tool+": ")
				case strings.Contains(msg, "panic") || strings.Contains(msg, "goroutine"):
					t.Errorf("%s: stderr %q tells of a panic", cmd, msg)
				case !strings.Contains(msg, path):
					t.Errorf("%s: stderr %q does not name %s", cmd, msg, path)
				case c.args[0] == "fsck" && !strings.Contains(msg, "restore it from a backup"):
					t.Errorf("%s: stderr %q does not say how to repair", cmd, msg)
				default:
					t.Logf("%s: %s", cmd, msg)
				}
				if isMounted(mnt) {
					t.Errorf("%s mounted %s", cmd, mnt)
					(&mounted{Mnt: mnt}).unmount(t)
				}
			}
		})
	}
}

// TestDamagedCMRootEntry flips a byte of a preserved original: fsck
// reports it corrupt (exit 1), and --repair moves it aside.
func TestDamagedCMRootEntry(t *testing.T) {
	m, entry, p := preservedOne(t, "original content\n")
	b := readFile(t, p)
	b[0] ^= 0xff
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	res := cmfs(t, "fsck", "--state", m.State)
	if res.Code != 1 || !strings.Contains(res.Stdout, entry) || !strings.Contains(res.Stderr, "corrupt") {
		t.Errorf("fsck of a corrupt entry: %v", res)
	}
	if strings.Count(strings.TrimSuffix(res.Stderr, "\n"), "\n") > 0 || !strings.Contains(res.Stderr, "--repair") {
		t.Errorf("fsck of a corrupt entry: stderr %q, want one line that says what --repair does", res.Stderr)
	}
	res = cmfs(t, "fsck", "--state", m.State, "--repair")
	if _, err := os.Stat(p); err == nil {
		t.Errorf("fsck --repair left the corrupt entry in place: %v", res)
	}
	aside, _ := filepath.Glob(filepath.Join(m.CMRoot, ".corrupt", entry+".*"))
	if len(aside) != 1 {
		t.Errorf("fsck --repair: %d files in .corrupt for %s, want 1: %v", len(aside), entry, res)
	}
}

// preservedOne mounts a fresh warehouse, deletes one file of content
// through it and unmounts it, leaving the cleanup's checks off for a test
// that then damages the state: it returns the mount, the cmroot name of
// the preserved original and the entry's path.
func preservedOne(t *testing.T, content string) (*mounted, string, string) {
	t.Helper()
	m := mount(t)
	writeFile(t, m.path("sales.db/orders/dt=1/part-0"), []byte(content))
	if err := os.Remove(m.path("sales.db/orders/dt=1/part-0")); err != nil {
		t.Fatal(err)
	}
	m.unmount(t)
	m.NoCheck = true
	var entry string
	for _, e := range events(t, m.State) {
		for _, f := range e.Files {
			if f.CM != "" {
				entry = f.CM
			}
		}
	}
	if entry == "" {
		t.Fatal("no event names a cmroot entry")
	}
	p, err := cmEntry(m.CMRoot, entry)
	if err != nil {
		t.Fatal(err)
	}
	return m, entry, p
}
