package bench

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/cmfs-project/cmfs/internal/procfs"
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
	ms, err := procfs.Mounts()
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(ms, func(m procfs.Mount) bool { return m.Point == mnt }), nil
}

// FUSEMountsUnder returns the FUSE mountpoints at or below dir, deepest
// first, so that they can be unmounted in order.
func FUSEMountsUnder(dir string) ([]string, error) {
	ms, err := procfs.Mounts()
	if err != nil {
		return nil, err
	}
	var found []string
	for _, m := range ms {
		if strings.HasPrefix(m.FSType, "fuse") && (m.Point == dir || strings.HasPrefix(m.Point, dir+"/")) {
			found = append([]string{m.Point}, found...)
		}
	}
	return found, nil
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
	ms, err := procfs.Mounts()
	if err != nil {
		return err
	}
	i := slices.IndexFunc(ms, func(m procfs.Mount) bool { return m.Point == mnt })
	if i < 0 {
		return fmt.Errorf("%s: not in mountinfo", mnt)
	}
	path := filepath.Join("/sys/fs/fuse/connections", fmt.Sprint(ms[i].Minor), "abort")
	return os.WriteFile(path, []byte("1\n"), 0)
}

// serverPIDs returns the processes whose command line holds both bin and
// mnt: the daemon a `bin mount ... mnt` left running.
func serverPIDs(bin, mnt string) []int {
	return procfs.PIDs(func(args []string) bool { return args[0] == bin && slices.Contains(args[1:], mnt) })
}
