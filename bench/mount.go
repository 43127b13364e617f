package bench

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// MountTimeout bounds the wait for a mount to appear and for a server to
// exit after its unmount.
const MountTimeout = 15 * time.Second

// device returns the st_dev of path.
func device(path string) (uint64, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	return st.Dev, nil
}

// waitMounted polls until mnt's st_dev differs from before, the server
// exits (exited is closed) or the deadline passes.
func waitMounted(mnt string, before uint64, exited <-chan struct{}) error {
	deadline := time.Now().Add(MountTimeout)
	for {
		if dev, err := device(mnt); err == nil && dev != before {
			return nil
		}
		select {
		case <-exited:
			return errors.New("server exited before the mount appeared")
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not mounted after %v", mnt, MountTimeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Mounted reports whether mnt is a mountpoint in this mount namespace.
func Mounted(mnt string) (bool, error) {
	points, err := mountpoints()
	if err != nil {
		return false, err
	}
	for _, p := range points {
		if p == mnt {
			return true, nil
		}
	}
	return false, nil
}

// FUSEMountsUnder returns the FUSE mountpoints at or below dir, deepest
// first, so that they can be unmounted in order.
func FUSEMountsUnder(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var found []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		point, fstype, ok := parseMountinfo(sc.Text())
		if !ok || !strings.HasPrefix(fstype, "fuse") {
			continue
		}
		if point == dir || strings.HasPrefix(point, dir+"/") {
			found = append([]string{point}, found...)
		}
	}
	return found, sc.Err()
}

func mountpoints() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var points []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if point, _, ok := parseMountinfo(sc.Text()); ok {
			points = append(points, point)
		}
	}
	return points, sc.Err()
}

// parseMountinfo returns the mountpoint and filesystem type of one line of
// /proc/self/mountinfo: "id parent major:minor root point opts [tags] - type source superopts".
func parseMountinfo(line string) (point, fstype string, ok bool) {
	fields := strings.Fields(line)
	if len(fields) < 5 {
		return "", "", false
	}
	point = unescapeMountinfo(fields[4])
	for i, f := range fields {
		if f == "-" && i+1 < len(fields) {
			return point, fields[i+1], true
		}
	}
	return point, "", true
}

// unescapeMountinfo undoes the octal escapes (\040 for space) of mountinfo.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var c byte
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &c); err == nil {
				b.WriteByte(c)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Unmount runs each command in turn until mnt is no longer mounted, then
// falls back to a lazy `fusermount3 -u -z`, so that no run leaves a FUSE
// mount behind. It returns an error only if mnt is still mounted at the end;
// the log of what failed before that is part of it.
func Unmount(mnt string, commands ...[]string) error {
	commands = append(commands, []string{"fusermount3", "-u", mnt}, []string{"fusermount3", "-u", "-z", mnt})
	var tried []string
	for _, c := range commands {
		if ok, err := Mounted(mnt); err == nil && !ok {
			return nil
		}
		out, err := exec.Command(c[0], c[1:]...).CombinedOutput()
		if err != nil {
			tried = append(tried, fmt.Sprintf("%s: %v: %s", strings.Join(c, " "), err, strings.TrimSpace(string(out))))
		}
	}
	if ok, err := Mounted(mnt); err == nil && !ok {
		return nil
	}
	return fmt.Errorf("unmount %s: still mounted (%s)", mnt, strings.Join(tried, "; "))
}

// abortConnection aborts the FUSE connection serving mnt through fusectl
// (/sys/fs/fuse/connections), so that calls blocked on a hung server return
// ENOTCONN. It never touches mnt itself, which would block too.
func abortConnection(mnt string) error {
	dev, err := mountinfoDevice(mnt)
	if err != nil {
		return err
	}
	minor := (dev & 0xff) | ((dev >> 12) & 0xfff00)
	path := filepath.Join("/sys/fs/fuse/connections", fmt.Sprint(minor), "abort")
	return os.WriteFile(path, []byte("1\n"), 0)
}

// serverPIDs returns the processes whose command line holds both bin and
// mnt: the daemon a `bin mount ... mnt` left running.
func serverPIDs(bin, mnt string) []int {
	dirs, _ := os.ReadDir("/proc")
	var pids []int
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if len(args) > 0 && args[0] == bin && slices.Contains(args[1:], mnt) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func mountinfoDevice(mnt string) (uint64, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 5 || unescapeMountinfo(fields[4]) != mnt {
			continue
		}
		var major, minor uint64
		if _, err := fmt.Sscanf(fields[2], "%d:%d", &major, &minor); err != nil {
			return 0, fmt.Errorf("mountinfo %q: %w", fields[2], err)
		}
		return (minor & 0xff) | (major << 8) | ((minor &^ 0xff) << 12), nil
	}
	return 0, fmt.Errorf("%s: not in mountinfo", mnt)
}
