package integration

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cmfs-project/cmfs/journal"
)

// A full backing filesystem (DESIGN.md §3, I4 and I3): with the backing
// directory, the state directory, the journal and cmroot on one small
// tmpfs filled to the last byte, every operation of the protection table
// either succeeds and is journaled, or fails and changes nothing that is
// not journaled. After every attempt the journal's last word about every
// path must equal the tree.

// enospcDir is a partition directory with a long name: its events are
// large, so the journal must grow after a few of them.
var enospcDir = "sales.db/orders/dt=" + strings.Repeat("x", 240)

// enospcReserve is the journal reserve of these mounts: the smallest, so
// that a few dozen events exhaust it.
const enospcReserve = "128KiB"

// fillUp fills the file system holding dir to its last byte with a file
// next to dir, outside the mount, and returns its path.
func fillUp(t *testing.T, dir string) string {
	t.Helper()
	filler := filepath.Join(filepath.Dir(dir), "filler")
	f, err := os.OpenFile(filler, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	for len(chunk) > 0 {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("fill %s: %v", filler, err)
			}
			chunk = chunk[:len(chunk)/2]
		}
	}
	return filler
}

// fileState is a file's content as the journal or the tree has it.
type fileState struct {
	size int64
	sum  string
}

// treeState returns every regular file the mount shows, outside scratch
// space, with its content.
func treeState(t *testing.T, root string) map[string]fileState {
	t.Helper()
	st := map[string]fileState{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if rel != "." && excluded(rel) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		st[rel] = fileState{int64(len(b)), journal.Sum(b)}
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", root, err)
	}
	return st
}

// checkMountJournal fails t unless the journal's latest word about every
// file of m equals what the tree holds (I3), saying after what.
func checkMountJournal(t *testing.T, m *mounted, what string) {
	t.Helper()
	for _, d := range journalTreeViolations(t, m.Backing, m.State) {
		t.Errorf("after %s, the journal does not match the tree: %s", what, d)
	}
}

// enospcRow is one row of the protection table, run against a full file
// system: op changes victim i (created before the fill with content(i)).
type enospcRow struct {
	name string
	// dirs says each victim is a directory of files (rmdir, rm -r).
	dirs bool
	// sources says each victim has a source file to rename over it.
	sources bool
	// create says the victims do not exist yet (create+write+close).
	create bool
	op     func(p string, i int) error
}

func enospcRows() []enospcRow {
	return []enospcRow{
		{name: "unlink", op: func(p string, i int) error { return os.Remove(p) }},
		{name: "rename over", sources: true, op: func(p string, i int) error { return os.Rename(p+".src", p) }},
		{name: "open O_TRUNC", op: func(p string, i int) error { return writeClose(p, os.O_WRONLY|os.O_TRUNC, []byte("x\n")) }},
		{name: "truncate smaller", op: func(p string, i int) error { return os.Truncate(p, 10) }},
		{name: "in-place write", op: func(p string, i int) error {
			f, err := os.OpenFile(p, os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			_, err = f.WriteAt([]byte("X"), 1)
			return errors.Join(err, f.Close())
		}},
		{name: "rm -r", dirs: true, op: func(p string, i int) error { return os.RemoveAll(p) }},
		{name: "create write close", create: true, op: func(p string, i int) error {
			return writeClose(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, enospcContent(i))
		}},
	}
}

// writeClose opens p with flags, writes data and closes it, returning the
// first error.
func writeClose(p string, flags int, data []byte) error {
	f, err := os.OpenFile(p, flags, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	return errors.Join(err, f.Close())
}

func enospcContent(i int) []byte {
	return bytes.Repeat([]byte(fmt.Sprintf("victim %d\n", i)), 50+i)
}

// TestENOSPCBacking runs every row of the protection table on a backing
// tmpfs filled to the last byte, with the state directory (journal,
// cmroot, in-flight table) on it too.
func TestENOSPCBacking(t *testing.T) {
	requireFUSE(t)
	const victims = 120
	for _, row := range enospcRows() {
		t.Run(row.name, func(t *testing.T) {
			backing := filepath.Join(mountTmpfs(t, "8m"), "backing")
			if err := os.Mkdir(backing, 0o755); err != nil {
				t.Fatal(err)
			}
			m := mountAt(t, backing, "--journal-reserve", enospcReserve)
			victim := func(i int) string { return path.Join(enospcDir, fmt.Sprintf("part-%03d", i)) }
			for i := range victims {
				v := victim(i)
				switch {
				case row.create:
					if err := os.MkdirAll(m.path(path.Dir(v)), 0o755); err != nil {
						t.Fatal(err)
					}
				case row.dirs:
					writeFile(t, m.path(v+"/a"), enospcContent(i))
					writeFile(t, m.path(v+"/b"), enospcContent(i+1000))
				default:
					writeFile(t, m.path(v), enospcContent(i))
				}
				if row.sources {
					writeFile(t, m.path(v+".src"), enospcContent(i+2000))
				}
			}
			checkMountJournal(t, m, "the setup")
			filler := fillUp(t, backing)
			t.Logf("filled: %d bytes free", freeBytes(t, backing))

			failed := 0
			for i := 0; i < victims && failed < 3; i++ {
				v := victim(i)
				before := treeState(t, m.Mnt)
				err := row.op(m.path(v), i)
				what := fmt.Sprintf("%s of %s (attempt %d: %v)", row.name, path.Base(v), i, errnoOf(err))
				if err != nil {
					if failed == 0 {
						t.Logf("%d done, then %s", i, what)
					}
					failed++
					if !errors.Is(err, syscall.ENOSPC) {
						t.Errorf("%s: want ENOSPC", what)
					}
					// A refused operation changed nothing; one that failed
					// part way (a short write after the open, rm -r after
					// some files) must have journaled what it did.
					if after := treeState(t, m.Mnt); refused(err) && !row.dirs && after[v] != before[v] {
						t.Errorf("%s: refused, but %s held %d bytes %s, now %d bytes %s", what, path.Base(v), before[v].size, before[v].sum, after[v].size, after[v].sum)
					}
				}
				checkMountJournal(t, m, what)
				if t.Failed() {
					break
				}
			}
			if failed == 0 {
				t.Errorf("%d %s operations on a full file system all succeeded: the test did not reach ENOSPC", victims, row.name)
			}
			// With room again, the mount works as before.
			if err := os.Remove(filler); err != nil {
				t.Fatal(err)
			}
			v := victim(victims - 1)
			if err := row.op(m.path(v), victims-1); err != nil {
				t.Errorf("%s of %s with room again: %v", row.name, v, err)
			}
			checkMountJournal(t, m, row.name+" with room again")
		})
	}
}

// TestENOSPCRenameOverFill is defect (a): `mv -f b fill` on a full file
// system must fail with nothing changed, or succeed journaled.
func TestENOSPCRenameOverFill(t *testing.T) {
	requireFUSE(t)
	backing := filepath.Join(mountTmpfs(t, "8m"), "backing")
	if err := os.Mkdir(backing, 0o755); err != nil {
		t.Fatal(err)
	}
	m := mountAt(t, backing, "--journal-reserve", enospcReserve)
	for i := range 150 {
		b, f := fmt.Sprintf("%s/b-%d", enospcDir, i), fmt.Sprintf("%s/fill-%d", enospcDir, i)
		writeFile(t, m.path(b), enospcContent(i))
		writeFile(t, m.path(f), enospcContent(i+100))
	}
	fillUp(t, backing)
	for i := range 150 {
		b, f := fmt.Sprintf("%s/b-%d", enospcDir, i), fmt.Sprintf("%s/fill-%d", enospcDir, i)
		err := os.Rename(m.path(b), m.path(f))
		if err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Errorf("mv -f b fill: %v, want ENOSPC", err)
			}
			if got := readFile(t, m.path(f)); !bytes.Equal(got, enospcContent(i+100)) {
				t.Errorf("mv -f b-%d fill-%d failed (%v), but fill no longer holds its content", i, i, errnoOf(err))
			}
			if got, rerr := os.ReadFile(m.path(b)); rerr != nil || !bytes.Equal(got, enospcContent(i)) {
				t.Errorf("mv -f b-%d fill-%d failed (%v), but b no longer holds its content (%v)", i, i, errnoOf(err), rerr)
			}
		}
		checkMountJournal(t, m, fmt.Sprintf("mv -f b-%d fill-%d (%v)", i, i, errnoOf(err)))
		if err != nil || t.Failed() {
			return
		}
	}
	t.Errorf("150 renames on a full file system all succeeded: the test did not reach ENOSPC")
}

// TestENOSPCPartialWrite is defects (b) and (c): an O_TRUNC overwrite on
// a nearly full file system whose write runs out of room part way must
// leave the journal saying what the file holds.
func TestENOSPCPartialWrite(t *testing.T) {
	requireFUSE(t)
	backing := filepath.Join(mountTmpfs(t, "8m"), "backing")
	if err := os.Mkdir(backing, 0o755); err != nil {
		t.Fatal(err)
	}
	m := mountAt(t, backing)
	p := partDir + "/part-2"
	writeFile(t, m.path(p), original(p))
	filler := fillUp(t, backing)
	// Leave room for about 300 KiB.
	if err := os.Truncate(filler, mustSize(t, filler)-300<<10); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(m.path(p), os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Logf("open O_TRUNC refused: %v", err)
		if !errors.Is(err, syscall.ENOSPC) {
			t.Errorf("open O_TRUNC: %v, want ENOSPC", err)
		}
	} else {
		n, werr := f.Write(make([]byte, 1<<20))
		cerr := f.Close()
		t.Logf("wrote %d bytes (%v), close: %v", n, werr, cerr)
		if !errors.Is(werr, syscall.ENOSPC) {
			t.Errorf("write of 1 MiB with 300 KiB free: %v, want ENOSPC", werr)
		}
	}
	checkMountJournal(t, m, "a write that ran out of room")

	// echo x > part-2, with no room at all.
	fillUp(t, backing)
	err = writeClose(m.path(p), os.O_WRONLY|os.O_TRUNC, []byte("x\n"))
	t.Logf("echo x > part-2 on a full file system: %v", err)
	checkMountJournal(t, m, fmt.Sprintf("echo x > part-2 (%v)", err))
}

// refused says whether err came from the operation itself (open, unlink,
// rename, truncate), not from a write or close after a successful open.
func refused(err error) bool {
	var pe *fs.PathError
	return !errors.As(err, &pe) || (pe.Op != "write" && pe.Op != "close")
}

func mustSize(t *testing.T, p string) int64 {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// TestENOSPCRemount: a mount killed with SIGKILL leaves cmroot's index
// unclean, and the disk then fills to the last byte. The remount must come
// up (cmroot's index rebuilt in memory, the file system having no room for
// it), a delete must either be journaled or be refused with nothing changed
// (the killed mount may have left the journal's reserve short: whether it
// did depends on how far its background apply got), and `cmfs fsck` must
// pass after the unmount on the still-full disk. Once there is room again,
// the delete goes through.
func TestENOSPCRemount(t *testing.T) {
	requireFUSE(t)
	backing := filepath.Join(mountTmpfs(t, "8m"), "backing")
	if err := os.Mkdir(backing, 0o755); err != nil {
		t.Fatal(err)
	}
	m := mountAt(t, backing, "--journal-reserve", enospcReserve)
	const n = 400
	for i := range n {
		writeFile(t, m.path(fmt.Sprintf("db.db/t/p=1/f-%d", i)), enospcContent(i))
	}
	for i := range n - 2 {
		if err := os.Remove(m.path(fmt.Sprintf("db.db/t/p=1/f-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	m.crash(t)
	filler := fillUp(t, backing)

	m2 := mountAt(t, backing, "--journal-reserve", enospcReserve)
	last := fmt.Sprintf("db.db/t/p=1/f-%d", n-1)
	removed := removeOnFullDisk(t, m2, last, enospcContent(n-1))
	checkMountJournal(t, m2, fmt.Sprintf("rm after a remount on a full disk (removed: %v)", removed))
	m2.unmount(t)
	verifyJournal(t, m2.State)
	if res := cmfs(t, "fsck", "--state", m2.State); res.Code != 0 {
		t.Fatalf("cmfs fsck on the full disk: %v", res)
	}
	if removed {
		return
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	m3 := mountAt(t, backing, "--journal-reserve", enospcReserve)
	if err := os.Remove(m3.path(last)); err != nil {
		t.Fatalf("rm with room again: %v", err)
	}
	if got := events(t, m3.State); len(got) == 0 || got[len(got)-1].Path != last {
		t.Errorf("the rm with room again was not the journal's last event")
	}
}

// removeOnFullDisk removes rel through m and reports whether it did. A
// refusal must be ENOSPC, and leave the file as it was (content want).
func removeOnFullDisk(t *testing.T, m *mounted, rel string, want []byte) bool {
	t.Helper()
	err := os.Remove(m.path(rel))
	if err == nil {
		if got := events(t, m.State); len(got) == 0 || got[len(got)-1].Path != rel {
			t.Errorf("rm %s succeeded, but it is not the journal's last event", rel)
		}
		return true
	}
	t.Logf("rm %s refused: %v", rel, err)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("rm %s: %v, want ENOSPC", rel, err)
	}
	if got, rerr := os.ReadFile(m.path(rel)); rerr != nil || !bytes.Equal(got, want) {
		t.Errorf("rm %s refused (%v), but the file no longer holds its content (%v)", rel, errnoOf(err), rerr)
	}
	return false
}
