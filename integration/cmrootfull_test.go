package integration

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
)

// mountTmpfs mounts a tmpfs of the given size (mount(8) syntax) on a fresh
// directory, unmounted in cleanup.
func mountTmpfs(t *testing.T, size string, opts ...string) string {
	t.Helper()
	requireFUSE(t)
	dir := filepath.Join(t.TempDir(), "tmpfs")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	o := "size=" + size
	for _, x := range opts {
		o += "," + x
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", o, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount -t tmpfs -o %s: %v %s", o, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v %s", dir, err, out)
			exec.Command("umount", "-l", dir).Run()
		}
	})
	return dir
}

// freeBytes is what an unprivileged writer may still put on the file
// system holding dir.
func freeBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * st.Bsize
}

func TestCMRootFull(t *testing.T) {
	requireFUSE(t)
	cmroot := filepath.Join(mountTmpfs(t, "1m"), "cmroot")
	m := mount(t, "--cmroot", cmroot)

	big := make([]byte, 300<<10)
	for i := range big {
		big[i] = byte(i*7 + i>>8)
	}
	files := []string{"sales.db/orders/dt=1/part-0", "sales.db/orders/dt=1/part-1", "notes/big"}
	for _, f := range files {
		writeFile(t, m.path(f), big[:len(big)-len(f)])
	}
	// Fill the tmpfs, leaving less room than one file needs.
	filler := filepath.Join(filepath.Dir(cmroot), "filler")
	fill := freeBytes(t, cmroot) - 100<<10
	if fill < 0 {
		fill = 0
	}
	if err := os.WriteFile(filler, make([]byte, fill), 0o644); err != nil {
		t.Fatalf("fill the tmpfs: %v", err)
	}
	t.Logf("cmroot tmpfs: %d bytes free", freeBytes(t, cmroot))

	before := lastID(t, m.State)
	ops := []struct {
		name string
		op   func(p string) error
	}{
		{"unlink", os.Remove},
		{"open O_TRUNC", func(p string) error {
			f, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
			if err == nil {
				_, err = f.Write([]byte("replacement"))
				f.Close()
			}
			return err
		}},
		{"truncate", func(p string) error { return os.Truncate(p, 10) }},
		{"rename over", func(p string) error {
			src := p + ".new"
			if err := os.WriteFile(src, []byte("x"), 0o644); err != nil {
				return err
			}
			defer os.Remove(src)
			return os.Rename(src, p)
		}},
		{"in-place write", func(p string) error {
			f, err := os.OpenFile(p, os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			_, err = f.WriteAt([]byte("X"), 0)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			return err
		}},
	}
	for _, f := range files {
		want := big[:len(big)-len(f)]
		for _, o := range ops {
			err := o.op(m.path(f))
			if !errors.Is(err, syscall.ENOSPC) {
				t.Errorf("%s of %s with cmroot full: %v, want ENOSPC", o.name, f, err)
			}
			if got, err := os.ReadFile(m.path(f)); err != nil || !bytes.Equal(got, want) {
				t.Errorf("after the failed %s, %s holds %d bytes (%v), want its %d original bytes", o.name, f, len(got), err, len(want))
			}
			checkMountJournal(t, m, o.name+" of "+f+" with cmroot full")
		}
	}
	// rm -r of the partition: every file inside is refused, so the
	// directory stays.
	dir := filepath.Dir(m.path(files[0]))
	if err := os.RemoveAll(dir); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("rm -r %s with cmroot full: %v, want ENOSPC", dir, err)
	}
	for _, f := range files[:2] {
		if got, err := os.ReadFile(m.path(f)); err != nil || !bytes.Equal(got, big[:len(big)-len(f)]) {
			t.Errorf("after the failed rm -r, %s holds %d bytes (%v), want its original", f, len(got), err)
		}
	}
	checkMountJournal(t, m, "rm -r with cmroot full")
	// New content needs nothing from cmroot: create+write+close works.
	if err := writeClose(m.path("sales.db/orders/dt=1/part-new"), os.O_WRONLY|os.O_CREATE|os.O_EXCL, []byte("new\n")); err != nil {
		t.Errorf("create+write+close with cmroot full: %v", err)
	}
	checkMountJournal(t, m, "create+write+close with cmroot full")
	// No event claims to have preserved what the failed operations left.
	for _, ev := range eventsFrom(t, m.State, before+1) {
		for _, fl := range ev.Files {
			if fl.CM != "" && slices.Contains(files, fl.Path) {
				t.Errorf("event %d %s %s preserves %s although the operation failed", ev.ID, ev.Type, ev.Path, fl.Path)
			}
		}
	}

	// With room again, the delete goes through and preserves.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(m.path(files[0])); err != nil {
		t.Fatalf("unlink with cmroot free again: %v", err)
	}
	evs := events(t, m.State)
	ev, f := firstOriginal(evs, files[0])
	if ev == nil {
		t.Fatalf("no event preserves %s", files[0])
	}
	p, err := cmEntry(m.CMRoot, f.CM)
	if err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, p); !bytes.Equal(got, big[:len(big)-len(files[0])]) {
		t.Errorf("cmroot entry %s does not hold the original", f.CM)
	}
	checkEvents(t, m, evs, true)
}
