package integration

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/internal/wait"
	"github.com/cmfs-project/cmfs/journal"
)

// The replicad tests drive the real bin/replicad against real cmfs
// mounts: dumps are cut with `replicad dump`, applied with `replicad
// load`, files are served by `replicad serve` on a free loopback port.

var (
	replicadOnce sync.Once
	// replicadBin is the binary replicadPath builds, next to cmfsBin so
	// that TestMain's cleanup removes it too.
	replicadBin string
	replicadErr error
)

// replicadPath builds ./cmd/replicad once per run and returns the binary;
// a build failure fails every test that needs it.
func replicadPath(t testing.TB) string {
	t.Helper()
	requireFUSE(t)
	replicadOnce.Do(func() {
		bin := filepath.Join(filepath.Dir(cmfsBin), "replicad")
		build := exec.Command("go", "build", "-o", bin, "./cmd/replicad")
		build.Dir = moduleRoot
		if out, err := build.CombinedOutput(); err != nil {
			replicadErr = fmt.Errorf("go build ./cmd/replicad: %v\n%s", err, out)
			return
		}
		replicadBin = bin
	})
	if replicadErr != nil {
		t.Fatal(replicadErr)
	}
	return replicadBin
}

// replicad runs the replicad binary with args and a deadline.
func replicad(t testing.TB, args ...string) result {
	t.Helper()
	return runTool(t, 2*time.Minute, replicadPath(t), args...)
}

// mustReplicad runs replicad and fails t unless it exits 0.
func mustReplicad(t testing.TB, args ...string) result {
	t.Helper()
	res := replicad(t, args...)
	if res.Code != 0 {
		t.Fatalf("replicad %s: %v", strings.Join(args, " "), res)
	}
	return res
}

// expectReplicadRefusal checks that a replicad run failed the way bad
// input must: non-zero exit, exactly one line on stderr starting with
// "replicad: ", and that line mentioning every string in want
// (case-insensitively; "a|b" is either). It returns the line.
func expectReplicadRefusal(t testing.TB, args []string, res result, want ...string) string {
	t.Helper()
	cmd := "replicad " + strings.Join(args, " ")
	if res.Code == 0 {
		t.Errorf("%s: exit 0, want a refusal\n%v", cmd, res)
		return ""
	}
	msg := strings.TrimSuffix(res.Stderr, "\n")
	if !strings.HasPrefix(msg, "replicad: ") || strings.Contains(msg, "\n") {
		t.Errorf("%s: exit %d with stderr %q, want one line starting with \"replicad: \"", cmd, res.Code, res.Stderr)
		return msg
	}
	for _, w := range want {
		found := false
		for _, alt := range strings.Split(w, "|") {
			found = found || strings.Contains(strings.ToLower(msg), strings.ToLower(alt))
		}
		if !found {
			t.Errorf("%s: stderr %q does not mention %q", cmd, msg, w)
		}
	}
	t.Logf("%s: exit %d: %s", cmd, res.Code, msg)
	return msg
}

// dumpInfo is what `replicad dump --json` prints.
type dumpInfo struct {
	Dump string `json:"dump"`
	Kind string `json:"kind"`
	From uint64 `json:"from"`
	To   uint64 `json:"to"`
}

// replDump cuts a dump of the mount whose state directory is state below
// out; extra are further flags (--from, --to, ...).
func replDump(t testing.TB, state, out string, extra ...string) dumpInfo {
	t.Helper()
	args := append([]string{"dump", "--state", state, "--out", out, "--json"}, extra...)
	res := mustReplicad(t, args...)
	var d dumpInfo
	if err := json.Unmarshal([]byte(strings.TrimSpace(res.Stdout)), &d); err != nil {
		t.Fatalf("replicad %s: stdout is not one JSON object: %v\n%v", strings.Join(args, " "), err, res)
	}
	if d.Dump == "" {
		t.Fatalf("replicad %s: no dump directory in %q", strings.Join(args, " "), res.Stdout)
	}
	if _, err := os.Stat(filepath.Join(d.Dump, "_finished_dump")); err != nil {
		t.Fatalf("replicad %s: exit 0 but %v", strings.Join(args, " "), err)
	}
	return d
}

// incremental cuts the INCREMENTAL dump [from, to] and checks what
// replicad says it wrote.
func incremental(t testing.TB, state, out string, from, to uint64) dumpInfo {
	t.Helper()
	d := replDump(t, state, out, "--from", strconv.FormatUint(from, 10), "--to", strconv.FormatUint(to, 10))
	if d.Kind != "INCREMENTAL" || d.From != from || d.To != to {
		t.Fatalf("replicad dump --from %d --to %d: got %+v", from, to, d)
	}
	return d
}

// loadInfo is what `replicad load --json` prints.
type loadInfo struct {
	From    uint64 `json:"from"`
	To      uint64 `json:"to"`
	Applied int    `json:"applied"`
	Files   int    `json:"files"`
	Bytes   int64  `json:"bytes"`
}

// loadArgs are the arguments of a load of dump into target fetching from
// src: a state directory (--source-state) or a served address (--source).
func loadArgs(dump, target string, src fetchFrom) []string {
	args := []string{"load", "--dump", dump, "--target", target, "--json"}
	if src.Addr != "" {
		return append(args, "--source", src.Addr)
	}
	return append(args, "--source-state", src.State)
}

// fetchFrom says where a load fetches content: exactly one is set.
type fetchFrom struct {
	State string // --source-state
	Addr  string // --source
}

func (f fetchFrom) String() string {
	if f.Addr != "" {
		return "--source " + f.Addr
	}
	return "--source-state " + f.State
}

// replLoad loads dump into target and returns what replicad reports.
func replLoad(t testing.TB, dump, target string, src fetchFrom) loadInfo {
	t.Helper()
	args := loadArgs(dump, target, src)
	res := mustReplicad(t, args...)
	var l loadInfo
	if err := json.Unmarshal([]byte(strings.TrimSpace(res.Stdout)), &l); err != nil {
		t.Fatalf("replicad %s: stdout is not one JSON object: %v\n%v", strings.Join(args, " "), err, res)
	}
	return l
}

// replStatus is what `replicad status --json` prints.
type replStatus struct {
	LastReplID uint64    `json:"last_repl_id"`
	Dump       string    `json:"dump"`
	Time       time.Time `json:"time"`
}

// statusOf returns the target's replication status.
func statusOf(t testing.TB, target string) replStatus {
	t.Helper()
	res := mustReplicad(t, "status", "--target", target, "--json")
	var s replStatus
	if err := json.Unmarshal([]byte(strings.TrimSpace(res.Stdout)), &s); err != nil {
		t.Fatalf("replicad status --target %s --json: %v\n%v", target, err, res)
	}
	return s
}

// lastEventID is the journal's newest event id, from `cmfs status --json`.
func lastEventID(t testing.TB, state string) uint64 {
	t.Helper()
	res := cmfs(t, "status", "--state", state, "--json")
	if res.Code != 0 {
		t.Fatalf("cmfs status --state %s --json: %v", state, res)
	}
	var st struct {
		LastEventID *uint64 `json:"last_event_id"`
	}
	if err := json.Unmarshal([]byte(res.Stdout), &st); err != nil || st.LastEventID == nil {
		t.Fatalf("cmfs status --json: no last_event_id (%v) in %q", err, res.Stdout)
	}
	return *st.LastEventID
}

// proc is a background process a test started; t.Cleanup kills it.
type proc struct {
	name           string
	cmd            *exec.Cmd
	stdout, stderr string // files the output goes to
	done           chan struct{}
	res            result // valid once done is closed
}

// startProc starts name with args in the background. Output goes to
// files, so a process that is killed leaves nothing blocking.
func startProc(t testing.TB, name string, args ...string) *proc {
	t.Helper()
	return startProcEnv(t, nil, name, args...)
}

// startProcEnv is startProc with env added to this process's
// environment.
func startProcEnv(t testing.TB, env []string, name string, args ...string) *proc {
	t.Helper()
	dir := t.TempDir()
	p := &proc{
		name:   filepath.Base(name) + " " + strings.Join(args, " "),
		stdout: filepath.Join(dir, "stdout"),
		stderr: filepath.Join(dir, "stderr"),
		done:   make(chan struct{}),
	}
	out, err := os.Create(p.stdout)
	if err != nil {
		t.Fatal(err)
	}
	errf, err := os.Create(p.stderr)
	if err != nil {
		out.Close()
		t.Fatal(err)
	}
	p.cmd = exec.Command(name, args...)
	p.cmd.Stdout, p.cmd.Stderr = out, errf
	if env != nil {
		p.cmd.Env = append(os.Environ(), env...)
	}
	if err := p.cmd.Start(); err != nil {
		out.Close()
		errf.Close()
		t.Fatalf("start %s: %v", p.name, err)
	}
	go func() {
		err := p.cmd.Wait()
		out.Close()
		errf.Close()
		code := 0
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			code = exit.ExitCode()
			if code < 0 {
				code = 128 + int(exit.Sys().(syscall.WaitStatus).Signal())
			}
		} else if err != nil {
			code = -1
		}
		o, _ := os.ReadFile(p.stdout)
		e, _ := os.ReadFile(p.stderr)
		p.res = result{Stdout: string(o), Stderr: string(e), Code: code}
		close(p.done)
	}()
	t.Cleanup(p.kill)
	return p
}

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// wait waits for the process to end, failing t (and killing it) at the
// deadline.
func (p *proc) wait(t testing.TB, timeout time.Duration) result {
	t.Helper()
	select {
	case <-p.done:
		return p.res
	case <-time.After(timeout):
		p.kill()
		t.Fatalf("%s: no exit within %v", p.name, timeout)
		return result{}
	}
}

// kill sends SIGKILL (by pid) unless the process has ended, and reaps it.
func (p *proc) kill() {
	if p.exited() {
		return
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// stderrNow is what the process wrote on stderr so far.
func (p *proc) stderrNow() string {
	b, _ := os.ReadFile(p.stderr)
	return string(b)
}

// server is a running `replicad serve`.
type server struct {
	*proc
	Addr  string
	State string
}

// freeAddr returns a loopback address whose port was free a moment ago.
func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// serve starts `replicad serve` for the state directory on a free
// loopback port and waits until it accepts connections.
func serve(t testing.TB, state string) *server {
	t.Helper()
	var last error
	for range 5 {
		s, err := serveAt(t, state, freeAddr(t), 5*time.Second)
		if err == nil {
			return s
		}
		last = err
		if !strings.Contains(err.Error(), "in use") {
			break
		}
	}
	t.Fatal(last)
	return nil
}

// serveAt starts `replicad serve` on addr. A bind failure (the port not
// yet free) is retried until bindTimeout; any other early exit, or no
// listener within 15s, is an error.
func serveAt(t testing.TB, state, addr string, bindTimeout time.Duration) (*server, error) {
	t.Helper()
	bin := replicadPath(t)
	p, err := startListening(bindTimeout, func() *proc {
		return startProc(t, bin, "serve", "--state", state, "--listen", addr)
	}, func(*proc) bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return false
		}
		c.Close()
		return true
	})
	if err != nil {
		return nil, err
	}
	return &server{proc: p, Addr: addr, State: state}, nil
}

// startListening starts a server with start until listening says it
// listens: started again while it exits because its port is not yet free
// (a restart on the old port), for at most bindTimeout. Any other early
// exit, or no listener within 15s, is an error.
func startListening(bindTimeout time.Duration, start func() *proc, listening func(*proc) bool) (*proc, error) {
	var (
		p   *proc
		err error
	)
	wait.Until(bindTimeout, func() bool {
		p = start()
		up := false
		if !wait.Until(15*time.Second, func() bool { up = listening(p); return up || p.exited() }) {
			p.kill()
			err = fmt.Errorf("%s: not listening after 15s; stderr: %s", p.name, p.stderrNow())
			return true
		}
		if up {
			err = nil
			return true
		}
		err = fmt.Errorf("%s exited before listening: %v", p.name, p.res)
		return !strings.Contains(p.res.Stderr, "in use")
	})
	return p, err
}

// tree is a snapshot of a directory tree for comparison: every path below
// the root (slash-separated, relative) mapped to "dir", "symlink -> T",
// or "file <size> <xxh64>" computed from all of its bytes.
type tree map[string]string

// readTree snapshots the tree below root, leaving out the top-level names
// in skip.
func readTree(t testing.TB, root string, skip ...string) tree {
	t.Helper()
	tr, err := tryReadTree(root, skip...)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// tryReadTree is readTree for a tree that may change while it is read.
func tryReadTree(root string, skip ...string) (tree, error) {
	tr := tree{}
	err := walkRel(root, skip, func(rel, path string, d fs.DirEntry) error {
		switch {
		case d.IsDir():
			tr[rel] = "dir"
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			tr[rel] = "symlink -> " + target
		case d.Type().IsRegular():
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			tr[rel] = fileValue(b)
		default:
			tr[rel] = "special " + d.Type().String()
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read tree %s: %w", root, err)
	}
	return tr, nil
}

// fileValue is a tree's value for a file holding b.
func fileValue(b []byte) string { return fmt.Sprintf("file %d %s", len(b), journal.Sum(b)) }

// sourceTree is the warehouse tree of a mount, without its state directory.
func sourceTree(t testing.TB, m *mounted) tree { return readTree(t, m.Backing, ".cmfs") }

// targetNames are the names replicad keeps at a load target's root.
var targetNames = []string{".replstate", ".repl-staging", ".repl-lock"}

// targetTree is a load target's tree without the names replicad keeps
// there (targetNames).
func targetTree(t testing.TB, target string) tree {
	return readTree(t, target, targetNames...)
}

// diffTree describes how got differs from want, "" if it does not; at most
// 40 lines.
func diffTree(got, want tree) string {
	keys := make([]string, 0, len(got))
	for k := range got {
		keys = append(keys, k)
	}
	for k := range want {
		if _, ok := got[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var lines []string
	for _, k := range keys {
		g, gok := got[k]
		w, wok := want[k]
		switch {
		case !gok:
			lines = append(lines, fmt.Sprintf("  %s: missing, want %s", k, w))
		case !wok:
			lines = append(lines, fmt.Sprintf("  %s: got %s, want nothing", k, g))
		case g != w:
			lines = append(lines, fmt.Sprintf("  %s: got %s, want %s", k, g, w))
		}
	}
	if len(lines) > 40 {
		lines = append(lines[:40], fmt.Sprintf("  ... and %d more", len(lines)-40))
	}
	if len(lines) == 0 {
		return ""
	}
	return strings.Join(lines, "\n") + "\n"
}

// checkTarget fails t if target's tree differs from want.
func checkTarget(t testing.TB, what, target string, want tree) {
	t.Helper()
	if d := diffTree(targetTree(t, target), want); d != "" {
		t.Fatalf("%s: target %s differs from the source (got vs want):\n%s", what, target, d)
	}
}

// history is the source tree after each operation of a test, keyed by the
// journal's newest event id right after it: the states a target that
// loaded up to that id must be in.
type history struct {
	m     *mounted
	ids   []uint64 // recorded ids, ascending
	trees map[uint64]tree
	ops   map[uint64]string // the operation that ended at the id
}

// newHistory records the mount's state as it is now.
func newHistory(t testing.TB, m *mounted) *history {
	t.Helper()
	h := &history{m: m, trees: map[uint64]tree{}, ops: map[uint64]string{}}
	h.record(t, "start")
	return h
}

// record snapshots the source after op and returns the newest event id.
// An operation that changed the tree without an event fails t: a replica
// could not follow it.
func (h *history) record(t testing.TB, op string) uint64 {
	t.Helper()
	id := lastEventID(t, h.m.State)
	tr := sourceTree(t, h.m)
	if n := len(h.ids); n > 0 && id < h.ids[n-1] {
		t.Fatalf("after %s: newest event id went back from %d to %d", op, h.ids[n-1], id)
	}
	if prev, ok := h.trees[id]; ok {
		if d := diffTree(tr, prev); d != "" {
			t.Fatalf("%s changed the source tree without a journal event (still at %d, after %s):\n%s", op, id, h.ops[id], d)
		}
		return id
	}
	h.ids = append(h.ids, id)
	h.trees[id] = tr
	h.ops[id] = op
	return id
}

// last is the newest recorded event id.
func (h *history) last() uint64 { return h.ids[len(h.ids)-1] }

// at is the source tree at event id, which must have been recorded.
func (h *history) at(t testing.TB, id uint64) tree {
	t.Helper()
	tr, ok := h.trees[id]
	if !ok {
		t.Fatalf("event %d ends no recorded operation: no source tree to compare with", id)
	}
	return tr
}

// awaitFollow waits until the target holds the source's tree as it is now
// and its state is at the source's newest event, and returns that event;
// it fails t at once if follow exits.
func awaitFollow(t *testing.T, what string, m *mounted, target string, follow *proc, timeout time.Duration) uint64 {
	t.Helper()
	want := sourceTree(t, m)
	last := lastEventID(t, m.State)
	start := time.Now()
	var diff string
	ok := wait.Until(timeout, func() bool {
		if follow.exited() {
			return true
		}
		if id := stateID(target); id < last {
			diff = fmt.Sprintf("target at event %d, source at %d", id, last)
			return false
		}
		got, err := tryReadTree(target, targetNames...)
		if err != nil {
			diff = err.Error()
			return false
		}
		diff = diffTree(got, want)
		return diff == ""
	})
	if follow.exited() {
		t.Fatalf("%s: replicad follow exited: %v", what, follow.res)
	}
	if !ok {
		t.Fatalf("%s: the target did not catch up within %v: %s\nfollow stderr: %s", what, timeout, diff, follow.stderrNow())
	}
	t.Logf("%s: caught up with event %d in %v", what, last, time.Since(start).Round(time.Millisecond))
	return last
}

// followMetric scrapes follow's --metrics and returns the value of name.
func followMetric(t *testing.T, follow *proc, name string) string {
	t.Helper()
	b, _ := os.ReadFile(follow.stdout)
	addr := regexp.MustCompile(`metrics on http://(\S+)/metrics`).FindStringSubmatch(string(b))
	if addr == nil {
		t.Fatalf("follow did not say where its metrics are: %q", b)
	}
	resp, err := http.Get("http://" + addr[1] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	v := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindStringSubmatch(string(body))
	if v == nil {
		t.Fatalf("/metrics has no %s:\n%s", name, body)
	}
	return v[1]
}
