package at

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// deep returns a relative path of more than n bytes of NAME_MAX components,
// and makes its directories under root with relative mkdirat calls (a
// path that long cannot be made from root's own path).
func deep(t *testing.T, root string, n int) string {
	t.Helper()
	fd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	var parts []string
	for i := 0; len(strings.Join(parts, "/")) <= n; i++ {
		c := strings.Repeat(string(rune('a'+i%26)), 255)
		if err := unix.Mkdirat(fd, c, 0o755); err != nil {
			t.Fatal(err)
		}
		next, err := unix.Openat(fd, c, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			t.Fatal(err)
		}
		fd = next
		parts = append(parts, c)
	}
	unix.Close(fd)
	return strings.Join(parts, "/")
}

func open(t *testing.T, dir string) *Tree {
	t.Helper()
	tr, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

// TestLongerThanPathMax: every call reaches a file whose path from the
// tree's root is more than twice PATH_MAX, where the plain call on the
// joined path fails.
func TestLongerThanPathMax(t *testing.T) {
	root := t.TempDir()
	dir := deep(t, root, 2*pathMax+100)
	tr := open(t, root)
	f := dir + "/f"
	if _, err := unix.Open(filepath.Join(root, f), unix.O_RDONLY, 0); !errors.Is(err, unix.ENAMETOOLONG) {
		t.Fatalf("the plain call on the joined path: %v, want ENAMETOOLONG (the test's premise)", err)
	}
	file, err := tr.Open(f, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o640)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := file.WriteString("hello"); err != nil {
		t.Fatal(err)
	}
	file.Close()
	var st syscall.Stat_t
	if err := tr.Lstat(f, &st); err != nil || st.Size != 5 || st.Mode&0o777 != 0o640 {
		t.Fatalf("lstat: %v, size %d mode %o", err, st.Size, st.Mode&0o777)
	}
	check := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	check("chmod", tr.Chmod(f, 0o600))
	check("lchown", tr.Lchown(f, 0, 0))
	check("truncate", tr.Truncate(f, 2))
	check("utimes", tr.UtimesNano(f, []unix.Timespec{{Sec: 7}, {Sec: 9}}, unix.AT_SYMLINK_NOFOLLOW))
	check("lstat", tr.Lstat(f, &st))
	if st.Size != 2 || st.Mode&0o777 != 0o600 || st.Mtim.Sec != 9 {
		t.Errorf("after chmod, truncate, utimes: size %d mode %o mtime %d", st.Size, st.Mode&0o777, st.Mtim.Sec)
	}
	check("link", tr.Link(f, dir+"/g"))
	check("rename", tr.Rename(dir+"/g", "top", unix.RENAME_NOREPLACE))
	check("symlink", tr.Symlink("f", dir+"/l"))
	target, err := tr.Readlink(dir + "/l")
	check("readlink", err)
	if target != "f" {
		t.Errorf("readlink: %q", target)
	}
	check("mkdir", tr.Mkdir(dir+"/d", 0o755))
	check("mknod", tr.Mknod(dir+"/p", unix.S_IFIFO|0o644, 0))
	var statfs unix.Statfs_t
	check("statfs through WithPath", tr.WithPath(dir, func(p string) error {
		if len(p) >= pathMax {
			t.Errorf("WithPath gave a %d-byte path", len(p))
		}
		return unix.Statfs(p, &statfs)
	}))
	entries, err := tr.ReadDir(dir)
	check("readdir", err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if got := strings.Join(names, " "); got != "d f l p" {
		t.Errorf("readdir: %s, want d f l p", got)
	}
	check("rmdir", tr.Rmdir(dir+"/d"))
	for _, n := range []string{"f", "l", "p"} {
		check("unlink "+n, tr.Unlink(dir+"/"+n))
	}
	if err := tr.Lstat(dir+"/f", &st); !errors.Is(err, unix.ENOENT) {
		t.Errorf("lstat after unlink: %v", err)
	}
	check("lstat the renamed link", tr.Lstat("top", &st))
}

// TestWalkDirDeep: WalkDir visits every entry of a tree deeper than
// PATH_MAX, in lexical order, with paths relative to the root, and
// honours SkipDir.
func TestWalkDirDeep(t *testing.T) {
	root := t.TempDir()
	dir := deep(t, root, pathMax+300)
	tr := open(t, root)
	for _, f := range []string{dir + "/x", "b", "c/y", "c/skip/z"} {
		if err := tr.Mkdir(path.Dir(f), 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
			t.Fatal(err)
		}
		file, err := tr.Open(f, os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		file.Close()
	}
	var got []string
	err := tr.WalkDir("", func(rel string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path.Base(rel) == "skip" {
			return fs.SkipDir
		}
		if !d.IsDir() {
			got = append(got, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{dir + "/x", "b", "c/y"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("walked %d files %q…, want %d", len(got), got, len(want))
	}
	if err := tr.WalkDir("missing", func(rel string, d fs.DirEntry, err error) error { return err }); !errors.Is(err, unix.ENOENT) {
		t.Errorf("walk of a missing root: %v, want ENOENT", err)
	}
}

// TestPathsAroundPathMax: the calls without an *at form (truncate, and
// whatever WithPath serves: cmroot's renames, the xattrs) reach files at
// every length of path around and past PATH_MAX, however the path falls
// into pieces: the path they get always fits in a system call.
func TestPathsAroundPathMax(t *testing.T) {
	root := t.TempDir()
	tr := open(t, root)
	top := 0
	for n := pathMax - len(root) - 40; n < 2*pathMax+300; n += 13 {
		top++
		// Directories of 200-byte names under a top one of its own, so
		// that each length falls into pieces at a different place.
		rel := fmt.Sprintf("t%d", top)
		if err := tr.Mkdir(rel, 0o755); err != nil {
			t.Fatal(err)
		}
		for len(rel) < n-210 {
			rel += "/" + strings.Repeat(string(rune('a'+len(rel)%26)), 200)
			if err := tr.Mkdir(rel, 0o755); err != nil {
				t.Fatalf("mkdir of %d bytes: %v", len(rel), err)
			}
		}
		f := rel + "/" + strings.Repeat("f", max(1, n-len(rel)-1))
		file, err := tr.Open(f, os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatalf("create %d bytes: %v", len(f), err)
		}
		file.Close()
		if err := tr.Truncate(f, 3); err != nil {
			t.Errorf("truncate of a %d-byte path (root %d bytes): %v", len(f), len(root), err)
		}
		err = tr.WithPath(f, func(p string) error {
			if len(p) >= pathMax {
				return fmt.Errorf("a %d-byte path", len(p))
			}
			return unix.Rename(p, p+"2")
		})
		if err != nil {
			t.Errorf("rename through WithPath of a %d-byte path: %v", len(f), err)
		}
	}
}
