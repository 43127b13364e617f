package integration

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/internal/procfs"
	"github.com/cmfs-project/cmfs/internal/statedir"
	"github.com/cmfs-project/cmfs/internal/tlsconfig/tlstest"
	"github.com/cmfs-project/cmfs/internal/wait"
	"github.com/cmfs-project/cmfs/journal"
	"github.com/cmfs-project/cmfs/source"
)

// The daemons under a service manager: a unixgram socket the test makes
// stands in for systemd's NOTIFY_SOCKET, and the daemons are real
// processes (cmfs mount in the foreground, as cmfs@.service runs it;
// replicad serve, as replicad.service does).

// fuseSuperMagic is statfs's f_type of a FUSE file system.
const fuseSuperMagic = 0x65735546

// notifySocket is a fake service manager's notify socket and the
// datagrams it received, in order.
type notifySocket struct {
	path string
	got  chan string
}

func newNotifySocket(t testing.TB) *notifySocket {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	n := &notifySocket{path: path, got: make(chan string, 10000)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 64<<10)
		for {
			k, err := conn.Read(buf)
			if err != nil {
				return
			}
			n.got <- string(buf[:k])
		}
	}()
	t.Cleanup(func() { conn.Close(); <-done })
	return n
}

// env is what a daemon needs to notify this socket.
func (n *notifySocket) env(extra ...string) []string {
	return append([]string{"NOTIFY_SOCKET=" + n.path}, extra...)
}

// until returns the datagrams received up to and including the first
// that assigns line (such as READY=1), failing t after timeout, or at
// once if p exits first.
func (n *notifySocket) until(t testing.TB, p *proc, timeout time.Duration, line string) []string {
	t.Helper()
	return n.untilMatch(t, p, timeout, line, func(d string) bool { return slices.Contains(strings.Split(d, "\n"), line) })
}

// untilMatch is until for the first datagram match accepts; what says
// what it looks for.
func (n *notifySocket) untilMatch(t testing.TB, p *proc, timeout time.Duration, what string, match func(datagram string) bool) []string {
	t.Helper()
	var seen []string
	deadline := time.After(timeout)
	for {
		select {
		case d := <-n.got:
			seen = append(seen, d)
			if match(d) {
				return seen
			}
		case <-p.done:
			// What it sent before it exited is still queued.
			for len(n.got) > 0 {
				d := <-n.got
				seen = append(seen, d)
				if match(d) {
					return seen
				}
			}
			t.Fatalf("%s exited before sending %s (sent %q): %v", p.name, what, seen, p.res)
			return nil
		case <-deadline:
			t.Fatalf("%s: no %s within %v (sent %q); stderr: %s", p.name, what, timeout, seen, p.stderrNow())
			return nil
		}
	}
}

// drain returns the datagrams received and not yet read.
func (n *notifySocket) drain() []string {
	var out []string
	for {
		select {
		case d := <-n.got:
			out = append(out, d)
		default:
			return out
		}
	}
}

// terminate sends p SIGTERM, as systemctl stop does, and fails t unless
// STOPPING=1 comes and p exits 0.
func (n *notifySocket) terminate(t testing.TB, p *proc) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	n.until(t, p, 10*time.Second, "STOPPING=1")
	if res := p.wait(t, 30*time.Second); res.Code != 0 {
		t.Fatalf("%s after SIGTERM: %v", p.name, res)
	}
}

// assigns says whether any datagram assigns line.
func assigns(datagrams []string, line string) bool {
	for _, d := range datagrams {
		if slices.Contains(strings.Split(d, "\n"), line) {
			return true
		}
	}
	return false
}

// notifyStatus returns the STATUS= value a datagram sets, "" if none.
func notifyStatus(d string) string {
	for _, l := range strings.Split(d, "\n") {
		if s, ok := strings.CutPrefix(l, "STATUS="); ok {
			return s
		}
	}
	return ""
}

// TestSystemdMount runs `cmfs mount` in the foreground with a notify
// socket, as cmfs@.service does: READY=1 comes only once the mount
// answers through FUSE (checked the moment it arrives), WATCHDOG=1 comes
// while the mount answers, and SIGTERM (systemctl stop), or an unmount
// from outside, brings STOPPING=1 and a clean stop with exit 0.
func TestSystemdMount(t *testing.T) {
	requireFUSE(t)
	for _, tc := range []struct {
		name string
		stop func(t *testing.T, p *proc, m *mounted)
	}{
		{"SIGTERM", func(t *testing.T, p *proc, m *mounted) {
			if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
		}},
		{"umount", func(t *testing.T, p *proc, m *mounted) {
			if res := runTool(t, 30*time.Second, "umount", m.Mnt); res.Code != 0 {
				t.Fatalf("umount %s: %v", m.Mnt, res)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			backing := filepath.Join(t.TempDir(), "backing")
			writeFile(t, filepath.Join(backing, "hello"), []byte("hello"))
			mp := filepath.Join(t.TempDir(), "mnt")
			if err := os.Mkdir(mp, 0o755); err != nil {
				t.Fatal(err)
			}
			m := &mounted{Backing: backing, Mnt: mp, State: filepath.Join(backing, ".cmfs")}
			m.CMRoot = filepath.Join(m.State, "cmroot")
			live.Store(mp, true)
			t.Cleanup(func() { m.unmountAndCheck(t) })

			sock := newNotifySocket(t)
			// 400ms: a ping every 200ms.
			p := startProcEnv(t, sock.env("WATCHDOG_USEC=400000"), cmfsBin, "mount", backing, mp)
			before := sock.until(t, p, 30*time.Second, "READY=1")
			// The first thing done once READY arrives: the mount must answer.
			var st syscall.Statfs_t
			if err := syscall.Statfs(mp, &st); err != nil {
				t.Fatalf("statfs %s at READY=1: %v", mp, err)
			}
			if st.Type != fuseSuperMagic {
				t.Fatalf("at READY=1 %s is not a FUSE mount yet (f_type %#x)", mp, st.Type)
			}
			if got := string(readFile(t, filepath.Join(mp, "hello"))); got != "hello" {
				t.Fatalf("at READY=1 %s/hello reads %q", mp, got)
			}
			ready := before[len(before)-1]
			if s := notifyStatus(ready); !strings.Contains(s, mp) {
				t.Errorf("READY=1 came with STATUS=%q; want it to name the mountpoint %s", s, mp)
			}
			if assigns(before[:len(before)-1], "WATCHDOG=1") {
				t.Errorf("WATCHDOG=1 before READY=1: %q", before)
			}

			for range 2 {
				sock.until(t, p, 5*time.Second, "WATCHDOG=1")
			}
			writeFile(t, m.path("after-ready"), []byte("journaled"))

			tc.stop(t, p, m)
			sock.until(t, p, 10*time.Second, "STOPPING=1")
			if res := p.wait(t, 30*time.Second); res.Code != 0 {
				t.Fatalf("cmfs mount after the stop: %v", res)
			}
			if isMounted(mp) {
				t.Fatalf("%s still mounted after cmfs mount exited", mp)
			}
			rec, err := statedir.ReadRecord(m.State)
			if err != nil || !rec.Clean {
				t.Errorf("mount record after the stop: %+v, %v; want a clean stop", rec, err)
			}
			if !slices.ContainsFunc(events(t, m.State), func(ev journal.Event) bool { return ev.Path == "after-ready" }) {
				t.Error("the write after READY=1 was not journaled")
			}
		})
	}
}

// TestSystemdServe runs `replicad serve` with a notify socket and a
// watchdog, as replicad.service does, for a warehouse (--state), a node
// (--volume) and a node over mutual TLS whose allow-list names itself:
// READY=1 comes once it has said where it listens and a call to it
// works, WATCHDOG=1 keeps coming, and SIGTERM brings STOPPING=1 and exit
// 0.
func TestSystemdServe(t *testing.T) {
	requireFUSE(t)
	bin := replicadPath(t)
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "cmfs-test-ca")
	caFile := ca.WriteCert(t, dir)
	admin := tlsFlags(ca.Issue(t, dir, "admin"), caFile)
	for _, tc := range []struct {
		name string
		args func(t *testing.T) []string
		// call makes a call of the service at addr.
		call func(t *testing.T, addr string) error
	}{
		{"warehouse", func(t *testing.T) []string {
			m := mount(t)
			writeFile(t, m.path("f"), []byte("x"))
			return []string{"--state", m.State}
		}, func(t *testing.T, addr string) error {
			c, err := source.Dial(context.Background(), addr, source.WithToken(testToken(t)))
			if err != nil {
				return err
			}
			defer c.Close()
			_, err = c.Status(context.Background())
			return err
		}},
		{"node", func(t *testing.T) []string {
			return []string{"--node-id", "n1", "--volume", filepath.Join(t.TempDir(), "v")}
		}, func(t *testing.T, addr string) error {
			if res := replicad(t, "container", "list", "--server", addr); res.Code != 0 {
				return errors.New(res.String())
			}
			return nil
		}},
		{"node over TLS", func(t *testing.T) []string {
			return append(tlsFlags(ca.Issue(t, dir, "n1"), caFile), "--tls-allow", "n1,admin",
				"--node-id", "n1", "--volume", filepath.Join(t.TempDir(), "v"))
		}, func(t *testing.T, addr string) error {
			if res := replicad(t, append([]string{"container", "list", "--server", addr}, admin...)...); res.Code != 0 {
				return errors.New(res.String())
			}
			return nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sock := newNotifySocket(t)
			args := append([]string{"serve", "--listen", "127.0.0.1:0"}, tc.args(t)...)
			p := startProcEnv(t, sock.env("WATCHDOG_USEC=400000"), bin, args...)
			before := sock.until(t, p, 30*time.Second, "READY=1")
			line := listeningLine.FindStringSubmatch(string(readFile(t, p.stdout)))
			if line == nil {
				t.Fatalf("READY=1 before the \"listening on\" line; stdout: %q", readFile(t, p.stdout))
			}
			if err := tc.call(t, line[1]); err != nil {
				t.Fatalf("at READY=1, a call to %s: %v", line[1], err)
			}
			if s := notifyStatus(before[len(before)-1]); !strings.Contains(s, line[1]) {
				t.Errorf("READY=1 came with STATUS=%q; want it to name the address %s", s, line[1])
			}
			for range 3 {
				sock.until(t, p, 5*time.Second, "WATCHDOG=1")
			}
			sock.terminate(t, p)
		})
	}
}

var (
	helperOnce sync.Once
	helperBin  string
	helperErr  error
)

// mountHelperPath builds ./cmd/mount.fuse.cmfs once per run, next to
// cmfsBin: the helper runs the cmfs beside it.
func mountHelperPath(t testing.TB) string {
	t.Helper()
	requireFUSE(t)
	helperOnce.Do(func() {
		bin := filepath.Join(filepath.Dir(cmfsBin), "mount.fuse.cmfs")
		build := exec.Command("go", "build", "-o", bin, "./cmd/mount.fuse.cmfs")
		build.Dir = moduleRoot
		if out, err := build.CombinedOutput(); err != nil {
			helperErr = fmt.Errorf("go build ./cmd/mount.fuse.cmfs: %v\n%s", err, out)
			return
		}
		helperBin = bin
	})
	if helperErr != nil {
		t.Fatal(helperErr)
	}
	return helperBin
}

// sbinHelper is where mount(8) looks for the helper of type fuse.cmfs:
// it searches /sbin only.
const sbinHelper = "/sbin/mount.fuse.cmfs"

// installMountHelper links /sbin/mount.fuse.cmfs to the helper this run
// built, for the test's length: cleanup removes the link if it is still
// the one made here. An existing helper is not replaced: the test skips.
// Needs root (requireFUSE has checked).
func installMountHelper(t *testing.T) {
	t.Helper()
	bin := mountHelperPath(t)
	// A link an earlier run left (killed before its cleanup) points into
	// a binary directory of that run, gone since: it is replaced.
	if target, err := os.Readlink(sbinHelper); err == nil && strings.HasPrefix(filepath.Base(filepath.Dir(target)), binDirPrefix) {
		if _, err := os.Stat(target); errors.Is(err, os.ErrNotExist) {
			os.Remove(sbinHelper)
		}
	}
	if _, err := os.Lstat(sbinHelper); err == nil {
		t.Skipf("%s exists (an installed cmfs?): not replacing it to test the one built here", sbinHelper)
	}
	if err := os.Symlink(bin, sbinHelper); err != nil {
		t.Fatalf("install the helper: %v", err)
	}
	t.Cleanup(func() {
		if target, err := os.Readlink(sbinHelper); err == nil && target == bin {
			if err := os.Remove(sbinHelper); err != nil {
				t.Errorf("remove %s: %v", sbinHelper, err)
			}
		}
	})
}

// TestMountHelper mounts with mount(8) itself: `mount -t fuse.cmfs` and
// an fstab line (`mount --fstab FILE`, util-linux's alternative fstab,
// so /etc/fstab is never touched). mount(8) runs only helpers in /sbin,
// so the test links the helper it built there for its length (see
// installMountHelper: root only, removed in cleanup, never replacing an
// installed one). Each round trip: mount(8) returns once the mount
// answers, a write through it is journaled (cmfs events), `umount MNT`
// unmounts, and the mount process then exits having stopped cleanly. It
// is not this test's child, so its exit is judged by what it leaves: the
// mount record's clean flag (set only on a clean exit, after the journal
// and cmroot closed) and a log without errors.
func TestMountHelper(t *testing.T) {
	requireFUSE(t)
	installMountHelper(t)

	// prepare makes a backing directory with a file and a mountpoint, and
	// registers the cleanup every mount of the tests gets.
	prepare := func(t *testing.T, state string) *mounted {
		backing := filepath.Join(t.TempDir(), "backing")
		writeFile(t, filepath.Join(backing, "hello"), []byte("hello"))
		mp := filepath.Join(t.TempDir(), "mnt")
		if err := os.Mkdir(mp, 0o755); err != nil {
			t.Fatal(err)
		}
		m := &mounted{Backing: backing, Mnt: mp, State: filepath.Join(backing, ".cmfs")}
		if state != "" {
			m.State = state
		}
		m.CMRoot = filepath.Join(m.State, "cmroot")
		live.Store(mp, true)
		t.Cleanup(func() { m.unmountAndCheck(t) })
		return m
	}
	// roundTrip checks a mount mount(8) just made, and unmounts it with
	// umount(8).
	roundTrip := func(t *testing.T, m *mounted, retain string) {
		t.Helper()
		// mount(8) has returned: the mount must answer now, not soon.
		var st syscall.Statfs_t
		if err := syscall.Statfs(m.Mnt, &st); err != nil || st.Type != fuseSuperMagic {
			t.Fatalf("after mount(8) returned, statfs %s: f_type %#x, %v; want a FUSE mount", m.Mnt, st.Type, err)
		}
		if got := string(readFile(t, m.path("hello"))); got != "hello" {
			t.Fatalf("hello reads %q through the mount", got)
		}
		rec, err := statedir.ReadRecord(m.State)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Retain != retain || rec.Mountpoint != m.Mnt {
			t.Errorf("mount record %+v; want retain %s at %s", rec, retain, m.Mnt)
		}
		writeFile(t, m.path("written"), []byte("through mount(8)'s mount"))
		// Under sync=interval readers see an event once it is flushed.
		if !wait.Until(5*time.Second, func() bool {
			return slices.ContainsFunc(events(t, m.State), func(ev journal.Event) bool { return ev.Path == "written" })
		}) {
			t.Error("the write through the mount is not journaled")
		}

		if res := runTool(t, 30*time.Second, "umount", m.Mnt); res.Code != 0 {
			t.Fatalf("umount %s: %v", m.Mnt, res)
		}
		if isMounted(m.Mnt) {
			t.Fatalf("%s still mounted after umount", m.Mnt)
		}
		var pids []int
		if !wait.Until(15*time.Second, func() bool { pids = daemonPIDs(m.Mnt); return len(pids) == 0 }) {
			t.Fatalf("cmfs %v still running 15s after umount", pids)
		}
		if rec, err := statedir.ReadRecord(m.State); err != nil || !rec.Clean {
			t.Errorf("after umount the mount record says %+v, %v; want a clean stop", rec, err)
		}
		if log := string(readFile(t, filepath.Join(m.State, statedir.LogFile))); strings.Contains(log, "level=ERROR") {
			t.Errorf("the mount process logged errors:\n%s", log)
		}
	}

	t.Run("mount -t fuse.cmfs", func(t *testing.T) {
		m := prepare(t, "")
		res := runTool(t, 60*time.Second, "mount", "-t", "fuse.cmfs", m.Backing, m.Mnt,
			"-o", "retain=2h,allow_other,nofail,_netdev,sync=interval:20ms")
		if res.Code != 0 {
			t.Fatalf("mount -t fuse.cmfs: %v", res)
		}
		if mnt, ok := findMountInfo(m.Mnt); !ok || !strings.Contains(mnt.Options, "nosuid") {
			t.Errorf("mountinfo %+v; want nosuid (mount(8)'s user-safe default for FUSE)", mnt)
		}
		roundTrip(t, m, "2h0m0s")
	})

	t.Run("fstab", func(t *testing.T) {
		state := filepath.Join(t.TempDir(), "state")
		m := prepare(t, state)
		// The retention from a config file the line names.
		cfg := filepath.Join(t.TempDir(), "cmfs.yaml")
		writeFile(t, cfg, []byte("mount:\n  retain: 3h\n"))
		fstab := filepath.Join(t.TempDir(), "fstab")
		line := fmt.Sprintf("%s %s fuse.cmfs defaults,noauto,nofail,_netdev,x-systemd.requires-mounts-for=/,config=%s,state=%s,exclude=_tmp*,allow_other 0 0\n",
			m.Backing, m.Mnt, cfg, state)
		writeFile(t, fstab, []byte("# a comment\n"+line))
		if res := runTool(t, 60*time.Second, "mount", "--fstab", fstab, m.Mnt); res.Code != 0 {
			t.Fatalf("mount --fstab with %q: %v", line, res)
		}
		if _, err := os.Stat(filepath.Join(state, "journal.db")); err != nil {
			t.Errorf("state= not honoured: %v", err)
		}
		roundTrip(t, m, "3h0m0s")
	})

	t.Run("refusals", func(t *testing.T) {
		m := prepare(t, "")
		m.NoCheck = true // never mounted
		for _, tc := range []struct {
			name, opts, want string
		}{
			{"unknown option", "retain=1h,bogus", `mount.fuse.cmfs: unknown option "bogus"`},
			{"read-only", "ro", "mount.fuse.cmfs: option ro: cmfs mounts read-write only"},
			{"cmfs's own refusal", "retain=-1h", "--retain -1h0m0s: must be positive"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				res := runTool(t, 60*time.Second, "mount", "-t", "fuse.cmfs", m.Backing, m.Mnt, "-o", tc.opts)
				if res.Code == 0 {
					t.Fatalf("mount -o %s succeeded", tc.opts)
				}
				if !strings.Contains(res.Stderr, tc.want) || strings.Count(strings.TrimSpace(res.Stderr), "\n") != 0 {
					t.Errorf("mount -o %s: stderr %q; want one line containing %q", tc.opts, res.Stderr, tc.want)
				}
				if isMounted(m.Mnt) {
					t.Errorf("mount -o %s: mounted anyway", tc.opts)
				}
			})
		}
	})
}

// findMountInfo returns the mountinfo entry at mp.
func findMountInfo(mp string) (procfs.Mount, bool) {
	ms, err := procfs.Mounts()
	if err != nil {
		return procfs.Mount{}, false
	}
	var found procfs.Mount
	ok := false
	for _, m := range ms {
		if m.Point == mp {
			found, ok = m, true
		}
	}
	return found, ok
}

// TestUnitFiles checks dist/systemd's units with systemd-analyze verify,
// in a root of its own: the host's unit directory (for the targets the
// units name), the units, and the binaries this run built where
// systemd's search path finds a bare ExecStart name. Any output (an
// unknown key, a bad value) fails it. Without systemd-analyze it skips,
// and fails under CI (.ci/run installs systemd).
func TestUnitFiles(t *testing.T) {
	requireFUSE(t)
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("systemd-analyze is missing (Debian: apt-get install systemd; .ci/run installs it)")
		}
		t.Skip("systemd-analyze is missing (Debian: apt-get install systemd)")
	}
	const hostUnits = "/usr/lib/systemd/system"
	if _, err := os.Stat(filepath.Join(hostUnits, "multi-user.target")); err != nil {
		t.Skipf("no %s/multi-user.target to verify against: %v", hostUnits, err)
	}
	root := t.TempDir()
	copyTree(t, hostUnits, filepath.Join(root, hostUnits))
	units := filepath.Join(root, "etc/systemd/system")
	for _, name := range []string{"cmfs@.service", "replicad.service", "replicad-follow@.service"} {
		// As make install writes them for PREFIX=/usr.
		writeFile(t, filepath.Join(units, name), []byte(installedUnit(t, name, "/usr/bin")))
	}
	for _, bin := range []string{cmfsBin, replicadPath(t)} {
		copyFile(t, bin, filepath.Join(root, "usr/bin", filepath.Base(bin)), 0o755)
	}
	res := runTool(t, time.Minute, analyze, "verify", "--root="+root, "cmfs@mnt-warehouse.service", "replicad.service", "replicad-follow@replica.service")
	if res.Code != 0 || strings.TrimSpace(res.Stdout+res.Stderr) != "" {
		t.Errorf("systemd-analyze verify: %v", res)
	}
}

// installedUnit is dist/systemd/name as make install writes it, with
// bindir for @BINDIR@ and its sibling sbin for @SBINDIR@.
func installedUnit(t testing.TB, name, bindir string) string {
	t.Helper()
	b := readFile(t, filepath.Join(moduleRoot, "dist", "systemd", name))
	return strings.NewReplacer("@BINDIR@", bindir, "@SBINDIR@", filepath.Join(filepath.Dir(bindir), "sbin")).Replace(string(b))
}

// unitLine returns the value of the first line of unit that sets key.
func unitLine(t testing.TB, unit, key string) string {
	t.Helper()
	for _, l := range strings.Split(unit, "\n") {
		if v, ok := strings.CutPrefix(l, key+"="); ok {
			return v
		}
	}
	t.Fatalf("the unit sets no %s", key)
	return ""
}

// TestUnitExecStart runs cmfs@.service's ExecStart= as systemd would for
// the instance of a mountpoint: the unit's command line with its
// specifier and variable expanded, the environment file's variables in
// the environment (cmfs's own CMFS_MOUNT_* among them, one asking for
// --daemon, which the unit's --daemon=false must overrule), a notify
// socket. It must come up READY=1 in the foreground with the variables'
// settings, and stop cleanly at SIGTERM.
func TestUnitExecStart(t *testing.T) {
	requireFUSE(t)
	unit := installedUnit(t, "cmfs@.service", filepath.Dir(cmfsBin))
	if got := unitLine(t, unit, "EnvironmentFile"); got != "/etc/cmfs/%I.env" {
		t.Fatalf("EnvironmentFile=%s; the test stands in for /etc/cmfs/%%I.env", got)
	}
	backing := filepath.Join(t.TempDir(), "backing")
	if err := os.Mkdir(backing, 0o755); err != nil {
		t.Fatal(err)
	}
	mp := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(mp, 0o755); err != nil {
		t.Fatal(err)
	}
	m := &mounted{Backing: backing, Mnt: mp, State: filepath.Join(backing, ".cmfs")}
	m.CMRoot = filepath.Join(m.State, "cmroot")
	live.Store(mp, true)
	t.Cleanup(func() { m.unmountAndCheck(t) })

	env := map[string]string{"CMFS_BACKING": backing}
	// %f is the instance unescaped, a path: the mountpoint.
	var argv []string
	for _, w := range strings.Fields(unitLine(t, unit, "ExecStart")) {
		w = strings.ReplaceAll(w, "%f", mp)
		if name, ok := strings.CutPrefix(w, "${"); ok && strings.HasSuffix(name, "}") {
			w = env[strings.TrimSuffix(name, "}")]
		}
		argv = append(argv, w)
	}
	sock := newNotifySocket(t)
	p := startProcEnv(t, sock.env("CMFS_BACKING="+backing, "CMFS_MOUNT_RETAIN=72h", "CMFS_MOUNT_DAEMON=true"), argv[0], argv[1:]...)
	sock.until(t, p, 30*time.Second, "READY=1")
	if p.exited() {
		t.Fatalf("%s exited after READY=1 (forked?): %v", p.name, p.res)
	}
	if rec, err := statedir.ReadRecord(m.State); err != nil || rec.Retain != "72h0m0s" || rec.PID != p.cmd.Process.Pid {
		t.Errorf("mount record %+v, %v; want retain 72h from CMFS_MOUNT_RETAIN, mounted by the process started (pid %d)", rec, err, p.cmd.Process.Pid)
	}
	sock.terminate(t, p)
}

// copyFile copies src to dst (its directory made) with mode.
func copyFile(t testing.TB, src, dst string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, mode); err != nil {
		t.Fatal(err)
	}
}

// copyTree copies the directory src to dst, symlinks as they are.
func copyTree(t testing.TB, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		to := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(to, 0o755)
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			return os.Symlink(target, to)
		case d.Type().IsRegular():
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			return os.WriteFile(to, b, 0o644)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("copy %s: %v", src, err)
	}
}
