package bench

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/procfs"
)

// ProcessCPU returns the CPU time, user and system, that process pid and
// all its threads have used so far (/proc/PID/stat).
func ProcessCPU(pid int) (time.Duration, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0, fmt.Errorf("process %d: %w", pid, err)
	}
	st, err := p.Stat()
	if err != nil {
		return 0, fmt.Errorf("process %d: %w", pid, err)
	}
	return time.Duration(st.CPUTime() * float64(time.Second)), nil
}

// Proc is a process a benchmark run started (a replicad serve, say), its
// stdout and stderr in a log file.
type Proc struct {
	Name string
	Cmd  *exec.Cmd
	Log  string // the log file
	done chan struct{}
	err  error
}

// StartProc starts argv with its output in dir/name.log, in a process
// group of its own: a ^C reaches the harness, which stops it.
func StartProc(dir, name string, argv ...string) (*Proc, error) {
	logPath := filepath.Join(dir, name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Proc{Name: name, Cmd: cmd, Log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	return p, nil
}

// Done is closed once the process has exited; Err then says how.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Err is the process's exit error, once Done is closed.
func (p *Proc) Err() error { return p.err }

// Exited describes how the process ended, with the end of its log, for
// an error message; call it once Done is closed.
func (p *Proc) Exited() string { return fmt.Sprintf("%v%s", p.err, p.tail()) }

// Stop sends SIGTERM, then SIGKILL after 10 s, and returns once the
// process is gone.
func (p *Proc) Stop() {
	select {
	case <-p.done:
		return
	default:
	}
	p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		p.Cmd.Process.Kill()
		<-p.done
	}
}

// tail is the last lines of the log, " (name.log: a | b | c)", or "".
func (p *Proc) tail() string {
	b, err := os.ReadFile(p.Log)
	if err != nil || len(strings.TrimSpace(string(b))) == 0 {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return " (" + filepath.Base(p.Log) + ": " + strings.Join(lines, " | ") + ")"
}
