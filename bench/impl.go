package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Impl is one filesystem implementation under test.
type Impl interface {
	// Name labels the implementation's column.
	Name() string
	// Mount serves backing at mnt and returns the mounted directory.
	// mnt must be an empty directory outside backing.
	Mount(ctx context.Context, backing, mnt string) (*Mount, error)
}

// Mount is a mounted implementation. Close unmounts it; it is safe to call
// more than once.
type Mount struct {
	// Dir is where workloads run: the mountpoint, or the backing
	// directory itself for Native.
	Dir string

	// Commit, when set, reads the commit path's counters (cmfs status
	// --json); it is nil for implementations that have none.
	Commit func(ctx context.Context) (*Commit, error)

	// CPU, when set, returns the CPU time (user and system, all threads)
	// the server's process has used so far; it is nil for Native, whose
	// work is done in the workload's own process.
	CPU func() (time.Duration, error)

	fuse    bool
	unmount func() error
	kill    func() error // the server, for Abort without fusectl
	once    sync.Once
	err     error
}

// Close unmounts and waits for the server to exit.
func (m *Mount) Close() error {
	m.once.Do(func() {
		if m.unmount != nil {
			m.err = m.unmount()
		}
	})
	return m.err
}

// Abort makes calls blocked on a hung server fail instead of hanging:
// it aborts the FUSE connection through fusectl where that is mounted, and
// kills the server otherwise (the kernel then aborts the connection).
// Close still has to unmount.
func (m *Mount) Abort() error {
	if !m.fuse {
		return errors.New("not a FUSE mount")
	}
	err := abortConnection(m.Dir)
	if err == nil || m.kill == nil {
		return err
	}
	if kerr := m.kill(); kerr != nil {
		return fmt.Errorf("%w; kill server: %v", err, kerr)
	}
	return nil
}

// Native is the backing directory itself, without FUSE.
type Native struct{}

func (Native) Name() string { return "native" }

func (Native) Mount(_ context.Context, backing, _ string) (*Mount, error) {
	return &Mount{Dir: backing}, nil
}

// Server is a FUSE server that runs in the foreground as a child process
// and exits when its mountpoint is unmounted, such as go-fuse's loopback
// or libfuse's passthrough_ll. The workload never shares its process.
type Server struct {
	Label string
	// Command returns the server's command line for backing and mnt.
	Command func(backing, mnt string) []string
	// Log receives the server's stdout and stderr; nil discards them.
	Log string
}

func (s *Server) Name() string { return s.Label }

func (s *Server) Mount(ctx context.Context, backing, mnt string) (*Mount, error) {
	before, err := device(mnt)
	if err != nil {
		return nil, err
	}
	argv := s.Command(backing, mnt)
	cmd := exec.Command(argv[0], argv[1:]...)
	// Its own process group: a ^C on the terminal reaches the harness,
	// which unmounts in order, not the server behind its back.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var logf *os.File
	if s.Log != "" {
		if logf, err = os.Create(s.Log); err != nil {
			return nil, err
		}
		cmd.Stdout, cmd.Stderr = logf, logf
	}
	if err := cmd.Start(); err != nil {
		if logf != nil {
			logf.Close()
		}
		return nil, fmt.Errorf("start %s: %w", s.Label, err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		if logf != nil {
			logf.Close()
		}
		close(exited)
	}()
	stop := func() error {
		err := Unmount(mnt)
		select {
		case <-exited:
		case <-time.After(MountTimeout):
			cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(MountTimeout):
				cmd.Process.Kill()
				<-exited
			}
		}
		return err
	}
	if err := waitMounted(mnt, before, exited); err != nil {
		stop()
		if waitErr != nil {
			err = fmt.Errorf("%w (%v)", err, waitErr)
		}
		return nil, fmt.Errorf("mount %s: %w%s", s.Label, err, logTail(s.Log))
	}
	pid := cmd.Process.Pid
	cpu := func() (time.Duration, error) { return ProcessCPU(pid) }
	return &Mount{Dir: mnt, fuse: true, unmount: stop, kill: cmd.Process.Kill, CPU: cpu}, nil
}

// Daemon is a FUSE server with its own mount and unmount commands, whose
// mount command returns once the mount is ready (cmfs mount --daemon).
type Daemon struct {
	Label string
	// MountCommand and UnmountCommand return command lines.
	MountCommand   func(backing, mnt string) []string
	UnmountCommand func(mnt string) []string
	// StatusCommand, if set, returns the command line that prints the
	// mount's status as JSON with its "commit" object (ParseCommit).
	StatusCommand func(backing, mnt string) []string
}

func (d *Daemon) Name() string { return d.Label }

func (d *Daemon) Mount(ctx context.Context, backing, mnt string) (*Mount, error) {
	before, err := device(mnt)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, MountTimeout)
	defer cancel()
	argv := d.MountCommand(backing, mnt)
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = &out, &out
	// The daemon must outlive the harness's ^C long enough to be unmounted.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stop := func() error { return Unmount(mnt, d.UnmountCommand(mnt)) }
	if err := cmd.Run(); err != nil {
		stop()
		return nil, fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, firstLines(out.String(), 5))
	}
	if err := waitMounted(mnt, before, nil); err != nil {
		stop()
		return nil, fmt.Errorf("%s returned but: %w", strings.Join(argv, " "), err)
	}
	kill := func() error {
		pids := serverPIDs(argv[0], mnt)
		if len(pids) == 0 {
			return fmt.Errorf("no %s process serving %s", argv[0], mnt)
		}
		for _, pid := range pids {
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				return fmt.Errorf("kill %d: %w", pid, err)
			}
		}
		return nil
	}
	// The server is the process --daemon left behind: found once, by its
	// command line, as kill finds it.
	var cpu func() (time.Duration, error)
	if pids := serverPIDs(argv[0], mnt); len(pids) == 1 {
		cpu = func() (time.Duration, error) { return ProcessCPU(pids[0]) }
	}
	m := &Mount{Dir: mnt, fuse: true, unmount: stop, kill: kill, CPU: cpu}
	if d.StatusCommand != nil {
		argv := d.StatusCommand(backing, mnt)
		m.Commit = func(ctx context.Context) (*Commit, error) {
			ctx, cancel := context.WithTimeout(ctx, MountTimeout)
			defer cancel()
			var stderr bytes.Buffer
			cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				return nil, fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, firstLines(stderr.String(), 3))
			}
			return ParseCommit(out)
		}
	}
	return m, nil
}

func logTail(path string) string {
	if path == "" {
		return ""
	}
	b, err := os.ReadFile(path)
	if err != nil || len(bytes.TrimSpace(b)) == 0 {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return fmt.Sprintf(" (%s: %s)", filepath.Base(path), strings.Join(lines, " | "))
}

func firstLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = append(lines[:n], "...")
	}
	return strings.Join(lines, " | ")
}
