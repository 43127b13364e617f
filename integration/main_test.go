package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/internal/wait"

	"github.com/cmfs-project/cmfs/internal/auth"
	"github.com/cmfs-project/cmfs/internal/procfs"
	"github.com/cmfs-project/cmfs/journal"
)

var seedFlag = flag.Int64("seed", 0, "seed of TestDifferential's operation sequence (0: from the clock)")

var (
	// cmfsBin is the binary built by TestMain.
	cmfsBin string
	// skipReason is why this machine cannot run the tests; empty if it can.
	skipReason string
	// moduleRoot is the directory holding go.mod.
	moduleRoot string
)

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if spec := os.Getenv(mmapReadEnv); spec != "" {
		return mmapReadChild(spec)
	}
	if under, mnt := os.Getenv(lazyUnderEnv), os.Getenv(lazyMntEnv); under != "" && mnt != "" {
		return lazyServeChild(under, mnt)
	}
	if os.Getenv(probeEnv) != "" {
		// A posixtest probe child (see TestPosix): it only touches files.
		return m.Run()
	}
	if reason := missingPrerequisite(); reason != "" {
		if os.Getenv("CI") == "true" {
			fmt.Fprintf(os.Stderr, "integration: cannot run: %s (CI=true makes this skip a failure)\n", reason)
			return 1
		}
		skipReason = reason
		return m.Run()
	}
	if _, err := exec.LookPath("xxhsum"); err != nil {
		fmt.Fprintln(os.Stderr, "integration: xxhsum not found: install xxhash (Debian: apt-get install xxhash); checksums are checked against it")
		return 1
	}
	root, err := filepath.Abs("..")
	if err != nil {
		fmt.Fprintln(os.Stderr, "integration:", err)
		return 1
	}
	moduleRoot = root
	dir, err := os.MkdirTemp("", binDirPrefix)
	if err != nil {
		fmt.Fprintln(os.Stderr, "integration:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	cmfsBin = filepath.Join(dir, "cmfs")
	build := exec.Command("go", "build", "-o", cmfsBin, "./cmd/cmfs")
	build.Dir = moduleRoot
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "integration: go build ./cmd/cmfs: %v\n%s", err, out)
		return 1
	}
	defer reapLeftovers()
	// Every replicad serve and client the tests start shares one token
	// file, as the nodes on one host do; a test of the credentials
	// themselves gives its own (see TestReplicadAuth).
	tokenFile := filepath.Join(dir, auth.FileName)
	if _, err := auth.File(tokenFile); err != nil {
		fmt.Fprintln(os.Stderr, "integration:", err)
		return 1
	}
	os.Setenv(tokenEnv, tokenFile)
	return m.Run()
}

// binDirPrefix starts the name of the directory TestMain builds the
// binaries in.
const binDirPrefix = "cmfs-integration-bin-"

// tokenEnv names replicad's token file when --token-file is not given.
const tokenEnv = "REPLICAD_TOKEN_FILE"

// live holds the mount points the tests made that are not unmounted yet,
// so that TestMain can detach whatever a test left behind.
var live sync.Map

// reapLeftovers detaches mounts that no cleanup removed and kills the
// daemons serving them, by pid.
func reapLeftovers() {
	live.Range(func(k, _ any) bool {
		mp := k.(string)
		if isMounted(mp) {
			fmt.Fprintf(os.Stderr, "integration: %s was left mounted; detaching it\n", mp)
			exec.Command("fusermount3", "-u", "-z", mp).Run()
		}
		for _, pid := range daemonPIDs(mp) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		return true
	})
}

// missingPrerequisite says why FUSE mounts cannot be made here, or "".
func missingPrerequisite() string {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return "/dev/fuse is missing (load the fuse module or run the container with --device /dev/fuse)"
	}
	if os.Geteuid() != 0 {
		return "not root: the tests mount FUSE and tmpfs file systems and need uid 0"
	}
	if _, err := exec.LookPath("fusermount3"); err != nil {
		return "fusermount3 is missing (Debian: apt-get install fuse3)"
	}
	return ""
}

// requireFUSE skips t, with the reason, on a machine that cannot mount.
func requireFUSE(t testing.TB) {
	t.Helper()
	if skipReason != "" {
		t.Skip(skipReason)
	}
}

// result is what one CLI run left behind.
type result struct {
	Stdout, Stderr string
	Code           int
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout: %s\nstderr: %s", r.Code, r.Stdout, r.Stderr)
}

// cmfs runs the built binary with args and a deadline. Output goes to
// files, not pipes, so a daemon child that keeps its stdio open does not
// hold up the wait.
func cmfs(t testing.TB, args ...string) result {
	t.Helper()
	return runTool(t, 60*time.Second, cmfsBin, args...)
}

func runTool(t testing.TB, timeout time.Duration, name string, args ...string) result {
	t.Helper()
	return runToolEnv(t, timeout, nil, name, args...)
}

// runToolEnv is runTool with env ("K=V") added to the environment.
func runToolEnv(t testing.TB, timeout time.Duration, env []string, name string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	stdout, err := os.CreateTemp("", "cmfs-stdout-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(stdout.Name())
	defer stdout.Close()
	stderr, err := os.CreateTemp("", "cmfs-stderr-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(stderr.Name())
	defer stderr.Close()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	err = cmd.Run()
	code := 0
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
		if code < 0 {
			code = 128 + int(exit.Sys().(syscall.WaitStatus).Signal())
		}
	case err != nil:
		t.Fatalf("%s %s: %v", name, strings.Join(args, " "), err)
	}
	if ctx.Err() != nil {
		t.Fatalf("%s %s: no exit within %v", name, strings.Join(args, " "), timeout)
	}
	out, _ := os.ReadFile(stdout.Name())
	errOut, _ := os.ReadFile(stderr.Name())
	return result{Stdout: string(out), Stderr: string(errOut), Code: code}
}

// mounted is one live cmfs mount made by mount or mountAt.
type mounted struct {
	Backing string
	Mnt     string
	State   string
	CMRoot  string
	// NoCheck skips the journal and fsck checks of cleanup, for a test
	// that corrupts the state on purpose.
	NoCheck bool
}

// path returns the mount path of a slash-separated path relative to the root.
func (m *mounted) path(rel string) string { return filepath.Join(m.Mnt, filepath.FromSlash(rel)) }

// backing returns the backing path of rel.
func (m *mounted) backing(rel string) string {
	return filepath.Join(m.Backing, filepath.FromSlash(rel))
}

// mount mounts a fresh, empty backing directory; flags go to `cmfs mount`
// before the two positional arguments.
func mount(t testing.TB, flags ...string) *mounted {
	t.Helper()
	requireFUSE(t)
	backing := filepath.Join(t.TempDir(), "backing")
	if err := os.Mkdir(backing, 0o755); err != nil {
		t.Fatal(err)
	}
	return mountAt(t, backing, flags...)
}

// mountAt mounts backing with `cmfs mount --daemon` on a fresh mount point.
// Cleanup unmounts, then verifies the journal and runs `cmfs fsck`.
func mountAt(t testing.TB, backing string, flags ...string) *mounted {
	t.Helper()
	requireFUSE(t)
	mp := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(mp, 0o755); err != nil {
		t.Fatal(err)
	}
	m := &mounted{Backing: backing, Mnt: mp, State: filepath.Join(backing, ".cmfs")}
	if v := flagValue(flags, "--state"); v != "" {
		m.State = v
	}
	m.CMRoot = filepath.Join(m.State, "cmroot")
	if v := flagValue(flags, "--cmroot"); v != "" {
		m.CMRoot = v
	}
	live.Store(mp, true)
	t.Cleanup(func() { m.unmountAndCheck(t) })
	args := append([]string{"mount", "--daemon"}, flags...)
	res := cmfs(t, append(args, backing, mp)...)
	if res.Code != 0 {
		t.Fatalf("cmfs %s: %v", strings.Join(args, " "), res)
	}
	wait.For(t, 10*time.Second, "mount of "+mp+" to appear", func() bool { return isMounted(mp) })
	return m
}

// flagValue returns the value of --name in flags ("--name v" or "--name=v").
func flagValue(flags []string, name string) string {
	for i, f := range flags {
		if f == name && i+1 < len(flags) {
			return flags[i+1]
		}
		if v, ok := strings.CutPrefix(f, name+"="); ok {
			return v
		}
	}
	return ""
}

// unmount unmounts m and waits until its daemon is gone.
func (m *mounted) unmount(t testing.TB) {
	t.Helper()
	if isMounted(m.Mnt) {
		if res := cmfs(t, "umount", m.Mnt); res.Code != 0 {
			t.Errorf("cmfs umount %s: %v", m.Mnt, res)
			forceUnmount(t, m.Mnt)
		}
		// Not wait.For: a Fatal here would skip the rest of the cleanup
		// and leak the mount and its daemon.
		if !wait.Until(15*time.Second, func() bool { return !isMounted(m.Mnt) }) {
			t.Errorf("%s still mounted 15s after cmfs umount", m.Mnt)
			forceUnmount(t, m.Mnt)
		}
	}
	reapDaemons(t, m.Mnt)
	live.Delete(m.Mnt)
}

// crash kills m's daemon with SIGKILL, as a crash would, waits for it to
// exit and detaches the dead mount. The state is left as the kill left
// it: m's cleanup no longer checks it (a remount's does).
func (m *mounted) crash(t testing.TB) {
	t.Helper()
	m.kill(t)
	m.detach(t)
}

// kill kills m's daemon with SIGKILL and waits for it to exit; the dead
// mount stays until detach.
func (m *mounted) kill(t testing.TB) {
	t.Helper()
	pids := daemonPIDs(m.Mnt)
	if len(pids) == 0 {
		t.Fatalf("no cmfs daemon serves %s", m.Mnt)
	}
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	wait.For(t, 10*time.Second, "the killed daemon to exit", func() bool { return len(daemonPIDs(m.Mnt)) == 0 })
}

// detach removes the dead mount of a killed daemon, and leaves checking
// the state to a remount's cleanup.
func (m *mounted) detach(t testing.TB) {
	t.Helper()
	forceUnmount(t, m.Mnt)
	wait.For(t, 10*time.Second, "dead mount to go", func() bool { return !isMounted(m.Mnt) })
	m.NoCheck = true
}

// unmountAndCheck is every mount's cleanup: unmount, then the journal must
// pass Verify and `cmfs fsck` must exit 0.
func (m *mounted) unmountAndCheck(t testing.TB) {
	t.Helper()
	m.unmount(t)
	if m.NoCheck {
		return
	}
	if _, err := os.Stat(filepath.Join(m.State, "journal.db")); err != nil {
		// The mount never came up far enough to create its journal; the
		// test has failed already.
		if !t.Failed() {
			t.Errorf("no journal after the mount: %v", err)
		}
		return
	}
	verifyJournal(t, m.State)
	if res := cmfs(t, "fsck", "--state", m.State); res.Code != 0 {
		t.Errorf("cmfs fsck --state %s after unmount: %v", m.State, res)
	}
}

// verifyJournal opens the journal read-only and runs Verify.
func verifyJournal(t testing.TB, state string) {
	t.Helper()
	path := filepath.Join(state, "journal.db")
	var (
		l   *journal.Log
		err error
	)
	deadline := time.Now().Add(10 * time.Second)
	for {
		l, err = journal.Open(path, journal.Options{ReadOnly: true, LockTimeout: time.Second})
		if err == nil || !errors.Is(err, journal.ErrLocked) || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Errorf("open journal %s read-only: %v", path, err)
		return
	}
	defer l.Close()
	if err := l.Verify(); err != nil {
		t.Errorf("journal %s: Verify: %v", path, err)
	}
}

// forceUnmount detaches a mount whatever state its server is in.
func forceUnmount(t testing.TB, mp string) {
	t.Helper()
	if !isMounted(mp) {
		return
	}
	if out, err := exec.Command("fusermount3", "-u", "-z", mp).CombinedOutput(); err != nil {
		if out2, err2 := exec.Command("umount", "-l", mp).CombinedOutput(); err2 != nil {
			t.Errorf("fusermount3 -u -z %s: %v %s; umount -l: %v %s", mp, err, out, err2, out2)
		}
	}
}

// isMounted reports whether mp is a mount point, from /proc/self/mountinfo.
func isMounted(mp string) bool { return procfs.Mounted(mp) }

// daemonPIDs lists the processes other than this one that carry mp as a
// command-line argument: the cmfs daemon serving it.
func daemonPIDs(mp string) []int {
	return procfs.PIDs(func(args []string) bool { return slices.Contains(args, mp) })
}

// reapDaemons waits for the daemons of an unmounted mp to exit; one that
// stays is an error, and is killed by its pid so no process leaks.
func reapDaemons(t testing.TB, mp string) {
	t.Helper()
	var pids []int
	if !wait.Until(15*time.Second, func() bool { pids = daemonPIDs(mp); return len(pids) == 0 }) {
		t.Errorf("cmfs daemon(s) %v for %s still running 15s after unmount; killing them", pids, mp)
		for _, pid := range pids {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// eventKeys are the keys every `cmfs events --json` object must carry.
var eventKeys = []string{"id", "time", "type", "path", "db", "table", "partition", "files"}

// events returns the journal's events with id >= from via `cmfs events --json`.
func events(t testing.TB, state string) []journal.Event { return eventsFrom(t, state, 1) }

func eventsFrom(t testing.TB, state string, from uint64) []journal.Event {
	t.Helper()
	res := cmfs(t, "events", "--state", state, "--from", strconv.FormatUint(from, 10), "--json")
	if res.Code != 0 {
		t.Fatalf("cmfs events --state %s: %v", state, res)
	}
	var evs []journal.Event
	sc := bufio.NewScanner(strings.NewReader(res.Stdout))
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var keys map[string]json.RawMessage
		if err := json.Unmarshal(line, &keys); err != nil {
			t.Fatalf("cmfs events --json: line %q: %v", line, err)
		}
		for _, k := range eventKeys {
			if _, ok := keys[k]; !ok {
				t.Errorf("cmfs events --json: line %q lacks key %q", line, k)
			}
		}
		var ev journal.Event
		if err := json.Unmarshal(line, &ev); err != nil {
			t.Fatalf("cmfs events --json: line %q: %v", line, err)
		}
		evs = append(evs, ev)
	}
	for i := 1; i < len(evs); i++ {
		if evs[i].ID != evs[i-1].ID+1 {
			t.Errorf("cmfs events: ids not dense: %d after %d", evs[i].ID, evs[i-1].ID)
		}
	}
	return evs
}

// lastID returns the newest event id, 0 for an empty journal.
func lastID(t testing.TB, state string) uint64 {
	t.Helper()
	evs := events(t, state)
	if len(evs) == 0 {
		return 0
	}
	return evs[len(evs)-1].ID
}

// xxhsum returns the checksum of the file at path as the real `xxhsum`
// computes it (byHand for a file longer than one block): the checksums
// cmfs journals are checked against an independent implementation.
func xxhsum(t testing.TB, path string) string {
	t.Helper()
	return xxhsums(t, path)[path]
}

// xxhsums runs `xxhsum -H64` once over many files, and byHand over each
// longer than one block.
func xxhsums(t testing.TB, paths ...string) map[string]string {
	t.Helper()
	sums := make(map[string]string, len(paths))
	var short []string
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil || fi.Size() <= 256<<10 {
			short = append(short, p) // a missing file fails in xxhsum, by name
			continue
		}
		sums[p] = byHand(t, p)
	}
	paths = short
	for len(paths) > 0 {
		n := min(len(paths), 200)
		batch := paths[:n]
		paths = paths[n:]
		out, err := exec.Command("xxhsum", append([]string{"-H64", "--"}, batch...)...).Output()
		if err != nil {
			t.Fatalf("xxhsum -H64 %v: %v", batch, err)
		}
		lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
		if len(lines) != len(batch) {
			t.Fatalf("xxhsum -H64: %d lines for %d files: %q", len(lines), len(batch), out)
		}
		for i, line := range lines {
			sum, err := parseXXHSum(line)
			if err != nil {
				t.Fatal(err)
			}
			sums[batch[i]] = sum
		}
	}
	return sums
}

// byHand is the checksum of a file longer than one block by the
// definition in package checksum's doc, with the real xxhsum for every
// xxh64: split cuts the file into 256 KiB files, `xxhsum -H64` sums them
// all, and the sums, as 8-byte big-endian numbers in order, go through
// `xxhsum -H64 -` again. (The recipe the README gives pipes each block
// through its own xxhsum, a process per block: too slow for the
// suite's 256 MiB files.)
func byHand(t testing.TB, path string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "blocks-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if out, err := exec.Command("split", "-a", "8", "-d", "-b", "256K", "--", path, filepath.Join(dir, "b")).CombinedOutput(); err != nil {
		t.Fatalf("split %s: %v: %s", path, err, out)
	}
	names, err := filepath.Glob(filepath.Join(dir, "b*"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(names)
	sums := xxhsums(t, names...)
	var top []byte
	for _, n := range names {
		b, err := hex.DecodeString(sums[n])
		if err != nil {
			t.Fatal(err)
		}
		top = append(top, b...)
	}
	cmd := exec.Command("xxhsum", "-H64", "-")
	cmd.Stdin = bytes.NewReader(top)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("xxhsum -H64 - over the block sums of %s: %v", path, err)
	}
	sum, err := parseXXHSum(strings.TrimRight(string(out), "\n"))
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

// parseXXHSum reads one line of xxhsum output, in GNU style ("hex  path",
// with a leading backslash when the name needed escaping) or BSD style
// ("XXH64 (path) = hex").
func parseXXHSum(line string) (string, error) {
	var sum string
	if strings.HasPrefix(line, "XXH64 (") {
		i := strings.LastIndex(line, " = ")
		if i < 0 {
			return "", fmt.Errorf("xxhsum: cannot parse %q", line)
		}
		sum = line[i+3:]
	} else {
		sum, _, _ = strings.Cut(strings.TrimPrefix(line, `\`), " ")
	}
	if len(sum) != 16 || strings.Trim(sum, "0123456789abcdef") != "" {
		return "", fmt.Errorf("xxhsum: cannot parse %q", line)
	}
	return sum, nil
}

// cmEntry returns the path of the cmroot entry named name, searching
// subdirectories in case the store shards its entries.
func cmEntry(root, name string) (string, error) {
	p := filepath.Join(root, name)
	if _, err := os.Lstat(p); err == nil {
		return p, nil
	}
	found := ""
	filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() == name {
			found = path
			return filepath.SkipAll
		}
		return nil
	})
	if found == "" {
		return "", fmt.Errorf("cmroot %s: no entry %s", root, name)
	}
	return found, nil
}

// node is one entry of a tree snapshot.
type node struct {
	Mode fs.FileMode // type and permission bits
	Size int64       // regular files only
	Data string      // content of a regular file, target of a symlink
}

func (n node) String() string {
	d := n.Data
	if len(d) > 32 {
		d = fmt.Sprintf("%q...(%d bytes, xxh64 %s)", d[:32], len(d), journal.Sum([]byte(n.Data)))
	} else {
		d = fmt.Sprintf("%q", d)
	}
	return fmt.Sprintf("%v size=%d data=%s", n.Mode, n.Size, d)
}

// walkRel calls fn for everything below root (not root itself), by slash
// path relative to root, leaving out the top-level names in skip.
func walkRel(root string, skip []string, fn func(rel, path string, d fs.DirEntry) error) error {
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if rel == "." {
			return nil
		}
		if slices.Contains(skip, rel) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		return fn(rel, path, d)
	})
}

// snapshot reads the tree below root (excluding root itself and any
// top-level name in skip) as relative slash paths.
func snapshot(t testing.TB, root string, skip ...string) map[string]node {
	t.Helper()
	tree := map[string]node{}
	err := walkRel(root, skip, func(rel, path string, d fs.DirEntry) error {
		fi, err := os.Lstat(path)
		if err != nil {
			return err
		}
		n := node{Mode: fi.Mode() & (fs.ModeType | fs.ModePerm)}
		switch {
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			n.Size, n.Data = fi.Size(), string(b)
			if int64(len(b)) != fi.Size() {
				return fmt.Errorf("%s: stat size %d, read %d bytes", path, fi.Size(), len(b))
			}
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			n.Data = target
		}
		tree[rel] = n
		return nil
	})
	if err != nil {
		t.Fatalf("snapshot %s: %v", root, err)
	}
	return tree
}

// diffTrees describes how got differs from want, "" if it does not.
func diffTrees(got, want map[string]node) string {
	var keys []string
	for k := range got {
		keys = append(keys, k)
	}
	for k := range want {
		if _, ok := got[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		g, gok := got[k]
		w, wok := want[k]
		switch {
		case !gok:
			fmt.Fprintf(&b, "  %s: missing, want %v\n", k, w)
		case !wok:
			fmt.Fprintf(&b, "  %s: got %v, want nothing\n", k, g)
		case g != w:
			fmt.Fprintf(&b, "  %s: got %v, want %v\n", k, g, w)
		}
	}
	return b.String()
}

// errnoOf reduces an error to its errno (0 for nil, -1 if it has none).
func errnoOf(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno
	}
	return syscall.Errno(^uintptr(0))
}

// writeFile writes data to path through an open/write/close sequence.
func writeFile(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
