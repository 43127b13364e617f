package integration

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// TestDamagedJournal damages the journal of an unmounted state directory
// (a flipped byte in the header of a leaf page of events, or in both meta
// pages) and runs every command that reads what is damaged: each must exit
// 1 with one line on stderr naming the file, and no panic (I5).
//
// Every open reads the newest event, so damage to its leaf page or to the
// meta pages stops every command. Damage to the oldest leaf stops what
// reads that far back; `cmfs status` and a bootstrap dump read only the
// newest event (each record carries its own checksum) and are left out
// of that case. A mount and fsck check every page, wherever the damage.
func TestDamagedJournal(t *testing.T) {
	requireFUSE(t)
	everything := []string{"events", "events --json", "fsck", "fsck --repair", "restore", "status",
		"mount --daemon", "mount", "dump --from 1", "dump"}
	damages := []struct {
		name     string
		damage   func(t *testing.T, path string)
		commands []string
	}{
		{"newest leaf", func(t *testing.T, path string) { damageLeaf(t, path, true) }, everything},
		{"oldest leaf", func(t *testing.T, path string) { damageLeaf(t, path, false) },
			[]string{"events", "events --json", "fsck", "fsck --repair", "restore", "mount --daemon", "mount", "dump --from 1"}},
		{"both meta pages", func(t *testing.T, path string) {
			b := readFile(t, path)
			ps := int(binary.LittleEndian.Uint32(b[16+8:]))
			b[16+40] ^= 0xff
			b[ps+16+40] ^= 0xff
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}, everything},
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
			commands := map[string]struct {
				tool string
				args []string
			}{
				"events":         {"cmfs", []string{"events", backing}},
				"events --json":  {"cmfs", []string{"events", "--json", "--state", m.State}},
				"fsck":           {"cmfs", []string{"fsck", backing}},
				"fsck --repair":  {"cmfs", []string{"fsck", "--repair", backing}},
				"restore":        {"cmfs", []string{"restore", backing, "--event", "1", "--to", t.TempDir()}},
				"status":         {"cmfs", []string{"status", backing}},
				"mount --daemon": {"cmfs", []string{"mount", "--daemon", backing, mnt}},
				"mount":          {"cmfs", []string{"mount", backing, mnt}},
				"dump --from 1":  {"replicad", []string{"dump", "--state", m.State, "--out", t.TempDir(), "--from", "1"}},
				"dump":           {"replicad", []string{"dump", "--state", m.State, "--out", t.TempDir()}},
			}
			for _, name := range d.commands {
				c, ok := commands[name]
				if !ok {
					t.Fatalf("no command %q", name)
				}
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

// damageLeaf flips the flags of the leaf page that holds the newest (or
// the oldest) events of the journal at path. It finds the page by walking
// the events bucket's tree from the root bbolt reports, down its last (or
// first) branch elements: a page found by scanning the file may be an
// older copy on the freelist, whose damage no reader ever sees.
func damageLeaf(t *testing.T, path string, newest bool) {
	t.Helper()
	const (
		pageHeader = 16
		elem       = 16 // a branch element: pos, ksize uint32; pgid uint64
		branchFlag = 0x01
		leafFlag   = 0x02
	)
	var root uint64
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	err = db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("events"))
		if b == nil {
			return fmt.Errorf("no events bucket")
		}
		root = uint64(b.Root())
		return nil
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if root == 0 {
		t.Fatalf("%s: the events bucket is inline: no page of its own to damage", path)
	}
	b := readFile(t, path)
	ps := uint64(binary.LittleEndian.Uint32(b[pageHeader+8:]))
	id, depth := root, 0
	for ; ; depth++ {
		if (id+1)*ps > uint64(len(b)) {
			t.Fatalf("%s: page %d beyond the end of the file", path, id)
		}
		p := b[id*ps:]
		flags, count := binary.LittleEndian.Uint16(p[8:]), int(binary.LittleEndian.Uint16(p[10:]))
		if flags == leafFlag {
			break
		}
		if flags != branchFlag || count == 0 {
			t.Fatalf("%s: page %d: flags %#x count %d, want a branch page", path, id, flags, count)
		}
		i := 0
		if newest {
			i = count - 1
		}
		id = binary.LittleEndian.Uint64(p[pageHeader+i*elem+8:])
	}
	if depth == 0 {
		t.Fatalf("%s: the events fit in one leaf page: oldest and newest are not apart", path)
	}
	b[id*ps+8] ^= 0xff
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: flipped the flags of leaf page %d (depth %d)", path, id, depth)
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
