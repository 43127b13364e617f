package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cmfs-project/cmfs/internal/procfs"
	"github.com/cmfs-project/cmfs/internal/statedir"
	"github.com/cmfs-project/cmfs/internal/wait"
	"github.com/cmfs-project/cmfs/journal"
)

// TestRealSystemd runs dist/systemd's units, as make install writes
// them, under a real systemd driven by systemctl: the distribution's
// systemd as PID 1 of namespaces of its own (realSystemd), since the
// machine's PID 1 need not be systemd. For each unit: systemctl start
// returns once the service does its work (checked the moment it
// returns, from outside), its status line says what it serves; a kill
// -9 of the main process is restarted; a main process that stops
// answering (SIGSTOP) is killed by the watchdog (SIGABRT: Go's stacks
// in the journal) and restarted; systemctl stop ends it with exit 0.
// The drop-ins only shorten RestartSec= and WatchdogSec= to keep the
// test quick (cmfs@.service sets no watchdog: the drop-in is the one
// docs/ops.md offers). A unit added to dist/systemd is one more row.
func TestRealSystemd(t *testing.T) {
	requireFUSE(t)
	systemd := systemdBinary(t)
	for _, tc := range []unitCase{
		{
			file:   "replicad.service",
			dropIn: "[Service]\nRestartSec=100ms\nWatchdogSec=3s\n",
			setup:  serveUnit,
		},
		{
			file:   "cmfs@.service",
			dropIn: "[Service]\nRestartSec=100ms\nWatchdogSec=3s\n",
			setup:  mountUnit,
		},
		{
			file:   "replicad-follow@.service",
			dropIn: "[Service]\nRestartSec=100ms\nWatchdogSec=3s\n",
			setup:  followUnit,
		},
	} {
		t.Run(tc.file, func(t *testing.T) { tc.run(t, systemd) })
	}
}

// unitCase is one unit of dist/systemd under a real systemd.
type unitCase struct {
	// file is the unit file in dist/systemd; dropIn, if set, is a drop-in
	// for it.
	file, dropIn string
	// setup writes the service's configuration into etc (paths relative
	// to /etc, such as cmfs/replicad.yaml) and says what to start and
	// check.
	setup func(t *testing.T, etc map[string]string) unitRun
}

// unitRun is a unit to start and what its service must do.
type unitRun struct {
	unit string // the unit started: "replicad.service", "cmfs@….service"
	// status is what StatusText= holds once the service is active.
	status string
	// answers says why the service does not do its work now, nil if it
	// does.
	answers func(t *testing.T, sd *realSystemd) error
	// restarted checks the service after each restart, stopped after
	// systemctl stop; either may be nil.
	restarted, stopped func(t *testing.T, sd *realSystemd)
}

func (tc unitCase) run(t *testing.T, systemd string) {
	unitText := installedUnit(t, tc.file, filepath.Dir(cmfsBin))
	units := map[string]string{tc.file: unitText}
	if tc.dropIn != "" {
		units[tc.file+".d/cmfs-test.conf"] = tc.dropIn
	}
	etc := map[string]string{}
	u := tc.setup(t, etc)
	sd := bootSystemd(t, systemd, units, etc)

	if res := sd.systemctl(t, "start", u.unit); res.Code != 0 {
		t.Fatalf("systemctl start %s: %v\n%s", u.unit, res, sd.journal(t, u.unit))
	}
	// systemctl start has returned: the service must work now, not soon.
	if got := sd.prop(t, u.unit, "ActiveState"); got != "active" {
		t.Fatalf("when systemctl start returned, %s is %s; want active\n%s", u.unit, got, sd.journal(t, u.unit))
	}
	if err := u.answers(t, sd); err != nil {
		t.Fatalf("when systemctl start %s returned: %v", u.unit, err)
	}
	if got := sd.prop(t, u.unit, "StatusText"); !strings.Contains(got, u.status) {
		t.Errorf("StatusText=%q; want it to contain %q", got, u.status)
	}
	check := func(after string) {
		t.Helper()
		if err := u.answers(t, sd); err != nil {
			t.Fatalf("%s is active again after %s, but: %v\n%s", u.unit, after, err, sd.journal(t, u.unit))
		}
		if u.restarted != nil {
			u.restarted(t, sd)
		}
	}

	pid := sd.mainPID(t, u.unit)
	sd.signal(t, pid, "KILL")
	pid = sd.waitRestart(t, u.unit, pid, 1)
	sd.waitJournal(t, u.unit, "Main process exited, code=killed, status=9/KILL")
	check("a kill -9")

	if strings.Contains(unitText+tc.dropIn, "\nWatchdogSec=") {
		// Stopped, it answers nothing and pings nothing.
		sd.signal(t, pid, "STOP")
		pid = sd.waitRestart(t, u.unit, pid, 2)
		sd.waitJournal(t, u.unit, "Failed with result 'watchdog'")
		sd.waitJournal(t, u.unit, "SIGABRT: abort")
		check("the watchdog's kill")
	}

	if res := sd.systemctl(t, "stop", u.unit); res.Code != 0 {
		t.Fatalf("systemctl stop %s: %v\n%s", u.unit, res, sd.journal(t, u.unit))
	}
	// An inactive unit is unloaded, its exit status forgotten; a failed
	// one is kept, and says why.
	got := sd.props(t, u.unit, "ActiveState", "Result")
	if got["ActiveState"] != "inactive" || got["Result"] != "success" {
		t.Errorf("after systemctl stop %s: %v; want inactive, Result=success\n%s", u.unit, got, sd.journal(t, u.unit))
	}
	// What systemd said of the stop: an exit 0 (any other exit, or a
	// signal, is logged as such and is no success).
	var stop string
	if !wait.Until(10*time.Second, func() bool {
		j := sd.journal(t, u.unit)
		i := strings.LastIndex(j, "Stopping "+u.unit)
		stop = j[max(i, 0):]
		return i >= 0 && strings.Contains(stop, "Stopped "+u.unit)
	}) {
		t.Fatalf("no stop of %s in its journal:\n%s", u.unit, stop)
	}
	if !strings.Contains(stop, "Deactivated successfully.") || strings.Contains(stop, "Main process exited") {
		t.Errorf("systemctl stop %s did not end in an exit 0:\n%s", u.unit, stop)
	}
	if u.stopped != nil {
		u.stopped(t, sd)
	}
}

// serveUnit is replicad.service serving a node's volume on a free
// loopback port, from /etc/cmfs/replicad.yaml, with the token every
// replicad of the tests shares.
func serveUnit(t *testing.T, etc map[string]string) unitRun {
	replicadPath(t) // built where the unit's @BINDIR@ says
	addr := freeAddr(t)
	vol := filepath.Join(t.TempDir(), "vol")
	etc["cmfs/replicad.yaml"] = fmt.Sprintf("serve:\n  node-id: n1\n  volume: [%q]\n  listen: %q\n  token-file: %q\n",
		vol, addr, os.Getenv(tokenEnv))
	return unitRun{
		unit:   "replicad.service",
		status: "listening on " + addr,
		answers: func(t *testing.T, _ *realSystemd) error {
			if res := replicad(t, "container", "list", "--server", addr); res.Code != 0 {
				return fmt.Errorf("replicad container list --server %s: %v", addr, res)
			}
			return nil
		},
		stopped: func(t *testing.T, _ *realSystemd) {
			if c, err := net.DialTimeout("tcp", addr, 5*time.Second); err == nil {
				c.Close()
				t.Errorf("%s still accepts connections after systemctl stop", addr)
			}
		},
	}
}

// mountUnit is cmfs@.service for a fresh mountpoint whose name systemd
// escapes (hive\x2dwarehouse), its instance as systemd-escape makes it,
// with /etc/cmfs/MOUNTPOINT.env naming the backing directory. A probe
// file is written through the mount each time it is checked.
func mountUnit(t *testing.T, etc map[string]string) unitRun {
	backing := filepath.Join(t.TempDir(), "backing")
	writeFile(t, filepath.Join(backing, "hello"), []byte("hello"))
	mp := filepath.Join(t.TempDir(), "hive-warehouse")
	if err := os.Mkdir(mp, 0o755); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(backing, ".cmfs")
	res := runTool(t, 10*time.Second, "systemd-escape", "--path", mp)
	if res.Code != 0 {
		t.Fatalf("systemd-escape --path %s: %v", mp, res)
	}
	instance := strings.TrimSpace(res.Stdout)
	etc[filepath.Join("cmfs", mp)+".env"] = "CMFS_BACKING=" + backing + "\n"
	return unitRun{
		unit:   "cmfs@" + instance + ".service",
		status: "mounted " + backing + " on " + mp,
		answers: func(t *testing.T, sd *realSystemd) error {
			var st syscall.Statfs_t
			if err := syscall.Statfs(sd.path(mp), &st); err != nil {
				return fmt.Errorf("statfs %s: %w", mp, err)
			}
			if st.Type != fuseSuperMagic {
				return fmt.Errorf("%s is not a FUSE mount (f_type %#x)", mp, st.Type)
			}
			if b, err := os.ReadFile(sd.path(filepath.Join(mp, "hello"))); err != nil || string(b) != "hello" {
				return fmt.Errorf("hello through the mount: %q, %v", b, err)
			}
			probe := sd.path(filepath.Join(mp, "probe"))
			if err := os.WriteFile(probe, []byte("written through the mount"), 0o644); err != nil {
				return fmt.Errorf("write through the mount: %w", err)
			}
			return nil
		},
		// The dead mount was detached (ExecStopPost=) before the new one
		// was made: cmfs refuses a mountpoint a dead FUSE mount holds, so
		// without it there would have been no restart.
		restarted: func(t *testing.T, sd *realSystemd) {
			if ms := sd.mountsAt(t, mp); len(ms) != 1 {
				t.Errorf("mounts at %s after the restart: %+v; want the new one alone", mp, ms)
			}
		},
		stopped: func(t *testing.T, sd *realSystemd) {
			if ms := sd.mountsAt(t, mp); len(ms) != 0 {
				t.Errorf("mounts at %s after systemctl stop: %+v", mp, ms)
			}
			if rec, err := statedir.ReadRecord(state); err != nil || !rec.Clean {
				t.Errorf("mount record after systemctl stop: %+v, %v; want a clean stop", rec, err)
			}
			verifyJournal(t, state)
			if res := cmfs(t, "fsck", "--state", state); res.Code != 0 {
				t.Errorf("cmfs fsck --state %s: %v", state, res)
			}
			if !slices.ContainsFunc(events(t, state), func(ev journal.Event) bool { return ev.Path == "probe" }) {
				t.Error("the writes through the mount were not journaled")
			}
		},
	}
}

// followUnit is replicad-follow@replica.service keeping a target loaded
// from a live source: a cmfs mount and its replicad serve, both run by
// the test outside systemd, named in
// /etc/cmfs/replicad-follow-replica.yaml. A file written through the
// mount before the start must be at the target when systemctl start
// returns (READY=1 means caught up); at every later check a new file
// written through the mount must reach the target.
func followUnit(t *testing.T, etc map[string]string) unitRun {
	m := mount(t)
	writeFile(t, m.path("w.db/t/part-0"), []byte("before the start\n"))
	srv := serve(t, m.State)
	target := filepath.Join(t.TempDir(), "replica")
	etc["cmfs/replicad-follow-replica.yaml"] = fmt.Sprintf("follow:\n  source: %q\n  target: %q\n  interval: 100ms\n  token-file: %q\n",
		srv.Addr, target, os.Getenv(tokenEnv))
	probes := 0
	return unitRun{
		unit:   "replicad-follow@replica.service",
		status: srv.Addr,
		answers: func(t *testing.T, sd *realSystemd) error {
			if probes == 0 {
				// At once: the start returned only once caught up.
				if b, err := os.ReadFile(sd.path(filepath.Join(target, "w.db/t/part-0"))); err != nil || string(b) != "before the start\n" {
					return fmt.Errorf("the file written before the start, at the target: %q, %v", b, err)
				}
			}
			probes++
			rel := fmt.Sprintf("w.db/t/probe-%d", probes)
			want := fmt.Sprintf("probe %d\n", probes)
			writeFile(t, m.path(rel), []byte(want))
			if !wait.Until(20*time.Second, func() bool {
				b, err := os.ReadFile(sd.path(filepath.Join(target, rel)))
				return err == nil && string(b) == want
			}) {
				return fmt.Errorf("%s, written through the source's mount, did not reach the target within 20s", rel)
			}
			return nil
		},
		// Stopped between rounds, the target is whole at the last event
		// it applied: every probe, the tree as the source has it.
		stopped: func(t *testing.T, sd *realSystemd) {
			checkTarget(t, "after systemctl stop", sd.path(target), sourceTree(t, m))
		},
	}
}

// systemdBinary returns the systemd to run as PID 1, skipping t where
// there is none (and failing it under CI, whose deps.sh installs it).
func systemdBinary(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/usr/lib/systemd/systemd", "/lib/systemd/systemd", "/usr/bin/systemd"} {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p
		}
	}
	const why = "no /usr/bin/systemd (Debian: apt-get install systemd)"
	if os.Getenv("CI") == "true" {
		t.Fatal(why + "; scripts/deps.sh installs it")
	}
	t.Skip(why)
	return ""
}

// realSystemd is a systemd, the distribution's own, that a test runs as
// PID 1 of PID, mount, UTS and cgroup namespaces of its own: a service
// manager as on a host, on a machine whose PID 1 is something else (a
// VM's init, a container's shell). It shares the host's network and file
// systems, and its root is the host's with:
//
//   - a fresh /proc, its PID namespace's; /proc/sys and /sys read-only;
//   - a cgroup2 at /sys/fs/cgroup whose root is a cgroup made for it (its
//     cgroup namespace's root), which it owns as systemd owns a host's;
//   - a tmpfs /run: its private bus /run/systemd/private, which
//     systemctl uses as root, its notify socket, the journal;
//   - /etc with the test's files laid over it (/etc/cmfs, journald's
//     drop-in) and its writes (machine-id) kept in /run;
//   - a pseudo-terminal as /dev/console, which systemd writes until
//     journald runs (and only to a terminal): the test keeps what it
//     says;
//   - the FUSE mounts copied from the host detached: a copy would keep
//     a mount alive after the host unmounts it, and its daemon running.
//
// Units come from one directory (SYSTEMD_UNIT_PATH): the test's, the few
// host units they need (hostUnits), and cmfs-test.target, the default,
// which starts journald and sysinit.target alone. No generator runs. The
// host's own unit directories stay out of its reach: their
// sysinit.target pulls in tmpfiles (which empties /tmp at boot), udev's
// trigger, sysctl and module loading, all of them the host's to run.
// With container= in its environment it behaves as in a container (it
// neither mounts, remounts nor unmounts the host's file systems, at boot
// or at shutdown); it runs without CAP_SYS_MODULE and CAP_SYS_TIME, the
// kernel's modules and clock being the host's. What it mounts is private
// to its mount namespace; a test reaches it through path. Cleanup kills
// PID 1, which kills every process of the namespace and with the last of
// them its mounts, and removes its cgroups.
type realSystemd struct {
	pid     int    // PID 1 of the namespaces, as this process numbers it
	bootLog string // what the boot script printed
	console *console
	done    chan struct{} // closed once PID 1 has exited
}

// hostUnits are the units copied from the host: the targets the units
// under test and a service's default dependencies name, and journald,
// so that a service's output is kept as on a host. Not journald's
// /dev/log socket: it links /dev/log, and /dev is the host's.
var hostUnits = []string{
	"sysinit.target", "local-fs.target", "shutdown.target", "network.target", "network-online.target",
	"systemd-journald.service", "systemd-journald.socket",
}

const testTarget = `[Unit]
Description=cmfs test: journald and nothing else
Wants=systemd-journald.service sysinit.target
After=systemd-journald.service sysinit.target
`

// journaldConf keeps journald to this namespace: the journal in /run,
// not in the host's /var/log/journal; the kernel's log, the host's, not
// read.
const journaldConf = "[Journal]\nStorage=volatile\nReadKMsg=no\n"

// bootScript runs as PID 1 of the new namespaces, makes the root
// realSystemd describes and becomes systemd. $1 is systemd, $2 the
// console, $3 the files to lay over /etc.
const bootScript = `set -euf
mount --make-rprivate /
mount -t proc proc /proc
mount --bind /proc/sys /proc/sys
mount -o remount,bind,ro /proc/sys
mount -o remount,bind,ro /sys
umount -R -l /sys/fs/cgroup 2>/dev/null || true
mount -t cgroup2 cgroup2 /sys/fs/cgroup
mount -t tmpfs -o mode=0755,nosuid,nodev tmpfs /run
mkdir -p /run/cmfs-test/etc /run/cmfs-test/work
cp -a "$3"/. /run/cmfs-test/etc/
mount -t overlay overlay -o lowerdir=/etc,upperdir=/run/cmfs-test/etc,workdir=/run/cmfs-test/work /etc
mount --bind "$2" /dev/console
detach_fuse() {
	while read -r line; do
		case $line in
		*" - fuse "* | *" - fuse."* | *" - fuseblk "*)
			set -- $line
			umount -l "$(printf '%b' "$5")" 2>/dev/null || true ;;
		esac
	done </proc/self/mountinfo
}
detach_fuse
exec setpriv --bounding-set=-sys_module,-sys_time -- "$1" --unit=cmfs-test.target --log-target=journal
`

// bootSystemd boots systemd with units (paths relative to the unit
// directory: "x.service", "x.service.d/y.conf") and etc (relative to
// /etc), and returns once systemctl is-system-running says running or
// degraded. It skips t where the kernel refuses the namespaces.
func bootSystemd(t *testing.T, systemd string, units, etc map[string]string) *realSystemd {
	t.Helper()
	dir := t.TempDir()
	unitDir, etcDir, noGenerators := filepath.Join(dir, "units"), filepath.Join(dir, "etc"), filepath.Join(dir, "generators")
	hostDir := "/usr/lib/systemd/system"
	if _, err := os.Stat(filepath.Join(hostDir, "sysinit.target")); err != nil {
		hostDir = "/lib/systemd/system"
	}
	for _, name := range hostUnits {
		writeFile(t, filepath.Join(unitDir, name), readFile(t, filepath.Join(hostDir, name)))
	}
	writeFile(t, filepath.Join(unitDir, "cmfs-test.target"), []byte(testTarget))
	for name, text := range units {
		writeFile(t, filepath.Join(unitDir, name), []byte(text))
	}
	writeFile(t, filepath.Join(etcDir, "systemd/journald.conf.d/cmfs-test.conf"), []byte(journaldConf))
	for name, text := range etc {
		writeFile(t, filepath.Join(etcDir, name), []byte(text))
	}
	if err := os.Mkdir(noGenerators, 0o755); err != nil {
		t.Fatal(err)
	}

	cgroup := makeCgroup(t)
	cg, err := os.Open(cgroup)
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Close()
	con := openConsole(t)
	bootLog, err := os.Create(filepath.Join(dir, "boot.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer bootLog.Close()

	cmd := exec.Command("sh", "-c", bootScript, "sh", systemd, con.slave.Name(), etcDir)
	cmd.Env = []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"container=cmfs-test",
		"SYSTEMD_UNIT_PATH=" + unitDir,
		"SYSTEMD_GENERATOR_PATH=" + noGenerators,
		"SYSTEMD_ENVIRONMENT_GENERATOR_PATH=" + noGenerators,
	}
	cmd.Stdout, cmd.Stderr = bootLog, bootLog
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS | syscall.CLONE_NEWUTS | syscall.CLONE_NEWCGROUP,
		// Born in its cgroup, so that its cgroup namespace's root is that.
		UseCgroupFD: true,
		CgroupFD:    int(cg.Fd()),
		// Should this process die without its cleanups (a test timeout).
		Pdeathsig: syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		if errors.Is(err, syscall.EPERM) {
			t.Skipf("the kernel refuses new PID, mount, UTS and cgroup namespaces: %v", err)
		}
		t.Fatalf("start systemd in namespaces of its own: %v", err)
	}
	sd := &realSystemd{pid: cmd.Process.Pid, bootLog: bootLog.Name(), console: con, done: make(chan struct{})}
	go func() { cmd.Wait(); close(sd.done) }()
	t.Cleanup(func() { sd.kill(t) })

	var state string
	booted := wait.Until(30*time.Second, func() bool {
		select {
		case <-sd.done:
			return true
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		out, _ := sd.command(ctx, "systemctl", "is-system-running").Output()
		state = strings.TrimSpace(string(out))
		return state == "running" || state == "degraded"
	})
	select {
	case <-sd.done:
		t.Fatalf("systemd exited as it booted\n%s", sd.diagnostics(t))
	default:
	}
	if !booted {
		t.Fatalf("systemd did not boot within 30s (is-system-running: %q)\n%s", state, sd.diagnostics(t))
	}
	if state == "degraded" {
		t.Logf("systemd booted degraded: %s", sd.systemctl(t, "--failed", "--no-pager").Stdout)
	}
	return sd
}

// makeCgroup makes a cgroup for systemd below this process's own in the
// cgroup2 hierarchy, wherever the host mounts it (/sys/fs/cgroup, or
// /sys/fs/cgroup/unified beside v1 controllers); cleanup kills what is
// left in it and removes it with what systemd made below.
func makeCgroup(t *testing.T) string {
	t.Helper()
	mounts, err := procfs.Mounts()
	if err != nil {
		t.Fatal(err)
	}
	var root string
	for _, m := range mounts {
		if m.FSType == "cgroup2" && (root == "" || m.Point == "/sys/fs/cgroup") {
			root = m.Point
		}
	}
	if root == "" {
		t.Fatal("no cgroup2 hierarchy mounted: systemd needs one to own")
	}
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	var own string
	for _, l := range strings.Split(string(self), "\n") {
		if p, ok := strings.CutPrefix(l, "0::"); ok {
			own = p
		}
	}
	dir, err := os.MkdirTemp(filepath.Join(root, own), "cmfs-systemd-")
	if err != nil {
		t.Fatalf("make a cgroup for systemd: %v", err)
	}
	t.Cleanup(func() {
		os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0)
		var dirs []string
		filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		slices.Reverse(dirs)
		// A cgroup is busy until its last process is reaped.
		if !wait.Until(10*time.Second, func() bool {
			for len(dirs) > 0 && os.Remove(dirs[0]) == nil {
				dirs = dirs[1:]
			}
			return len(dirs) == 0
		}) {
			t.Errorf("cgroups left: %v", dirs)
		}
	})
	return dir
}

// command is name run inside the namespaces (as root, systemctl reaches
// systemd through /run/systemd/private there); run runs it.
func (sd *realSystemd) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "nsenter", sd.nsenter(name, args)...)
}

func (sd *realSystemd) run(t testing.TB, timeout time.Duration, name string, args ...string) result {
	t.Helper()
	return runTool(t, timeout, "nsenter", sd.nsenter(name, args)...)
}

// nsenter is the arguments of nsenter that run name in the namespaces.
func (sd *realSystemd) nsenter(name string, args []string) []string {
	return append([]string{"-t", strconv.Itoa(sd.pid), "-m", "-p", "--", name}, args...)
}

func (sd *realSystemd) systemctl(t testing.TB, args ...string) result {
	t.Helper()
	return sd.run(t, time.Minute, "systemctl", args...)
}

// props returns unit's properties as systemctl show gives them.
func (sd *realSystemd) props(t testing.TB, unit string, names ...string) map[string]string {
	t.Helper()
	args := []string{"show", unit}
	for _, n := range names {
		args = append(args, "-p", n)
	}
	res := sd.systemctl(t, args...)
	if res.Code != 0 {
		t.Fatalf("systemctl %s: %v", strings.Join(args, " "), res)
	}
	out := map[string]string{}
	for _, l := range strings.Split(res.Stdout, "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			out[k] = v
		}
	}
	return out
}

func (sd *realSystemd) prop(t testing.TB, unit, name string) string {
	t.Helper()
	return sd.props(t, unit, name)[name]
}

// mainPID is unit's main process, as the namespace numbers it.
func (sd *realSystemd) mainPID(t testing.TB, unit string) int {
	t.Helper()
	pid, err := strconv.Atoi(sd.prop(t, unit, "MainPID"))
	if err != nil || pid == 0 {
		t.Fatalf("%s has no main process (MainPID: %v)", unit, err)
	}
	return pid
}

// signal sends sig ("KILL", "STOP") to the namespace's process pid.
func (sd *realSystemd) signal(t testing.TB, pid int, sig string) {
	t.Helper()
	res := sd.run(t, 10*time.Second, "sh", "-c", `kill -s "$1" "$2"`, "sh", sig, strconv.Itoa(pid))
	if res.Code != 0 {
		t.Fatalf("kill -s %s %d: %v", sig, pid, res)
	}
}

// waitRestart waits until systemd has restarted unit for the nth time
// and it is active again, with a main process other than old, which it
// returns. A unit that failed (systemd gave up on it) fails t at once.
func (sd *realSystemd) waitRestart(t testing.TB, unit string, old, n int) int {
	t.Helper()
	var p map[string]string
	if !wait.Until(30*time.Second, func() bool {
		p = sd.props(t, unit, "NRestarts", "ActiveState", "MainPID")
		return p["ActiveState"] == "failed" ||
			p["NRestarts"] == strconv.Itoa(n) && p["ActiveState"] == "active" && p["MainPID"] != "0" && p["MainPID"] != strconv.Itoa(old)
	}) || p["ActiveState"] == "failed" {
		t.Fatalf("%s not restarted and active again (restart %d) after main process %d ended: %v\n%s", unit, n, old, p, sd.journal(t, unit))
	}
	pid, _ := strconv.Atoi(p["MainPID"])
	return pid
}

// journal is what the journal holds of unit: its output and systemd's
// messages about it.
func (sd *realSystemd) journal(t testing.TB, unit string) string {
	t.Helper()
	return sd.run(t, 30*time.Second, "journalctl", "--no-pager", "-u", unit).Stdout
}

// waitJournal waits until the journal of unit holds a line containing
// want (journald files messages as they come, after the event).
func (sd *realSystemd) waitJournal(t testing.TB, unit, want string) {
	t.Helper()
	var j string
	if !wait.Until(10*time.Second, func() bool { j = sd.journal(t, unit); return strings.Contains(j, want) }) {
		t.Fatalf("the journal of %s has no %q:\n%s", unit, want, j)
	}
}

// path is p as processes in the namespaces see it (their mounts).
func (sd *realSystemd) path(p string) string {
	return fmt.Sprintf("/proc/%d/root%s", sd.pid, p)
}

// mountsAt lists the mounts at p in the namespaces' mount table.
func (sd *realSystemd) mountsAt(t testing.TB, p string) []procfs.Mount {
	t.Helper()
	b := readFile(t, fmt.Sprintf("/proc/%d/mountinfo", sd.pid))
	var out []procfs.Mount
	for _, l := range strings.Split(string(b), "\n") {
		if m, ok := procfs.ParseMount(l); ok && m.Point == p {
			out = append(out, m)
		}
	}
	return out
}

// diagnostics is what there is to read of a systemd that failed the
// test: the whole journal, its console and the boot script's output.
func (sd *realSystemd) diagnostics(t testing.TB) string {
	var journal []byte
	select {
	case <-sd.done:
	default:
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		journal, _ = sd.command(ctx, "journalctl", "--no-pager", "-o", "short-monotonic").CombinedOutput()
	}
	boot, _ := os.ReadFile(sd.bootLog)
	return fmt.Sprintf("journal:\n%s\nconsole:\n%s\nboot script:\n%s", journal, sd.console.String(), boot)
}

// kill ends the namespaces: SIGKILL to their PID 1 kills every process
// in them, and the last to go takes the mounts with it.
func (sd *realSystemd) kill(t testing.TB) {
	if t.Failed() {
		t.Logf("systemd of the failed test:\n%s", sd.diagnostics(t))
	}
	syscall.Kill(sd.pid, syscall.SIGKILL)
	select {
	case <-sd.done:
	case <-time.After(30 * time.Second):
		t.Errorf("systemd (pid %d) still running 30s after SIGKILL", sd.pid)
	}
}

// console is a pseudo-terminal whose output is kept: its slave side
// stands in for /dev/console. Cleanup closes it.
type console struct {
	master, slave *os.File
	mu            sync.Mutex
	out           bytes.Buffer
	done          chan struct{}
}

func openConsole(t testing.TB) *console {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := master.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var n uint32
	if cerr := rc.Control(func(fd uintptr) {
		if err = unix.IoctlSetPointerInt(int(fd), unix.TIOCSPTLCK, 0); err == nil {
			n, err = unix.IoctlGetUint32(int(fd), unix.TIOCGPTN)
		}
	}); cerr != nil || err != nil {
		master.Close()
		t.Fatalf("pseudo-terminal: %v %v", cerr, err)
	}
	// Held open so that the master reads on while systemd closes its end.
	slave, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		master.Close()
		t.Fatal(err)
	}
	c := &console{master: master, slave: slave, done: make(chan struct{})}
	t.Cleanup(c.close)
	go func() {
		defer close(c.done)
		buf := make([]byte, 4096)
		for {
			k, err := master.Read(buf)
			c.mu.Lock()
			c.out.Write(bytes.ReplaceAll(buf[:k], []byte("\r"), nil))
			c.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	return c
}

func (c *console) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out.String()
}

func (c *console) close() {
	c.master.Close()
	<-c.done
	c.slave.Close()
}
