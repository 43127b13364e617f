// Package procfs reads what Linux's /proc says about the mounts this
// process sees (/proc/self/mountinfo) and about the processes running
// (/proc/PID/cmdline): cmfs checks its mountpoints with it, the benchmarks
// and the integration tests find the mounts and the daemons they left.
package procfs

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Mount is one line of /proc/self/mountinfo.
type Mount struct {
	Major, Minor uint32 // the device of the filesystem
	Point        string // where it is mounted
	Options      string // the per-mount options
	FSType       string // "ext4", "fuse.cmfs"…
	Source       string
}

// Mounts reads /proc/self/mountinfo, in its order: a later mount on the
// same point stacks on an earlier one.
func Mounts() ([]Mount, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Mount
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if m, ok := ParseMount(sc.Text()); ok {
			out = append(out, m)
		}
	}
	return out, sc.Err()
}

// ParseMount parses one mountinfo line:
// "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue".
func ParseMount(line string) (Mount, bool) {
	pre, post, ok := strings.Cut(line, " - ")
	if !ok {
		return Mount{}, false
	}
	f, g := strings.Fields(pre), strings.Fields(post)
	if len(f) < 6 || len(g) < 2 {
		return Mount{}, false
	}
	var m Mount
	if _, err := fmt.Sscanf(f[2], "%d:%d", &m.Major, &m.Minor); err != nil {
		return Mount{}, false
	}
	m.Point, m.Options = Unescape(f[4]), f[5]
	m.FSType, m.Source = g[0], Unescape(g[1])
	return m, true
}

// Unescape undoes the kernel's \ooo escaping of space, tab, newline and
// backslash in mountinfo.
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Mounted says whether point is a mountpoint; false when mountinfo cannot
// be read.
func Mounted(point string) bool {
	ms, _ := Mounts()
	for _, m := range ms {
		if m.Point == point {
			return true
		}
	}
	return false
}

// PIDs returns the processes other than this one whose command line
// match accepts: a daemon found by its arguments. Processes that exit
// meanwhile are passed over.
func PIDs(match func(args []string) bool) []int {
	dirs, _ := os.ReadDir("/proc")
	var pids []int
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err != nil || len(b) == 0 {
			continue
		}
		if match(strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")) {
			pids = append(pids, pid)
		}
	}
	return pids
}
