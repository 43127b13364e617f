package bench

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"github.com/cmfs-project/cmfs/internal/procfs"
)

// Machine describes where a run took place.
type Machine struct {
	CPUs    int
	CPU     string
	Memory  string
	Kernel  string
	Backing string // filesystem of the backing directories
	Root    bool
	Go      string
	GoFuse  string // set by the caller, who knows the module
	Libfuse string
}

// Describe inspects this machine; dir is where the backing directories live.
func Describe(dir string) Machine {
	m := Machine{
		CPUs:   runtime.NumCPU(),
		CPU:    cpuModel(),
		Memory: memTotal(),
		Root:   os.Geteuid() == 0,
		Go:     runtime.Version(),
	}
	var u syscall.Utsname
	if err := syscall.Uname(&u); err == nil {
		m.Kernel = utsString(u.Sysname[:]) + " " + utsString(u.Release[:])
	}
	m.Backing = filesystem(dir)
	if out, err := exec.Command("pkg-config", "fuse3", "--modversion").Output(); err == nil {
		m.Libfuse = strings.TrimSpace(string(out))
	}
	return m
}

// Lines returns the description, one "key: value" per line.
func (m Machine) Lines() []string {
	or := func(s string) string {
		if s == "" {
			return "unknown"
		}
		return s
	}
	return []string{
		fmt.Sprintf("cpus: %d (%s)", m.CPUs, or(m.CPU)),
		fmt.Sprintf("memory: %s", or(m.Memory)),
		fmt.Sprintf("kernel: %s", or(m.Kernel)),
		fmt.Sprintf("backing filesystem: %s", or(m.Backing)),
		fmt.Sprintf("root: %v", m.Root),
		fmt.Sprintf("go: %s, go-fuse: %s, libfuse: %s", m.Go, or(m.GoFuse), or(m.Libfuse)),
	}
}

func utsString(b []int8) string {
	var s strings.Builder
	for _, c := range b {
		if c == 0 {
			break
		}
		s.WriteByte(byte(c))
	}
	return s.String()
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func memTotal() string {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var kb int64
		if _, err := fmt.Sscanf(sc.Text(), "MemTotal: %d kB", &kb); err == nil {
			return fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
		}
	}
	return ""
}

// filesystem names the filesystem holding dir: type, source device and
// mountpoint, from the longest mountinfo entry that contains it.
func filesystem(dir string) string {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return ""
	}
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	ms, err := procfs.Mounts()
	if err != nil {
		return ""
	}
	best, desc := "", ""
	for _, m := range ms {
		if !(dir == m.Point || m.Point == "/" || strings.HasPrefix(dir, m.Point+"/")) || len(m.Point) < len(best) {
			continue
		}
		best = m.Point
		desc = fmt.Sprintf("%s on %s (mounted at %s, options %s)", m.FSType, m.Source, m.Point, m.Options)
	}
	return desc
}
