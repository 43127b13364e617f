package integration

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/cmfs-project/cmfs/internal/lazyfs"
	"github.com/cmfs-project/cmfs/journal"
)

// mountLazy mounts a lazyfs over a fresh directory, served by a child
// process of its own; cleanup unmounts it (after the cleanups registered
// later, such as a cmfs mount on it).
func mountLazy(t testing.TB) *lazyMount {
	t.Helper()
	requireFUSE(t)
	under := filepath.Join(t.TempDir(), "under")
	mnt := filepath.Join(t.TempDir(), "lazy")
	for _, d := range []string{under, mnt} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	l, err := startLazy(under, mnt)
	if err != nil {
		t.Fatal(err)
	}
	live.Store(mnt, true)
	t.Cleanup(func() {
		if err := l.Unmount(); err != nil {
			t.Errorf("lazyfs unmount: %v", err)
		}
		live.Delete(mnt)
	})
	return l
}

// crashLazy crashes l, failing t if it cannot.
func crashLazy(t testing.TB, l *lazyMount) {
	t.Helper()
	if err := l.Crash(); err != nil {
		t.Fatalf("lazyfs crash: %v", err)
	}
}

// The environment that makes the test binary a lazyfs server
// (lazyServeChild) of the directory under, mounted at mnt.
const (
	lazyUnderEnv = "CMFS_TEST_LAZYFS_UNDER"
	lazyMntEnv   = "CMFS_TEST_LAZYFS_MNT"
)

// lazyMount is a lazyfs mount served by a child process (the test binary
// again, as lazyServeChild), driven by one command a line on its stdin,
// each answered "ok" or an error on its stdout. Not in this process: a
// process that serves a FUSE mount and also touches it can stall on
// itself — a page fault on a file of the mount (bbolt maps the journal)
// stops the garbage collector's world, and with it the server that must
// answer the fault.
type lazyMount struct {
	mnt string
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

func startLazy(under, mnt string) (*lazyMount, error) {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), lazyUnderEnv+"="+under, lazyMntEnv+"="+mnt)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	l := &lazyMount{mnt: mnt, cmd: cmd, in: in, out: bufio.NewReader(out)}
	if err := l.answer(); err != nil {
		in.Close()
		cmd.Wait()
		return nil, fmt.Errorf("lazyfs mount: %w", err)
	}
	return l, nil
}

// Mountpoint returns where l is mounted.
func (l *lazyMount) Mountpoint() string { return l.mnt }

// Crash simulates a power failure (lazyfs.FS.Crash) in the server.
func (l *lazyMount) Crash() error { return l.do("crash") }

// Unmount shuts the server down cleanly (lazyfs.FS.Unmount) and waits for
// it to exit.
func (l *lazyMount) Unmount() error {
	err := l.do("unmount")
	l.in.Close()
	return errors.Join(err, l.cmd.Wait())
}

func (l *lazyMount) do(command string) error {
	if _, err := fmt.Fprintln(l.in, command); err != nil {
		return fmt.Errorf("lazyfs %s: %w", command, err)
	}
	if err := l.answer(); err != nil {
		return fmt.Errorf("lazyfs %s: %w", command, err)
	}
	return nil
}

// answer reads the server's answer to the last command.
func (l *lazyMount) answer() error {
	line, err := l.out.ReadString('\n')
	if err != nil {
		return fmt.Errorf("no answer from the server: %w", err)
	}
	if line = strings.TrimSpace(line); line != "ok" {
		return errors.New(line)
	}
	return nil
}

// lazyServeChild serves a lazyfs mount for its parent (lazyMount) until
// told to unmount, or until its stdin closes because the parent is gone.
func lazyServeChild(under, mnt string) int {
	reply := func(err error) {
		if err != nil {
			fmt.Println(strings.ReplaceAll(err.Error(), "\n", "; "))
			return
		}
		fmt.Println("ok")
	}
	l, err := lazyfs.Mount(under, mnt)
	reply(err)
	if err != nil {
		return 1
	}
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		switch sc.Text() {
		case "crash":
			reply(l.Crash())
		case "unmount":
			reply(l.Unmount())
			return 0
		default:
			reply(fmt.Errorf("unknown command %q", sc.Text()))
		}
	}
	l.Unmount()
	return 0
}

func syncFile(t testing.TB, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		t.Fatalf("fsync %s: %v", path, err)
	}
}

func appendFile(t testing.TB, path string, data []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// wantContent checks path's size and content, by stat and by read.
func wantContent(t testing.TB, path string, want []byte) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatalf("stat %s: %v", path, err)
	}
	got := readFile(t, path)
	if fi.Size() != int64(len(want)) || !bytes.Equal(got, want) {
		t.Errorf("%s: stat size %d, holds %q; want %q", path, fi.Size(), head(got), head(want))
	}
}

func head(b []byte) []byte { return b[:min(len(b), 64)] }

func TestLazyFS(t *testing.T) {
	l := mountLazy(t)
	p := func(name string) string { return filepath.Join(l.Mountpoint(), name) }
	big := bytes.Repeat([]byte("0123456789abcdef"), 1000) // 16000 bytes: pages and a tail

	// Each case runs before (the mount is live) and after a crash.
	cases := []struct {
		name          string
		before        func(t *testing.T, f string)
		live, durable []byte
	}{
		{"write without fsync is lost",
			func(t *testing.T, f string) { writeFile(t, f, []byte("one\n")) },
			[]byte("one\n"), nil},
		{"write and fsync is kept",
			func(t *testing.T, f string) { writeFile(t, f, big); syncFile(t, f) },
			big, big},
		{"fdatasync is enough",
			func(t *testing.T, f string) {
				fd, err := syscall.Open(f, syscall.O_WRONLY|syscall.O_CREAT, 0o644)
				if err != nil {
					t.Fatal(err)
				}
				defer syscall.Close(fd)
				syscall.Write(fd, []byte("data"))
				if err := syscall.Fdatasync(fd); err != nil {
					t.Fatal(err)
				}
			},
			[]byte("data"), []byte("data")},
		{"append without fsync comes back at the synced size",
			func(t *testing.T, f string) {
				writeFile(t, f, []byte("first\n"))
				syncFile(t, f)
				appendFile(t, f, []byte("second\n"))
			},
			[]byte("first\nsecond\n"), []byte("first\n")},
		{"overwrite with > without fsync",
			func(t *testing.T, f string) {
				writeFile(t, f, big)
				syncFile(t, f)
				writeFile(t, f, []byte("bye\n"))
			},
			[]byte("bye\n"), big},
		{"truncate then extend reads zeros, synced",
			func(t *testing.T, f string) {
				writeFile(t, f, big)
				syncFile(t, f)
				if err := os.Truncate(f, 10); err != nil {
					t.Fatal(err)
				}
				if err := os.Truncate(f, 5000); err != nil {
					t.Fatal(err)
				}
				syncFile(t, f)
			},
			append(bytes.Clone(big[:10]), make([]byte, 4990)...), append(bytes.Clone(big[:10]), make([]byte, 4990)...)},
		{"unsynced truncate is lost",
			func(t *testing.T, f string) {
				writeFile(t, f, big)
				syncFile(t, f)
				if err := os.Truncate(f, 100); err != nil {
					t.Fatal(err)
				}
			},
			big[:100], big},
		{"fsync through another descriptor",
			func(t *testing.T, f string) {
				writeFile(t, f, []byte("abc"))
				syncFile(t, f) // opens read-only
			},
			[]byte("abc"), []byte("abc")},
	}
	for i, c := range cases {
		t.Run(c.name+"/before", func(t *testing.T) {
			f := p(fmt.Sprintf("f%d", i))
			c.before(t, f)
			wantContent(t, f, c.live)
		})
	}
	// Metadata passes through: names survive the crash.
	writeFile(t, p("renamed-from"), []byte("r"))
	syncFile(t, p("renamed-from"))
	if err := os.Rename(p("renamed-from"), p("renamed-to")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, p("unlinked"), []byte("u"))
	syncFile(t, p("unlinked"))
	if err := os.Remove(p("unlinked")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(p("dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("renamed-to", p("link")); err != nil {
		t.Fatal(err)
	}

	crashLazy(t, l)

	for i, c := range cases {
		t.Run(c.name+"/after", func(t *testing.T) {
			wantContent(t, p(fmt.Sprintf("f%d", i)), c.durable)
		})
	}
	wantContent(t, p("renamed-to"), []byte("r"))
	for _, gone := range []string{"renamed-from", "unlinked"} {
		if _, err := os.Lstat(p(gone)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after the crash: %v, want it gone", gone, err)
		}
	}
	if fi, err := os.Stat(p("dir")); err != nil || !fi.IsDir() {
		t.Errorf("dir after the crash: %v", err)
	}
	if target, err := os.Readlink(p("link")); err != nil || target != "renamed-to" {
		t.Errorf("link after the crash: %q, %v", target, err)
	}
}

// TestLazyFSMmap: a shared read-only mapping (as bbolt makes) sees the
// unsynced data before a crash and only the durable data after it.
func TestLazyFSMmap(t *testing.T) {
	l := mountLazy(t)
	f := filepath.Join(l.Mountpoint(), "mapped")
	durable := bytes.Repeat([]byte("d"), 8192)
	writeFile(t, f, durable)
	syncFile(t, f)
	fd, err := os.OpenFile(f, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fd.WriteAt([]byte("unsynced"), 4096); err != nil {
		t.Fatal(err)
	}
	want := bytes.Clone(durable)
	copy(want[4096:], "unsynced")
	mapped := func() []byte { return mmapRead(t, f, 8192) }
	if got := mapped(); !bytes.Equal(got, want) {
		t.Errorf("mmap before the crash: bytes 4096.. %q, want %q", got[4096:4110], want[4096:4110])
	}
	fd.Close()
	crashLazy(t, l)
	if fd, err = os.Open(f); err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	if got := mapped(); !bytes.Equal(got, durable) {
		t.Errorf("mmap after the crash: bytes 4096.. %q, want %q", got[4096:4110], durable[4096:4110])
	}
}

// TestLazyFSCmfs: cmfs over a lazyfs mount reads, writes and maps files
// and journals them.
func TestLazyFSCmfs(t *testing.T) {
	l := mountLazy(t)
	backing := filepath.Join(l.Mountpoint(), "backing")
	if err := os.Mkdir(backing, 0o755); err != nil {
		t.Fatal(err)
	}
	debug := filepath.Join(t.TempDir(), "fuse.log")
	t.Setenv("CMFS_FUSE_DEBUG", debug)
	m := mountAt(t, backing)
	f := m.path("db.db/t/p=1/part-0")
	data := bytes.Repeat([]byte("cmfs over lazyfs\n"), 500)
	writeFile(t, f, data)
	wantContent(t, f, data)
	wantContent(t, m.backing("db.db/t/p=1/part-0"), data)
	fd, err := os.OpenFile(f, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	if _, err := fd.WriteAt([]byte("CMFS"), 0); err != nil {
		t.Fatal(err)
	}
	copy(data, "CMFS")
	if mm := mmapRead(t, f, len(data)); !bytes.Equal(mm, data) {
		t.Errorf("mmap through cmfs: %q, want %q", head(mm), head(data))
	}
	fd.Close()
	wantContent(t, m.backing("db.db/t/p=1/part-0"), data)
	evs := events(t, m.State)
	// With passthrough, cmfs hands its backing files (on lazyfs) to the
	// kernel and never sees a WRITE; go-fuse's debug log says whether the
	// kernel took them (it refuses with ELOOP when the backing filesystem
	// itself negotiated passthrough, and go-fuse then serves every write).
	log := string(readFile(t, debug))
	opens := grepLines(log, "BACKING_OPEN")
	if opens == "" || strings.Count(opens, "\n")+1 != strings.Count(opens, "(errno 0)") {
		t.Errorf("cmfs over lazyfs: the kernel refused passthrough; cmfs's FUSE log says:\n%s", opens)
	}
	if w := regexp.MustCompile(`rx \d+: WRITE .*`).FindString(log); w != "" {
		t.Errorf("cmfs over lazyfs: a write reached cmfs, not passthrough: %s", w)
	}
	if last := evs[len(evs)-1]; len(last.Files) == 0 || last.Files[0].XXH64 != journal.Sum(data) {
		t.Errorf("last event %+v, want the new content's xxh64 %s", last, journal.Sum(data))
	}
	checkJournalMatchesTree(t, backing, m.State)
}

// TestLazyFSCrashWhileHeld: a crash detaches a mount a survivor still
// holds; the survivor's writes fail, and the fresh mount has only the
// durable bytes.
func TestLazyFSCrashWhileHeld(t *testing.T) {
	l := mountLazy(t)
	f := filepath.Join(l.Mountpoint(), "held")
	writeFile(t, f, []byte("durable"))
	syncFile(t, f)
	fd, err := os.OpenFile(f, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	if _, err := fd.WriteAt([]byte("DURABLE, not"), 0); err != nil {
		t.Fatal(err)
	}
	crashLazy(t, l)
	if _, err := fd.WriteAt([]byte("x"), 0); errnoOf(err) != syscall.EIO {
		t.Errorf("write through the crashed mount: %v, want EIO", err)
	}
	if err := fd.Sync(); errnoOf(err) != syscall.EIO {
		t.Errorf("fsync through the crashed mount: %v, want EIO", err)
	}
	fd.Close()
	wantContent(t, f, []byte("durable"))
}

// mmapReadEnv makes the test binary a child that maps a file and prints
// its first bytes (mmapReadChild).
const mmapReadEnv = "CMFS_TEST_MMAP_READ"

// mmapRead returns the first n bytes of the file at p as a shared,
// read-only mapping sees them, read in a child process of its own, so
// that the mapping is gone with it and no later fault can come from this
// process.
func mmapRead(t *testing.T, p string, n int) []byte {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d:%s", mmapReadEnv, n, p))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("mmap %s in a child: %v", p, err)
	}
	return out
}

// mmapReadChild is the child of mmapRead: spec is "n:path".
func mmapReadChild(spec string) int {
	ns, p, _ := strings.Cut(spec, ":")
	n, err := strconv.Atoi(ns)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bad", mmapReadEnv, spec)
		return 2
	}
	f, err := os.Open(p)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer f.Close()
	m, err := syscall.Mmap(int(f.Fd()), 0, n, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mmap:", err)
		return 1
	}
	defer syscall.Munmap(m)
	os.Stdout.Write(m)
	return 0
}
