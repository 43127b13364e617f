package integration

import (
	"bytes"
	"errors"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/internal/wait"
)

// scrape is one /metrics reading: each family's type (# TYPE), and each
// sample's value by its name and labels.
type scrape struct {
	types   map[string]string
	samples map[string]float64  // `name{k="v",…}` (labels sorted) → value
	labels  map[string][]string // family → the label names its samples carry (le aside)
	series  map[string][]string // family → its sample keys
	raw     string
}

var (
	sampleRE = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$`)
	labelRE  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)
)

// scrapeMetrics reads http://addr/metrics and parses the text format.
func scrapeMetrics(t *testing.T, addr string) scrape {
	t.Helper()
	body := httpGet(t, "http://"+addr+"/metrics")
	s := scrape{types: map[string]string{}, samples: map[string]float64{}, labels: map[string][]string{}, series: map[string][]string{}, raw: body}
	for _, line := range strings.Split(body, "\n") {
		if f, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name, typ, _ := strings.Cut(f, " ")
			s.types[name] = typ
			continue
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		m := sampleRE.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("/metrics: unparsable line %q", line)
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			t.Fatalf("/metrics: %q: %v", line, err)
		}
		var pairs, names []string
		for _, l := range labelRE.FindAllStringSubmatch(m[2], -1) {
			pairs = append(pairs, l[1]+`="`+l[2]+`"`)
			if l[1] != "le" {
				names = append(names, l[1])
			}
		}
		sort.Strings(pairs)
		key := m[1] + "{" + strings.Join(pairs, ",") + "}"
		s.samples[key] = v
		family := m[1]
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(family, suffix); ok && s.types[b] == "histogram" {
				family = b
			}
		}
		sort.Strings(names)
		s.labels[family] = names
		s.series[family] = append(s.series[family], key)
	}
	return s
}

// value is the sample name{labels}, labels as "k=v" pairs; ok is false
// when it is absent.
func (s scrape) value(name string, labels ...string) (float64, bool) {
	var pairs []string
	for _, l := range labels {
		k, v, _ := strings.Cut(l, "=")
		pairs = append(pairs, k+`="`+v+`"`)
	}
	sort.Strings(pairs)
	v, ok := s.samples[name+"{"+strings.Join(pairs, ",")+"}"]
	return v, ok
}

// get is value, 0 when absent.
func (s scrape) get(name string, labels ...string) float64 {
	v, _ := s.value(name, labels...)
	return v
}

// documented is one row of a table of docs/metrics.md.
type documented struct {
	name, typ string
	labels    []string
}

// The sections of docs/metrics.md (the start of each heading), each
// listing what one kind of process serves.
const (
	docMount       = "cmfs mount"
	docWarehouse   = "replicad serve, with a warehouse"
	docNode        = "replicad serve, with `--volume`"
	docCoordinator = "replicad serve, with `--coordinator`"
	docFollow      = "replicad follow"
)

// metricsDoc reads the tables of docs/metrics.md's sections whose
// headings start with one of sections: every metric documented there.
func metricsDoc(t *testing.T, sections ...string) []documented {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("^\\| `((?:cmfs|replicad)_[a-z0-9_]+)` \\| ([a-z]+) \\| ([^|]*) \\|")
	var out []documented
	for _, section := range sections {
		_, sec, ok := strings.Cut(string(b), "\n## "+section)
		if !ok {
			t.Fatalf("docs/metrics.md has no %q section", "## "+section)
		}
		sec, _, _ = strings.Cut(sec, "\n## ")
		n := len(out)
		for _, line := range strings.Split(sec, "\n") {
			m := row.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			d := documented{name: m[1], typ: m[2]}
			if ls := strings.TrimSpace(m[3]); ls != "—" {
				for _, l := range strings.Split(ls, ",") {
					d.labels = append(d.labels, strings.Trim(strings.TrimSpace(l), "`"))
				}
			}
			sort.Strings(d.labels)
			out = append(out, d)
		}
		if len(out) == n {
			t.Fatalf("docs/metrics.md's %q section lists no metric", section)
		}
	}
	return out
}

// TestMountMetrics mounts with --metrics, checks that /metrics carries
// exactly the cmfs metrics docs/metrics.md documents, with their types
// and labels, and that each moves as it should under a small load: a
// create, an O_TRUNC overwrite, an in-place append, an unlink, a
// deduplicated unlink, a rename over a file, and operations that fail.
func TestMountMetrics(t *testing.T) {
	addr := freeAddr(t)
	m := mount(t, "--metrics", addr)

	// What the load will change, made first.
	writeFile(t, m.path("b"), bytes.Repeat([]byte("b"), 2000))
	writeFile(t, m.path("c"), bytes.Repeat([]byte("c"), 3000))
	writeFile(t, m.path("d"), bytes.Repeat([]byte("d"), 4000))
	writeFile(t, m.path("gone"), []byte("gone behind the mount's back"))
	writeFile(t, m.path("full/f"), []byte("keeps full from being removed"))

	// The kernel sends RELEASE after close has returned; a file whose
	// handle is still registered is copied where it would be linked or
	// moved. settle waits until every open has been released (which the
	// metrics themselves say).
	settle := func() {
		t.Helper()
		wait.For(t, 10*time.Second, "every handle released", func() bool {
			s := scrapeMetrics(t, addr)
			ok := func(op string) float64 { return s.get("cmfs_operations_total", "op="+op, "result=ok") }
			return ok("create")+ok("open") == ok("release")
		})
	}
	settle()
	before := scrapeMetrics(t, addr)
	checkDocumented(t, before, "cmfs_", docMount)

	// The load.
	writeFile(t, m.path("a"), bytes.Repeat([]byte("1"), 1000)) // create
	settle()
	writeFile(t, m.path("a"), bytes.Repeat([]byte("2"), 1500))     // O_TRUNC: link
	f, err := os.OpenFile(m.path("b"), os.O_WRONLY|os.O_APPEND, 0) // in place: copy
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte(" appended")); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(m.path("c")); err != nil { // move
		t.Fatal(err)
	}
	writeFile(t, m.path("e"), bytes.Repeat([]byte("c"), 3000))
	settle()
	if err := os.Remove(m.path("e")); err != nil { // c's content again: dedup
		t.Fatal(err)
	}
	settle()
	if err := os.Rename(m.path("d"), m.path("a")); err != nil { // link
		t.Fatal(err)
	}
	// An unlink the kernel sends though the file is gone: its name is
	// cached (the entry timeout), the backing file removed behind the
	// mount.
	if _, err := os.Stat(m.path("gone")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(m.backing("gone")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(m.path("gone")); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("unlink of a file removed behind the mount: %v, want ENOENT", err)
	}
	if err := os.Remove(m.path("full")); !errors.Is(err, syscall.ENOTEMPTY) {
		t.Fatalf("rmdir of a directory with a file: %v, want ENOTEMPTY", err)
	}
	// A write handle holds its intent in flight until its release.
	h, err := os.OpenFile(m.path("h"), os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	open := scrapeMetrics(t, addr)
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if n := open.get("cmfs_inflight_intents"); n < 1 {
		t.Errorf("cmfs_inflight_intents %g with a write handle open, want at least 1", n)
	}

	// The kernel sends RELEASE after close has returned, and bbolt is
	// written behind the journal's commit: both are waited for.
	var after scrape
	wait.For(t, 10*time.Second, "the releases of the load's files and a bbolt apply", func() bool {
		after = scrapeMetrics(t, addr)
		rel := after.get("cmfs_operations_total", "op=release", "result=ok") - before.get("cmfs_operations_total", "op=release", "result=ok")
		return rel >= 5 && after.get("cmfs_inflight_intents") == 0 &&
			after.get("cmfs_journal_applies_total") > before.get("cmfs_journal_applies_total")
	})
	checkDocumented(t, after, "cmfs_", docMount)
	delta := func(name string, labels ...string) float64 {
		return after.get(name, labels...) - before.get(name, labels...)
	}

	ops := []struct {
		op, result string
		atLeast    float64
	}{
		{"create", "ok", 3}, // a, e, h
		{"open", "ok", 2},   // a with O_TRUNC, b in place
		{"flush", "ok", 5},
		{"release", "ok", 5},
		{"unlink", "ok", 2},
		{"unlink", "ENOENT", 1},
		{"rename", "ok", 1},
		{"rmdir", "ENOTEMPTY", 1},
	}
	for _, o := range ops {
		if d := delta("cmfs_operations_total", "op="+o.op, "result="+o.result); d < o.atLeast {
			t.Errorf("cmfs_operations_total{op=%q,result=%q} moved by %g, want at least %g", o.op, o.result, d, o.atLeast)
		}
	}
	for _, op := range []string{"create", "open", "unlink", "rename", "mkdir", "rmdir", "link", "symlink", "mknod", "tmpfile", "truncate", "setattr", "flush", "fsync", "release"} {
		if _, ok := before.value("cmfs_operations_total", "op="+op, "result=ok"); !ok {
			t.Errorf("no cmfs_operations_total{op=%q,result=\"ok\"} from the start", op)
		}
	}

	preserved := []struct {
		method       string
		files, bytes float64
	}{
		{"move", 1, 3000},
		{"dedup", 1, 3000},
		{"link", 2, 1500 + 1000}, // a's second content, replaced by d; a's first, truncated
	}
	for _, p := range preserved {
		if df, db := delta("cmfs_preserved_files_total", "method="+p.method), delta("cmfs_preserved_bytes_total", "method="+p.method); df != p.files || db != p.bytes {
			t.Errorf("method %s: %g files, %g bytes preserved; want %g and %g", p.method, df, db, p.files, p.bytes)
		}
	}
	// The in-place open of b: a copy, or a clone where the filesystem
	// has reflinks.
	if df, db := delta("cmfs_preserved_files_total", "method=copy")+delta("cmfs_preserved_files_total", "method=reflink"),
		delta("cmfs_preserved_bytes_total", "method=copy")+delta("cmfs_preserved_bytes_total", "method=reflink"); df != 1 || db != 2000 {
		t.Errorf("copies and clones: %g files, %g bytes; want 1 and 2000 (b, in place)", df, db)
	}

	if d := delta("cmfs_checksum_bytes_total", "how=read"); d < 2000 {
		t.Errorf("cmfs_checksum_bytes_total{how=\"read\"} moved by %g, want at least 2000 (b's content, in place)", d)
	}
	if d := delta("cmfs_cmroot_entries"); d != 4 {
		t.Errorf("cmfs_cmroot_entries moved by %g, want 4 (a twice, b, c)", d)
	}
	if d := delta("cmfs_cmroot_bytes"); d != 1000+1500+2000+3000 {
		t.Errorf("cmfs_cmroot_bytes moved by %g, want %d", d, 1000+1500+2000+3000)
	}
	for _, c := range []string{"cmfs_journal_flush_seconds_count", "cmfs_journal_groups_total", "cmfs_journal_flushes_total",
		"cmfs_journal_wal_syncs_total", "cmfs_journal_path_syncs_total", "cmfs_journal_applies_total", "cmfs_journal_events_total"} {
		if d := delta(c); d <= 0 {
			t.Errorf("%s moved by %g under a load, want more", c, d)
		}
	}
	if d := delta("cmfs_journal_flush_seconds_sum"); d <= 0 {
		t.Errorf("cmfs_journal_flush_seconds_sum moved by %g", d)
	}
	if inf, n := after.get("cmfs_journal_flush_seconds_bucket", "le=+Inf"), after.get("cmfs_journal_flush_seconds_count"); inf != n {
		t.Errorf("flush histogram: +Inf bucket %g, count %g", inf, n)
	}
	if got, want := after.get("cmfs_journal_last_event_id"), float64(lastID(t, m.State)); got != want {
		t.Errorf("cmfs_journal_last_event_id %g, the journal's last event %g", got, want)
	}
	if v, ok := after.value("cmfs_inflight_intents"); !ok || v != 0 {
		t.Errorf("cmfs_inflight_intents %g (present %v) with every change done and no file open, want 0", v, ok)
	}
	for _, f := range []string{"journaled", "damaged", "tail_dropped", "changed", "added", "removed", "lost", "walked", "hashed"} {
		if v, ok := after.value("cmfs_recovery_findings", "finding="+f); !ok || v != 0 {
			t.Errorf("cmfs_recovery_findings{finding=%q} %g (present %v), want 0 on a fresh mount", f, v, ok)
		}
	}
	if v, ok := after.value("cmfs_sync_info", "sync=always"); !ok || v != 1 {
		t.Errorf("cmfs_sync_info{sync=\"always\"} %g (present %v), want 1:\n%s", v, ok, grepLines(after.raw, "cmfs_sync_info"))
	}
	if v := after.get("process_open_fds"); v <= 0 {
		t.Errorf("no process metrics beside the mount's")
	}
}

// checkDocumented: the metrics whose names start with prefix ("cmfs_",
// "replicad_") that s serves are exactly those docs/metrics.md lists in
// sections, each of its type and with its labels.
func checkDocumented(t *testing.T, s scrape, prefix string, sections ...string) {
	t.Helper()
	docs := map[string]documented{}
	for _, d := range metricsDoc(t, sections...) {
		docs[d.name] = d
		typ, ok := s.types[d.name]
		if !ok {
			t.Errorf("%s is documented and not served", d.name)
			continue
		}
		if typ != d.typ {
			t.Errorf("%s is a %s, documented as a %s", d.name, typ, d.typ)
		}
		if got := s.labels[d.name]; strings.Join(got, ",") != strings.Join(d.labels, ",") {
			t.Errorf("%s has labels %v, documented %v", d.name, got, d.labels)
		}
	}
	for name := range s.types {
		if _, ok := docs[name]; strings.HasPrefix(name, prefix) && !ok {
			t.Errorf("%s is served and not documented in docs/metrics.md (%s)", name, strings.Join(sections, "; "))
		}
	}
}

// TestMountMetricsSyncInterval: the durability mode's label says the
// interval the journal runs.
func TestMountMetricsSyncInterval(t *testing.T) {
	addr := freeAddr(t)
	m := mount(t, "--metrics", addr, "--sync", "interval:20ms")
	writeFile(t, m.path("x"), []byte("x"))
	s := scrapeMetrics(t, addr)
	checkDocumented(t, s, "cmfs_", docMount)
	if v, ok := s.value("cmfs_sync_info", "sync=interval:20ms"); !ok || v != 1 || len(s.series["cmfs_sync_info"]) != 1 {
		t.Errorf("cmfs_sync_info: %s; want one series, sync=\"interval:20ms\", 1", grepLines(s.raw, "cmfs_sync_info"))
	}
}

// TestMountMetricsRefused: a --metrics address that is malformed, or in
// use, refuses a --daemon mount in one line, and nothing is mounted.
func TestMountMetricsRefused(t *testing.T) {
	requireFUSE(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	for _, tt := range []struct{ name, addr, want string }{
		{"malformed", "localhost", `--metrics "localhost": want HOST:PORT`},
		{"in use", lis.Addr().String(), "metrics: listen " + lis.Addr().String() + ": "},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			backing, mnt := filepath.Join(dir, "backing"), filepath.Join(dir, "mnt")
			for _, d := range []string{backing, mnt} {
				if err := os.Mkdir(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			args := []string{"mount", "--daemon", "--metrics", tt.addr, backing, mnt}
			res := cmfs(t, args...)
			expectOneLineFailure(t, args, res)
			if !strings.Contains(res.Stderr, tt.want) {
				t.Errorf("stderr %q, want it to say %q", res.Stderr, tt.want)
			}
			if isMounted(mnt) {
				forceUnmount(t, mnt)
				t.Errorf("%s is mounted after the refusal", mnt)
			}
			if _, err := os.Stat(filepath.Join(backing, ".cmfs", "journal.db")); !os.IsNotExist(err) {
				t.Errorf("the refused mount opened a journal (stat: %v)", err)
			}
		})
	}
}

// TestMountNoMetrics: without --metrics the mount daemon listens on no
// TCP socket; with it, on the one address given.
func TestMountNoMetrics(t *testing.T) {
	m := mount(t)
	addr := freeAddr(t)
	withMetrics := mount(t, "--metrics", addr)
	_, port, _ := net.SplitHostPort(addr)
	for _, tt := range []struct {
		m    *mounted
		want []string
	}{{m, nil}, {withMetrics, []string{port}}} {
		pids := daemonPIDs(tt.m.Mnt)
		if len(pids) != 1 {
			t.Fatalf("%d daemons for %s, want 1", len(pids), tt.m.Mnt)
		}
		if got := tcpListenPorts(t, pids[0]); strings.Join(got, ",") != strings.Join(tt.want, ",") {
			t.Errorf("the daemon of %s listens on TCP ports %v, want %v", tt.m.Mnt, got, tt.want)
		}
	}
}

// tcpListenPorts returns the ports (decimal) of the TCP sockets process
// pid listens on: its descriptors' socket inodes, found among the
// listening sockets of /proc/PID/net/tcp and tcp6.
func tcpListenPorts(t *testing.T, pid int) []string {
	t.Helper()
	fds, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	if err != nil {
		t.Fatal(err)
	}
	mine := map[string]bool{}
	for _, fd := range fds {
		l, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/fd/" + fd.Name())
		if ino, ok := strings.CutPrefix(l, "socket:["); err == nil && ok {
			mine[strings.TrimSuffix(ino, "]")] = true
		}
	}
	var ports []string
	for _, table := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/net/" + table)
		if err != nil {
			continue // no IPv6
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 10 || f[3] != "0A" || !mine[f[9]] { // 0A: LISTEN
				continue
			}
			_, hexPort, _ := strings.Cut(f[1], ":")
			p, err := strconv.ParseUint(hexPort, 16, 16)
			if err != nil {
				t.Fatalf("/proc/net/%s: %q", table, line)
			}
			ports = append(ports, strconv.FormatUint(p, 10))
		}
	}
	sort.Strings(ports)
	return ports
}
