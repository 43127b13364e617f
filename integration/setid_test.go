package integration

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestWritesAskNoXattr: 4 KiB writes through the mount cost the daemon
// nothing per write. Without FUSE_HANDLE_KILLPRIV_V2 the kernel asks the
// daemon for security.capability before every write (GETXATTR, to know
// whether the write must drop file capabilities), a round trip that cost
// random writes four fifths of their speed.
func TestWritesAskNoXattr(t *testing.T) {
	requireFUSE(t)
	backing := filepath.Join(t.TempDir(), "backing")
	if err := os.Mkdir(backing, 0o755); err != nil {
		t.Fatal(err)
	}
	mp := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(mp, 0o755); err != nil {
		t.Fatal(err)
	}
	requests := filepath.Join(t.TempDir(), "requests.log")
	mount := startForeground(t, backing, mp, "CMFS_FUSE_DEBUG="+requests)
	const writes = 512
	f, err := os.Create(filepath.Join(mp, "f"))
	if err != nil {
		t.Fatal(err)
	}
	block := bytes.Repeat([]byte("w"), 4096)
	for i := range writes {
		if _, err := f.WriteAt(block, int64(i%64)*4096); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	mount.kill()
	mount.wait(t)
	log, err := os.ReadFile(requests)
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(log, []byte(": GETXATTR ")); n > 4 {
		t.Errorf("%d writes through the mount made %d GETXATTR requests, want a few at most", writes, n)
	}
}

// setIDFile is one file of TestSetIDBits: its mode, and what the
// unprivileged caller (or root) does to it.
type setIDFile struct {
	name string
	mode os.FileMode // with os.ModeSetuid, os.ModeSetgid
	root bool        // root acts, not the unprivileged caller
	act  string      // shell, with $F the file
}

var setIDFiles = []setIDFile{
	{"write-suid", 0o777 | os.ModeSetuid, false, `printf y | dd of="$F" conv=notrunc status=none`},
	{"append-sgid", 0o777 | os.ModeSetgid, false, `printf y >> "$F"`},
	{"append-both", 0o777 | os.ModeSetuid | os.ModeSetgid, false, `printf y >> "$F"`},
	{"otrunc-suid", 0o777 | os.ModeSetuid, false, `printf z > "$F"`},
	{"truncate-sgid", 0o777 | os.ModeSetgid, false, `truncate -s 1 "$F"`},
	{"open-only-suid", 0o777 | os.ModeSetuid, false, `exec 3<>"$F"`},
	{"root-append-suid", 0o777 | os.ModeSetuid, true, `printf y >> "$F"`},
	{"root-otrunc-sgid", 0o777 | os.ModeSetgid, true, `printf z > "$F"`},
}

// TestSetIDBits: writes, O_TRUNC and truncate by a caller without
// CAP_FSETID clear a file's set-user-ID bit, and its set-group-ID bit
// where the group may execute it, through the mount as in a native
// directory; root's keep them, and so does an open that writes nothing.
// With FUSE_HANDLE_KILLPRIV_V2 the kernel leaves this to the daemon, and
// a write it hands to the kernel (passthrough) never reaches the daemon.
func TestSetIDBits(t *testing.T) {
	requireFUSE(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root: the files belong to root and another user writes them")
	}
	cred := testUser(t)
	base, native, m := sharedMount(t)
	modes := func(dir string) map[string]string {
		for _, f := range setIDFiles {
			p := filepath.Join(dir, f.name)
			if err := os.WriteFile(p, []byte("content\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(p, f.mode); err != nil {
				t.Fatal(err)
			}
		}
		for _, f := range setIDFiles {
			script := fmt.Sprintf("F=%q; %s", filepath.Join(dir, f.name), f.act)
			var res result
			if f.root {
				res = runTool(t, 30*time.Second, "sh", "-c", script)
			} else {
				res = runAs(t, cred, base, "/bin/sh", "-c", script)
			}
			if res.Code != 0 {
				t.Fatalf("%s in %s: %v", f.name, dir, res)
			}
		}
		got := map[string]string{}
		for _, f := range setIDFiles {
			var st syscall.Stat_t
			if err := syscall.Stat(filepath.Join(dir, f.name), &st); err != nil {
				t.Fatal(err)
			}
			got[f.name] = fmt.Sprintf("%04o", st.Mode&0o7777)
		}
		return got
	}
	want, got := modes(native), modes(m.Mnt)
	var diffs []string
	for _, f := range setIDFiles {
		if got[f.name] != want[f.name] {
			diffs = append(diffs, fmt.Sprintf("%s (%s): mode %s through the mount, %s natively", f.name, f.act, got[f.name], want[f.name]))
		}
	}
	if len(diffs) > 0 {
		t.Errorf("set-ID bits differ from a native directory:\n  %s", strings.Join(diffs, "\n  "))
	}
	if want["write-suid"] != "0777" {
		t.Errorf("natively a write by uid %d leaves mode %s: the test cannot tell", cred.Uid, want["write-suid"])
	}
}

// sharedMount makes, where another user can reach them (t.TempDir's
// directories are 0700), a directory base holding a native directory and
// the backing directory of a mount that allows other users.
func sharedMount(t *testing.T) (base, native string, m *mounted) {
	t.Helper()
	base, err := os.MkdirTemp("", "cmfs-shared-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	native, backing := filepath.Join(base, "native"), filepath.Join(base, "backing")
	for _, d := range []string{base, native, backing} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	m = mountAt(t, backing, "-o", "allow_other")
	// The mount point's directory and the test's, made 0700.
	for _, d := range []string{filepath.Dir(m.Mnt), filepath.Dir(filepath.Dir(m.Mnt))} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return base, native, m
}

// TestSetIDHandlesShareAnInode: a set-ID file's handle for writing, which
// the kernel does not pass through, shares the inode with handles it does
// pass through; opening, closing and reopening them in any order works.
// go-fuse counts the kernel's backing file per inode and gives it up at
// every handle's release: a handle that took no count made a later open
// fail with EIO.
func TestSetIDHandlesShareAnInode(t *testing.T) {
	m := mount(t)
	p := m.path("setid")
	writeFile(t, p, []byte("content\n"))
	if err := os.Chmod(p, 0o755|os.ModeSetuid); err != nil {
		t.Fatal(err)
	}
	open := func(flag int) *os.File {
		t.Helper()
		f, err := os.OpenFile(p, flag, 0)
		if err != nil {
			t.Fatalf("open %s (flags %#x): %v", p, flag, err)
		}
		t.Cleanup(func() { f.Close() }) // before the unmount, on failure
		return f
	}
	w := open(os.O_RDWR) // not passed through
	r := open(os.O_RDONLY)
	w.Close()
	r2 := open(os.O_RDONLY)
	w2 := open(os.O_WRONLY)
	r.Close()
	r3 := open(os.O_RDONLY)
	for _, f := range []*os.File{r2, r3} {
		b := make([]byte, 7)
		if _, err := f.ReadAt(b, 0); err != nil || string(b) != "content" {
			t.Errorf("read %q, %v", b, err)
		}
	}
	for _, f := range []*os.File{r2, w2, r3} {
		f.Close()
	}
	open(os.O_RDWR).Close()
}

// TestSetGIDDirectory: what root and another user make (a file, a
// directory, a symlink, a fifo) in a set-group-ID directory takes the directory's
// group, as natively, and a directory made there is set-group-ID itself;
// outside one it takes the maker's group. cmfs makes every file as root
// and then gives it its maker's owner: it gave a file the maker's group
// even in a set-group-ID directory.
func TestSetGIDDirectory(t *testing.T) {
	requireFUSE(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root: another user makes files, and a directory gets a group root is in")
	}
	cred := testUser(t)
	const group = 100 // not root's group, nor the test user's
	if cred.Gid == group {
		t.Skipf("the test user's group is %d", group)
	}
	base, native, m := sharedMount(t)
	makes := func(dir string) map[string]string {
		for _, d := range []struct {
			name string
			mode os.FileMode
		}{{"sgid", 0o777 | os.ModeSetgid}, {"plain", 0o777}} {
			p := filepath.Join(dir, d.name)
			if err := os.Mkdir(p, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(p, 0, group); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(p, d.mode); err != nil {
				t.Fatal(err)
			}
		}
		script := `cd "$2" || exit 1
		for d in sgid plain; do
			echo x > $d/$1-file && mkdir $d/$1-dir && ln -s target $d/$1-link && mkfifo $d/$1-fifo || exit 1
		done`
		if res := runTool(t, 30*time.Second, "sh", "-c", script, "sh", "root", dir); res.Code != 0 {
			t.Fatalf("as root in %s: %v", dir, res)
		}
		if res := runAs(t, cred, base, "/bin/sh", "-c", script, "sh", "user", dir); res.Code != 0 {
			t.Fatalf("as uid %d in %s: %v", cred.Uid, dir, res)
		}
		got := map[string]string{}
		for _, d := range []string{"sgid", "plain"} {
			for _, who := range []string{"root", "user"} {
				for _, kind := range []string{"file", "dir", "link", "fifo"} {
					name := fmt.Sprintf("%s/%s-%s", d, who, kind)
					var st syscall.Stat_t
					if err := syscall.Lstat(filepath.Join(dir, name), &st); err != nil {
						t.Fatal(err)
					}
					got[name] = fmt.Sprintf("%d:%d %04o", st.Uid, st.Gid, st.Mode&0o7777)
				}
			}
		}
		return got
	}
	want, got := makes(native), makes(m.Mnt)
	var diffs []string
	for name, w := range want {
		if got[name] != w {
			diffs = append(diffs, fmt.Sprintf("%s: %s through the mount, %s natively", name, got[name], w))
		}
	}
	sort.Strings(diffs)
	if len(diffs) > 0 {
		t.Errorf("owners differ from a native directory:\n  %s", strings.Join(diffs, "\n  "))
	}
	if w := want["sgid/user-file"]; !strings.HasPrefix(w, fmt.Sprintf("%d:%d ", cred.Uid, group)) {
		t.Errorf("natively a file by uid %d in a set-group-ID directory of group %d is %s: the test cannot tell", cred.Uid, group, w)
	}
}
