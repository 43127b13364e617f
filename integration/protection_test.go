package integration

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cmfs-project/cmfs/journal"
)

// A partition file of the warehouse layout, and its neighbours.
const (
	partDir  = "sales.db/orders/dt=2024-01-01"
	partFile = partDir + "/part-0"
	partFil1 = partDir + "/part-1"
	partFil2 = partDir + "/part-2"
	partDir2 = "sales.db/orders/dt=2024-01-02"
)

// original is the deterministic content a test gives path before the
// operation under test: distinct per path, a few pages long.
func original(path string) []byte {
	var b bytes.Buffer
	for i := 0; b.Len() < 20000+len(path)*7; i++ {
		fmt.Fprintf(&b, "%s line %d of the original\n", path, i)
	}
	return b.Bytes()
}

// fileWant names a file an event must list, and the event's type.
type fileWant struct {
	path string
	typ  journal.Type
}

// eventWant is an event that must appear.
type eventWant struct {
	typ     journal.Type
	path    string
	newPath string
}

// protectionRow is one row of the protection table (DESIGN.md §3).
type protectionRow struct {
	name  string
	files []string // created with original(path) before the operation
	dirs  []string // extra directories created before the operation
	// op is the operation under test, applied to the mount and to a native
	// directory alike; root is the directory it applies to.
	op func(root string) error
	// preserved originals: each must be listed, with its cm name, by an
	// event of the type given, and be in cmroot byte for byte.
	preserved []fileWant
	// written files whose new content must be journaled (cm empty) by the
	// last event that lists them.
	written []fileWant
	// events that must appear.
	events []eventWant
	// last, if set, must be the newest event.
	last *eventWant
}

func TestProtection(t *testing.T) {
	at := func(root, rel string) string { return filepath.Join(root, filepath.FromSlash(rel)) }
	inPlace := func(flag int, off int64, data string) func(string) error {
		return func(root string) error {
			f, err := os.OpenFile(at(root, partFile), flag, 0)
			if err != nil {
				return err
			}
			if flag&os.O_APPEND != 0 {
				_, err = f.Write([]byte(data))
			} else {
				if flag&os.O_RDWR != 0 {
					buf := make([]byte, 100)
					if _, err := f.ReadAt(buf, 0); err != nil {
						f.Close()
						return err
					}
				}
				_, err = f.WriteAt([]byte(data), off)
			}
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			return err
		}
	}
	rmr := func(rel string) func(string) error {
		return func(root string) error {
			if out, err := exec.Command("rm", "-r", at(root, rel)).CombinedOutput(); err != nil {
				return fmt.Errorf("rm -r: %v: %s", err, out)
			}
			return nil
		}
	}
	rows := []protectionRow{
		{
			name:      "unlink",
			files:     []string{partFile, partFil1},
			op:        func(root string) error { return os.Remove(at(root, partFile)) },
			preserved: []fileWant{{partFile, journal.Delete}},
		},
		{
			name:      "unlink outside layout",
			files:     []string{"notes/a.txt"},
			op:        func(root string) error { return os.Remove(at(root, "notes/a.txt")) },
			preserved: []fileWant{{"notes/a.txt", journal.Delete}},
		},
		{
			name:      "rename over existing",
			files:     []string{partFile, partFil1},
			op:        func(root string) error { return os.Rename(at(root, partFil1), at(root, partFile)) },
			preserved: []fileWant{{partFile, journal.Rename}},
			events:    []eventWant{{journal.Rename, partFil1, partFile}},
		},
		{
			name:      "rename over existing outside layout",
			files:     []string{"notes/a.txt", "notes/b.txt"},
			op:        func(root string) error { return os.Rename(at(root, "notes/b.txt"), at(root, "notes/a.txt")) },
			preserved: []fileWant{{"notes/a.txt", journal.Rename}},
			events:    []eventWant{{journal.Rename, "notes/b.txt", "notes/a.txt"}},
		},
		{
			name:  "open O_TRUNC and write",
			files: []string{partFile},
			op: func(root string) error {
				f, err := os.OpenFile(at(root, partFile), os.O_WRONLY|os.O_TRUNC, 0)
				if err != nil {
					return err
				}
				_, err = f.Write([]byte("the new content\n"))
				if cerr := f.Close(); err == nil {
					err = cerr
				}
				return err
			},
			preserved: []fileWant{{partFile, journal.Truncate}},
			written:   []fileWant{{partFile, journal.Insert}},
		},
		{
			name:  "open O_TRUNC without writing",
			files: []string{partFile},
			op: func(root string) error {
				f, err := os.OpenFile(at(root, partFile), os.O_WRONLY|os.O_TRUNC, 0)
				if err != nil {
					return err
				}
				return f.Close()
			},
			preserved: []fileWant{{partFile, journal.Truncate}},
		},
		{
			name:      "truncate(2) to 0",
			files:     []string{partFile},
			op:        func(root string) error { return os.Truncate(at(root, partFile), 0) },
			preserved: []fileWant{{partFile, journal.Truncate}},
		},
		{
			name:      "truncate(2) to a smaller size",
			files:     []string{partFile},
			op:        func(root string) error { return os.Truncate(at(root, partFile), 7) },
			preserved: []fileWant{{partFile, journal.Truncate}},
		},
		{
			name:  "ftruncate on an open fd",
			files: []string{partFile},
			op: func(root string) error {
				f, err := os.OpenFile(at(root, partFile), os.O_RDWR, 0)
				if err != nil {
					return err
				}
				err = f.Truncate(3)
				if cerr := f.Close(); err == nil {
					err = cerr
				}
				return err
			},
			preserved: []fileWant{{partFile, journal.Truncate}},
		},
		{
			name:      "in-place write O_WRONLY",
			files:     []string{partFile},
			op:        inPlace(os.O_WRONLY, 5, "XYZ"),
			preserved: []fileWant{{partFile, journal.Insert}},
			written:   []fileWant{{partFile, journal.Insert}},
		},
		{
			name:      "in-place write O_RDWR",
			files:     []string{partFile},
			op:        inPlace(os.O_RDWR, 9000, "in place"),
			preserved: []fileWant{{partFile, journal.Insert}},
			written:   []fileWant{{partFile, journal.Insert}},
		},
		{
			name:      "in-place write O_APPEND",
			files:     []string{partFile},
			op:        inPlace(os.O_WRONLY|os.O_APPEND, 0, "appended\n"),
			preserved: []fileWant{{partFile, journal.Insert}},
			written:   []fileWant{{partFile, journal.Insert}},
		},
		{
			name:  "in-place write outside layout",
			files: []string{"notes/a.txt"},
			op: func(root string) error {
				f, err := os.OpenFile(at(root, "notes/a.txt"), os.O_WRONLY, 0)
				if err != nil {
					return err
				}
				_, err = f.WriteAt([]byte("ABC"), 100)
				if cerr := f.Close(); err == nil {
					err = cerr
				}
				return err
			},
			preserved: []fileWant{{"notes/a.txt", journal.Write}},
			written:   []fileWant{{"notes/a.txt", journal.Write}},
		},
		{
			name:  "rm -r of a partition",
			files: []string{partFile, partFil1, partFil2, partDir2 + "/part-0"},
			op:    rmr(partDir),
			preserved: []fileWant{
				{partFile, journal.Delete}, {partFil1, journal.Delete}, {partFil2, journal.Delete},
			},
			last: &eventWant{typ: journal.DropPartition, path: partDir},
		},
		{
			name:  "rmdir of an empty partition",
			files: []string{partFile},
			dirs:  []string{partDir2},
			op:    func(root string) error { return syscall.Rmdir(at(root, partDir2)) },
			last:  &eventWant{typ: journal.DropPartition, path: partDir2},
		},
		{
			name:  "rm -r of a table",
			files: []string{partFile, partFil1, partDir2 + "/part-0", "sales.db/items/f0"},
			op:    rmr("sales.db/orders"),
			preserved: []fileWant{
				{partFile, journal.Delete}, {partFil1, journal.Delete}, {partDir2 + "/part-0", journal.Delete},
			},
			last: &eventWant{typ: journal.DropTable, path: "sales.db/orders"},
		},
		{
			name:      "rm -r of an unpartitioned table",
			files:     []string{"sales.db/items/f0", "sales.db/items/f1", partFile},
			op:        rmr("sales.db/items"),
			preserved: []fileWant{{"sales.db/items/f0", journal.Delete}, {"sales.db/items/f1", journal.Delete}},
			last:      &eventWant{typ: journal.DropTable, path: "sales.db/items"},
		},
		{
			name: "close after writes journals the new content",
			op: func(root string) error {
				if err := os.MkdirAll(at(root, partDir), 0o755); err != nil {
					return err
				}
				return os.WriteFile(at(root, partFile), []byte("new partition file\n"), 0o644)
			},
			written: []fileWant{{partFile, journal.Insert}},
			events: []eventWant{
				{typ: journal.CreateDatabase, path: "sales.db"},
				{typ: journal.CreateTable, path: "sales.db/orders"},
				{typ: journal.AddPartition, path: partDir},
			},
		},
		{
			name: "close after writes outside layout",
			op: func(root string) error {
				if err := os.Mkdir(at(root, "notes"), 0o755); err != nil {
					return err
				}
				return os.WriteFile(at(root, "notes/new.txt"), original("notes/new.txt"), 0o600)
			},
			written: []fileWant{{"notes/new.txt", journal.Write}},
			events:  []eventWant{{typ: journal.Mkdir, path: "notes"}},
		},
		{
			name:  "rename from staging into a table",
			files: []string{partFile},
			op: func(root string) error {
				staged := at(root, "sales.db/orders/_temporary/0/task-1/part-9")
				if err := os.MkdirAll(filepath.Dir(staged), 0o755); err != nil {
					return err
				}
				if err := os.WriteFile(staged, []byte("staged output\n"), 0o644); err != nil {
					return err
				}
				if err := os.Rename(staged, at(root, partDir+"/part-9")); err != nil {
					return err
				}
				return os.RemoveAll(at(root, "sales.db/orders/_temporary"))
			},
			written: []fileWant{{partDir + "/part-9", journal.Insert}},
		},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) { runProtectionRow(t, row) })
	}
}

func runProtectionRow(t *testing.T, row protectionRow) {
	m := mount(t)
	native := t.TempDir()
	for _, root := range []string{m.Mnt, native} {
		for _, d := range row.dirs {
			if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		for _, f := range row.files {
			writeFile(t, filepath.Join(root, f), original(f))
		}
	}
	before := lastID(t, m.State)

	nativeErr := row.op(native)
	mountErr := row.op(m.Mnt)
	if errnoOf(mountErr) != errnoOf(nativeErr) {
		t.Fatalf("operation through the mount: %v; natively: %v", mountErr, nativeErr)
	}
	if mountErr != nil {
		t.Fatalf("operation: %v", mountErr)
	}
	if d := diffTrees(snapshot(t, m.Mnt), snapshot(t, native)); d != "" {
		t.Errorf("tree through the mount differs from native semantics:\n%s", d)
	}

	evs := eventsFrom(t, m.State, before+1)
	for _, ev := range evs {
		t.Logf("event %d %s %s %s files=%+v", ev.ID, ev.Type, ev.Path, ev.NewPath, ev.Files)
	}
	checkEvents(t, m, evs, true)

	for _, w := range row.preserved {
		ev, f := firstOriginal(evs, w.path)
		if ev == nil {
			t.Errorf("no event lists the preserved original of %s", w.path)
			continue
		}
		if ev.Type != w.typ {
			t.Errorf("event %d preserving %s: type %s, want %s", ev.ID, w.path, ev.Type, w.typ)
		}
		orig := original(w.path)
		if f.Size != int64(len(orig)) || f.XXH64 != journal.Sum(orig) {
			t.Errorf("event %d: original of %s listed with size %d xxh64 %s, want %d %s",
				ev.ID, w.path, f.Size, f.XXH64, len(orig), journal.Sum(orig))
		}
		if p, err := cmEntry(m.CMRoot, f.CM); err != nil {
			t.Error(err)
		} else if got := readFile(t, p); !bytes.Equal(got, orig) {
			t.Errorf("cmroot entry %s of %s: %d bytes differing from the %d original bytes", f.CM, w.path, len(got), len(orig))
		}
	}
	for _, w := range row.written {
		ev, f := lastContent(evs, w.path)
		if ev == nil {
			t.Errorf("no event lists the new content of %s", w.path)
			continue
		}
		if ev.Type != w.typ {
			t.Errorf("event %d with the new content of %s: type %s, want %s", ev.ID, w.path, ev.Type, w.typ)
		}
		fi, err := os.Stat(m.path(w.path))
		if err != nil {
			t.Fatal(err)
		}
		if want := xxhsum(t, m.path(w.path)); f.XXH64 != want || f.Size != fi.Size() {
			t.Errorf("event %d: new content of %s listed with size %d xxh64 %s; the file has %d bytes, xxhsum -H64 %s",
				ev.ID, w.path, f.Size, f.XXH64, fi.Size(), want)
		}
	}
	for _, w := range row.events {
		if findEvent(evs, w) == nil {
			t.Errorf("no %s event for %s %s", w.typ, w.path, w.newPath)
		}
	}
	if w := row.last; w != nil {
		if len(evs) == 0 {
			t.Errorf("no events; want a last %s %s", w.typ, w.path)
		} else if ev := evs[len(evs)-1]; ev.Type != w.typ || ev.Path != w.path {
			t.Errorf("last event %d is %s %s, want %s %s", ev.ID, ev.Type, ev.Path, w.typ, w.path)
		}
		n := 0
		for _, ev := range evs {
			if ev.Type == w.typ {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%d %s events, want one", n, w.typ)
		}
	}
}

// checkEvents checks what must hold for any event: warehouse fields that
// match the path, well-formed checksums, and for every preserved original
// a cmroot entry named after its checksum and size whose content has that
// checksum by xxhsum, and no excluded path. With latest, the newest event
// naming a path that exists now must, if it lists the path's content, list
// its current content (callers without hard links).
func checkEvents(t testing.TB, m *mounted, evs []journal.Event, latest bool) {
	t.Helper()
	var entries []string
	for _, ev := range evs {
		db, table, part := warehouse(ev.Path, isFileEvent(ev.Type))
		if ev.Type == journal.Rename && len(ev.Files) == 0 && (ev.DB != db || ev.Table != table || ev.Partition != part) {
			// A directory moved (a file rename lists its content): a
			// directory's own name is its level.
			db, table, part = warehouse(ev.Path, false)
		}
		if ev.DB != db || ev.Table != table || ev.Partition != part {
			t.Errorf("event %d %s %s: db=%q table=%q partition=%q, want %q %q %q",
				ev.ID, ev.Type, ev.Path, ev.DB, ev.Table, ev.Partition, db, table, part)
		}
		if excluded(ev.Path) && (ev.NewPath == "" || excluded(ev.NewPath)) {
			t.Errorf("event %d %s %s %s: a change within excluded paths is journaled", ev.ID, ev.Type, ev.Path, ev.NewPath)
		}
		for _, f := range ev.Files {
			if !validSum(f.XXH64) {
				t.Errorf("event %d: file %s: xxh64 %q is not 16 lowercase hex digits", ev.ID, f.Path, f.XXH64)
			}
			if f.CM == "" {
				continue
			}
			if want := fmt.Sprintf("%s-%d", f.XXH64, f.Size); f.CM != want {
				t.Errorf("event %d: file %s: cm %q, want %q", ev.ID, f.Path, f.CM, want)
			}
			p, err := cmEntry(m.CMRoot, f.CM)
			if err != nil {
				t.Errorf("event %d: file %s: %v", ev.ID, f.Path, err)
				continue
			}
			fi, err := os.Stat(p)
			if err != nil {
				t.Error(err)
				continue
			}
			if fi.Size() != f.Size {
				t.Errorf("event %d: cm entry %s has %d bytes, listed %d", ev.ID, f.CM, fi.Size(), f.Size)
			}
			entries = append(entries, p)
		}
	}
	sums := xxhsums(t, entries...)
	for _, ev := range evs {
		for _, f := range ev.Files {
			if f.CM == "" {
				continue
			}
			if p, err := cmEntry(m.CMRoot, f.CM); err == nil && sums[p] != f.XXH64 {
				t.Errorf("event %d: cm entry %s of %s: xxhsum -H64 %s, listed %s", ev.ID, f.CM, f.Path, sums[p], f.XXH64)
			}
		}
	}
	if !latest {
		return
	}
	// The newest event that names a path, if it lists new content for it,
	// lists what the path holds now.
	seen := map[string]bool{}
	for i := len(evs) - 1; i >= 0; i-- {
		ev := evs[i]
		for _, f := range ev.Files {
			if f.CM != "" || seen[f.Path] {
				continue
			}
			seen[f.Path] = true
			p := m.path(f.Path)
			fi, err := os.Stat(p)
			if err != nil || !fi.Mode().IsRegular() {
				continue
			}
			if sum := xxhsum(t, p); sum != f.XXH64 || fi.Size() != f.Size {
				t.Errorf("event %d, the newest that names %s, lists it as size %d xxh64 %s; it holds %d bytes, xxhsum -H64 %s",
					ev.ID, f.Path, f.Size, f.XXH64, fi.Size(), sum)
			}
		}
		seen[ev.Path] = true
		seen[ev.NewPath] = true
		for _, f := range ev.Files {
			seen[f.Path] = true
		}
	}
}

// firstOriginal returns the first event listing path as a preserved
// original (cm set).
func firstOriginal(evs []journal.Event, path string) (*journal.Event, *journal.File) {
	for i := range evs {
		for j := range evs[i].Files {
			if f := &evs[i].Files[j]; f.Path == path && f.CM != "" {
				return &evs[i], f
			}
		}
	}
	return nil, nil
}

// lastContent returns the newest event listing path as new content (no
// cm).
func lastContent(evs []journal.Event, path string) (*journal.Event, *journal.File) {
	for i := len(evs) - 1; i >= 0; i-- {
		for j := len(evs[i].Files) - 1; j >= 0; j-- {
			if f := &evs[i].Files[j]; f.Path == path && f.CM == "" {
				return &evs[i], f
			}
		}
	}
	return nil, nil
}

func findEvent(evs []journal.Event, w eventWant) *journal.Event {
	for i := range evs {
		ev := &evs[i]
		if ev.Type == w.typ && ev.Path == w.path && (w.newPath == "" || ev.NewPath == w.newPath) {
			return ev
		}
	}
	return nil
}

// isFileEvent reports whether events of type typ name a file (or a
// directory below the layout levels) rather than a layout directory.
func isFileEvent(typ journal.Type) bool {
	switch typ {
	case journal.Write, journal.Insert, journal.Delete, journal.Truncate, journal.Rename,
		journal.Symlink, journal.Link, journal.Restore:
		return true
	}
	return false
}

// warehouse is an independent reading of the layout rules:
// <db>.db/<table>/<k>=<v>/... with every leading k=v run the partition.
// The levels are directories: a file's own name never is one, so for a
// file the layout is that of its directory.
func warehouse(p string, file bool) (db, table, partition string) {
	parts := strings.Split(strings.Trim(p, "/"), "/")
	if file {
		parts = parts[:len(parts)-1]
		if len(parts) == 0 {
			return "", "", ""
		}
	}
	name, ok := strings.CutSuffix(parts[0], ".db")
	if !ok || name == "" {
		return "", "", ""
	}
	db = name
	if len(parts) < 2 {
		return
	}
	table = parts[1]
	var kv []string
	for _, c := range parts[2:] {
		k, v, ok := strings.Cut(c, "=")
		if !ok || k == "" || v == "" {
			break
		}
		kv = append(kv, c)
	}
	return db, table, strings.Join(kv, "/")
}

// excluded reports whether a path lies below a default-excluded component.
func excluded(p string) bool {
	for _, c := range strings.Split(p, "/") {
		if c == "_temporary" || c == "_SUCCESS" || strings.HasPrefix(c, ".hive-staging") || strings.HasPrefix(c, ".spark-staging") {
			return true
		}
	}
	return false
}

func validSum(s string) bool {
	return len(s) == 16 && strings.Trim(s, "0123456789abcdef") == ""
}

func TestEventsDurableAtClose(t *testing.T) {
	m := mount(t)
	for i := range 20 {
		name := fmt.Sprintf("f%d", i)
		content := fmt.Sprintf("x%d", i)
		script := fmt.Sprintf("echo %s > %s", content, m.path(name))
		if out, err := exec.Command("sh", "-c", script).CombinedOutput(); err != nil {
			t.Fatalf("sh -c %q: %v %s", script, err, out)
		}
		// No waiting: the event must be durable before close() returned.
		evs := events(t, m.State)
		ev, f := lastContent(evs, name)
		if ev == nil {
			t.Fatalf("right after `%s` returned, cmfs events has no event for %s", script, name)
		}
		if ev.Type != journal.Write {
			t.Errorf("event %d for %s: type %s, want %s", ev.ID, name, ev.Type, journal.Write)
		}
		if want := journal.Sum([]byte(content + "\n")); f.XXH64 != want || f.XXH64 != xxhsum(t, m.path(name)) {
			t.Errorf("event %d for %s: xxh64 %s, want %s", ev.ID, name, f.XXH64, want)
		}
	}
	// The same holds when read with the mount gone.
	m.unmount(t)
	if n := len(events(t, m.State)); n < 20 {
		t.Errorf("%d events after unmount, want at least 20", n)
	}
}

func TestStateDirHidden(t *testing.T) {
	m := mount(t)
	writeFile(t, m.path("a"), []byte("a"))
	if err := os.Mkdir(m.path("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	stateBefore := snapshotNames(t, m.State)

	entries, err := os.ReadDir(m.Mnt)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
		if _, err := os.Lstat(m.path(e.Name())); err != nil {
			t.Errorf("readdir lists %s but lstat fails: %v", e.Name(), err)
		}
	}
	if strings.Join(names, ",") != "a,d" {
		t.Errorf("readdir of the mount root: %v, want [a d]", names)
	}
	out, err := exec.Command("ls", "-a", m.Mnt).Output()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), ".cmfs") {
		t.Errorf("ls -a of the mount root shows the state dir: %q", out)
	}

	hidden := m.path(".cmfs")
	attempts := []struct {
		name string
		op   func() error
	}{
		{"stat", func() error { _, err := os.Lstat(hidden); return err }},
		{"stat journal", func() error { _, err := os.Lstat(filepath.Join(hidden, "journal.db")); return err }},
		{"open", func() error {
			f, err := os.Open(hidden)
			if err == nil {
				f.Close()
			}
			return err
		}},
		{"open journal", func() error {
			f, err := os.Open(filepath.Join(hidden, "journal.db"))
			if err == nil {
				f.Close()
			}
			return err
		}},
		{"create", func() error {
			f, err := os.OpenFile(hidden, os.O_CREATE|os.O_WRONLY, 0o644)
			if err == nil {
				f.Close()
			}
			return err
		}},
		{"create inside", func() error { return os.WriteFile(filepath.Join(hidden, "x"), nil, 0o644) }},
		{"mkdir", func() error { return os.Mkdir(hidden, 0o755) }},
		{"rmdir", func() error { return syscall.Rmdir(hidden) }},
		{"unlink journal", func() error { return os.Remove(filepath.Join(hidden, "journal.db")) }},
		{"rename onto", func() error { return os.Rename(m.path("d"), hidden) }},
		{"rename file onto", func() error { return os.Rename(m.path("a"), hidden) }},
		{"rename from", func() error { return os.Rename(hidden, m.path("moved")) }},
		{"symlink onto", func() error { return os.Symlink("a", hidden) }},
		{"link onto", func() error { return os.Link(m.path("a"), hidden) }},
		{"chmod", func() error { return os.Chmod(hidden, 0o777) }},
	}
	for _, a := range attempts {
		if err := a.op(); err == nil {
			t.Errorf("%s on %s through the mount succeeded", a.name, hidden)
		}
	}
	// Still consistent after the attempts.
	entries, err = os.ReadDir(m.Mnt)
	if err != nil {
		t.Fatal(err)
	}
	names = names[:0]
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if strings.Join(names, ",") != "a,d" {
		t.Errorf("readdir of the mount root after the attempts: %v, want [a d]", names)
	}
	if got := readFile(t, m.path("a")); string(got) != "a" {
		t.Errorf("a holds %q", got)
	}
	if fi, err := os.Stat(m.State); err != nil || !fi.IsDir() {
		t.Fatalf("state dir %s after the attempts: %v", m.State, err)
	}
	after := snapshotNames(t, m.State)
	for name := range stateBefore {
		if !after[name] && !strings.HasPrefix(name, "cmroot/") {
			t.Errorf("state dir lost %s", name)
		}
	}
}

// snapshotNames lists the paths below dir.
func snapshotNames(t testing.TB, dir string) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err == nil {
			rel, _ := filepath.Rel(dir, p)
			names[filepath.ToSlash(rel)] = true
		}
		return nil
	})
	return names
}

func TestRestoreRoundTrip(t *testing.T) {
	m := mount(t)
	orig := original(partFile)
	writeFile(t, m.path(partFile), orig)
	newer := []byte("overwritten\n")
	if err := os.WriteFile(m.path(partFile), newer, 0o644); err != nil {
		t.Fatal(err)
	}
	evs := events(t, m.State)
	ev, f := firstOriginal(evs, partFile)
	if ev == nil {
		t.Fatalf("no event preserved the original of %s: %+v", partFile, evs)
	}
	if f.XXH64 != journal.Sum(orig) {
		t.Fatalf("event %d lists the original with xxh64 %s, want %s", ev.ID, f.XXH64, journal.Sum(orig))
	}
	id := fmt.Sprint(ev.ID)

	t.Run("to another dir", func(t *testing.T) {
		to := t.TempDir()
		if res := cmfs(t, "restore", "--state", m.State, "--event", id, "--to", to); res.Code != 0 {
			t.Fatalf("cmfs restore --event %s --to %s: %v", id, to, res)
		}
		if got := readFile(t, filepath.Join(to, filepath.FromSlash(partFile))); !bytes.Equal(got, orig) {
			t.Errorf("restored %s under --to: %d bytes, not the %d original bytes", partFile, len(got), len(orig))
		}
		if got := readFile(t, m.path(partFile)); !bytes.Equal(got, newer) {
			t.Errorf("restore --to changed the live file: %q", got)
		}
	})

	t.Run("in place through the mount", func(t *testing.T) {
		before := lastID(t, m.State)
		if res := cmfs(t, "restore", "--state", m.State, "--event", id); res.Code != 0 {
			t.Fatalf("cmfs restore --event %s: %v", id, res)
		}
		if got := readFile(t, m.path(partFile)); !bytes.Equal(got, orig) {
			t.Fatalf("after restore %s holds %d bytes, not the %d original bytes", partFile, len(got), len(orig))
		}
		if sum := xxhsum(t, m.path(partFile)); sum != journal.Sum(orig) {
			t.Errorf("xxhsum of the restored file %s, want %s", sum, journal.Sum(orig))
		}
		after := eventsFrom(t, m.State, before+1)
		var restore *journal.Event
		for i := range after {
			if after[i].Type == journal.Restore {
				restore = &after[i]
			}
		}
		if restore == nil {
			t.Fatalf("no RESTORE event after the restore through the mount: %+v", after)
		}
		if _, f := lastContent([]journal.Event{*restore}, partFile); f == nil || f.XXH64 != journal.Sum(orig) {
			t.Errorf("RESTORE event %d does not list %s with the restored checksum: %+v", restore.ID, partFile, restore.Files)
		}
		checkEvents(t, m, after, true)
		// The content the restore replaced is preserved in turn.
		if _, err := cmEntry(m.CMRoot, fmt.Sprintf("%s-%d", journal.Sum(newer), len(newer))); err != nil {
			t.Errorf("the content replaced by the restore is not preserved: %v", err)
		}
	})

	t.Run("a deleted partition file", func(t *testing.T) {
		p := partDir + "/part-7"
		data := original(p)
		writeFile(t, m.path(p), data)
		if err := os.Remove(m.path(p)); err != nil {
			t.Fatal(err)
		}
		ev, _ := firstOriginal(events(t, m.State), p)
		if ev == nil || ev.Type != journal.Delete {
			t.Fatalf("no DELETE event preserving %s", p)
		}
		if res := cmfs(t, "restore", "--state", m.State, "--event", fmt.Sprint(ev.ID), p); res.Code != 0 {
			t.Fatalf("cmfs restore --event %d %s: %v", ev.ID, p, res)
		}
		if got := readFile(t, m.path(p)); !bytes.Equal(got, data) {
			t.Errorf("restored %s: %d bytes, not the %d original bytes", p, len(got), len(data))
		}
	})
}

// TestChecksumKeepsAtime: what cmfs reads to checksum new content at
// close, and to preserve an original, leaves the file's access time as
// the writer and every later stat see it — protection is invisible. The
// times are set far in the past through the backing directory while the
// file is open, so that (with relatime) any read would move atime.
func TestChecksumKeepsAtime(t *testing.T) {
	m := mount(t)
	old := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	atime := func(p string) time.Time {
		t.Helper()
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		return time.Unix(st.Atim.Unix())
	}
	for _, tc := range []struct {
		name string
		flag int
	}{
		{"write-only", os.O_WRONLY | os.O_CREATE | os.O_TRUNC},
		{"read-write", os.O_RDWR | os.O_CREATE | os.O_TRUNC},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := strings.ReplaceAll(tc.name, "-", "") + ".dat"
			f, err := os.OpenFile(m.path(name), tc.flag, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteString("content to checksum at close\n"); err != nil {
				t.Fatal(err)
			}
			if err := os.Chtimes(m.backing(name), old, old); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil { // cmfs checksums and journals here
				t.Fatal(err)
			}
			if got := atime(m.backing(name)); !got.Equal(old) {
				t.Errorf("atime after close: %v, want %v (left as set)", got, old)
			}
		})
	}
}
