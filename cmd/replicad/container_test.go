package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/container"
	"github.com/cmfs-project/cmfs/internal/cli/clitest"
	"github.com/cmfs-project/cmfs/internal/wait"
	"github.com/cmfs-project/cmfs/journal"
)

// TestContainerBadInput checks that every bad serve (node) and container
// command line fails with one clear line on stderr, and that serve opened
// nothing it should not have.
func TestContainerBadInput(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	backing := filepath.Join(dir, "backing")
	state := filepath.Join(backing, ".cmfs")
	if err := os.MkdirAll(state, 0o755); err != nil {
		t.Fatal(err)
	}
	writeRecord(t, state, backing)
	vol := filepath.Join(dir, "vol")
	held := filepath.Join(dir, "held")
	s, err := container.OpenStore([]string{held}, container.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	const srv = "127.0.0.1:1" // nothing listens there
	serve := func(extra ...string) []string {
		return append([]string{"serve", "--listen", "127.0.0.1:0", "--volume", vol}, extra...)
	}

	tests := []struct {
		name string
		args []string
		want string
	}{
		{"serve nothing", []string{"serve", "--listen", "127.0.0.1:0"}, "give --state DIR (a warehouse's files and journal) or --volume DIR"},
		{"serve node flag without volume", []string{"serve", "--state", state, "--node-id", "n1"}, "--node-id is a setting of the container service: give --volume DIR"},
		{"serve tls without volume", []string{"serve", "--state", state, "--tls-cert", file}, "--tls-cert is a setting of the container service"},
		{"serve ingest without state", serve("--ingest"), "--ingest needs --state DIR"},
		{"serve ingest-idle without ingest", serve("--ingest-idle", "5s"), "--ingest-idle needs --ingest"},
		{"serve zero container size", serve("--container-size", "0"), "--container-size 0 must be positive"},
		{"serve bad container size", serve("--container-size", "lots"), `invalid argument "lots" for "--container-size" flag: want a number of bytes`},
		{"serve negative container size", serve("--container-size", "-5MiB"), "negative"},
		{"serve bad bandwidth", serve("--replication-bandwidth", "fast"), "want bytes per second"},
		{"serve zero concurrency", serve("--replication-concurrency", "0"), "--replication-concurrency 0 must be positive"},
		{"serve negative idle", []string{"serve", "--listen", "127.0.0.1:0", "--state", state, "--volume", vol, "--ingest", "--ingest-idle", "-1s"}, "must not be negative"},
		{"serve bad push", serve("--push=maybe"), `invalid argument "maybe" for "--push" flag`},
		{"serve volume not loopback", serve("--listen", "0.0.0.0:0"), "refusing to listen on 0.0.0.0:0 without TLS"},
		{"serve volume bad address", serve("--listen", "nope"), `address "nope"`},
		{"serve volume is a file", []string{"serve", "--listen", "127.0.0.1:0", "--volume", file}, "volume " + file + " is not a directory"},
		{"serve volume parent missing", []string{"serve", "--listen", "127.0.0.1:0", "--volume", filepath.Join(dir, "no", "vol")}, "cannot be created"},
		{"serve volume in use", []string{"serve", "--listen", "127.0.0.1:0", "--volume", held}, "in use"},
		{"serve incomplete tls", serve("--tls-cert", file), "--tls-cert, --tls-key and --tls-ca go together"},
		{"serve allow list alone", serve("--tls-allow", "n2"), "go together"},
		{"serve tls files missing", serve("--tls-cert", filepath.Join(dir, "c"), "--tls-key", filepath.Join(dir, "k"), "--tls-ca", filepath.Join(dir, "ca")), "no such file"},
		{"serve bad advertise", serve("--advertise", "nope"), `--advertise "nope": want HOST:PORT`},
		{"serve advertise without port", serve("--advertise", "127.0.0.1"), `--advertise "127.0.0.1": want HOST:PORT`},
		{"serve advertise port 0", serve("--advertise", "127.0.0.1:0"), `--advertise "127.0.0.1:0": want HOST:PORT`},
		{"serve advertise no host", serve("--advertise", ":9870"), `--advertise ":9870": want HOST:PORT`},
		{"serve advertise not loopback", serve("--advertise", "192.0.2.1:9870"), "refusing to advertise 192.0.2.1:9870 without TLS"},
		{"serve advertise without volume", []string{"serve", "--state", state, "--advertise", "127.0.0.1:9870"}, "--advertise is a setting of the container service"},
		{"serve zero idle timeout", serve("--stream-idle-timeout", "0"), "--stream-idle-timeout 0s must be positive"},
		{"serve negative stream deadline", serve("--stream-deadline", "-1m"), "--stream-deadline -1m0s must be positive"},
		{"serve zero min rate", serve("--stream-min-rate", "0"), "--stream-min-rate 0 must be positive"},
		{"serve bad min rate", serve("--stream-min-rate", "slow"), "want bytes per second"},
		{"serve bad metrics address", serve("--metrics", "nope"), "metrics: listen nope"},
		{"serve heartbeat alone", serve("--heartbeat", "1s"), "--heartbeat needs --join ADDR or --coordinator"},
		{"serve coordinator flag alone", serve("--rm-interval", "1s"), "--rm-interval is a setting of the coordinator: give --coordinator too"},
		{"serve bad join", serve("--join", "nope"), `--join "nope": want HOST:PORT`},
		{"serve dead before stale", serve("--coordinator", "--stale-after", "5s", "--dead-after", "5s"), "want 0 < stale-after < dead-after"},
		{"serve zero rm interval", serve("--coordinator", "--rm-interval", "0"), "--rm-interval 0s must be positive"},
		{"serve negative redundancy", serve("--coordinator", "--maintenance-remaining-redundancy", "-1"), "must not be negative"},
		{"serve etcd store no endpoint", serve("--coordinator", "--cluster-store", "etcd://"), `--cluster-store "etcd://": want etcd://HOST:PORT`},
		{"serve etcd store bad endpoint", serve("--coordinator", "--cluster-store", "etcd://nope"), `--cluster-store "etcd://nope": want etcd://HOST:PORT`},
		{"serve leader lease without etcd", serve("--coordinator", "--leader-lease", "3s"), "--leader-lease needs --cluster-store etcd://"},
		{"serve leader lease not whole seconds", serve("--coordinator", "--cluster-store", "etcd://127.0.0.1:2379", "--leader-lease", "1500ms"), "--leader-lease 1.5s: want whole seconds"},
		{"serve join without volume", []string{"serve", "--state", state, "--join", "127.0.0.1:9870"}, "--join is a setting of the container service"},
		{"serve http and metrics on one address", serve("--http", "127.0.0.1:9871", "--metrics", "127.0.0.1:9871"), "--http 127.0.0.1:9871 serves /metrics too: give --http or --metrics, not both"},
		{"serve http bad address", serve("--http", "nope"), "--http: listen nope: "},

		{"admin no server", []string{"admin", "nodes"}, "give --server ADDR"},
		{"admin unreachable", []string{"admin", "status", "--server", srv}, "cannot reach 127.0.0.1:1"},
		{"admin decommission no node", []string{"admin", "decommission", "--server", srv}, "give one NODE id"},
		{"admin maintenance negative end", []string{"admin", "maintenance", "--server", srv, "dn1", "--end", "-1h"}, "--end -1h0m0s must not be negative"},

		{"container unknown", []string{"container", "frobnicate"}, `unknown command "frobnicate"`},
		{"container no server", []string{"container", "list"}, "give --server ADDR"},
		{"container unreachable", []string{"container", "list", "--server", srv}, "cannot reach 127.0.0.1:1"},
		{"container not loopback", []string{"container", "list", "--server", "192.0.2.1:9870"}, "without TLS"},
		{"container bad address", []string{"container", "list", "--server", "nope"}, `address "nope"`},
		{"container incomplete tls", []string{"container", "list", "--server", srv, "--tls-ca", file}, "go together"},
		{"container list extra arg", []string{"container", "list", "--server", srv, "x"}, `unknown command "x"`},
		{"put nothing", []string{"container", "put", "--server", srv}, "put what? give FILE"},
		{"put missing file", []string{"container", "put", "--server", srv, file, filepath.Join(dir, "nope")}, "no such file or directory"},
		{"put a directory", []string{"container", "put", "--server", srv, dir}, "not a regular file"},
		{"put unreachable", []string{"container", "put", "--server", srv, file}, "cannot reach 127.0.0.1:1"},
		{"close no id", []string{"container", "close", "--server", srv}, "which container? give its ID"},
		{"close bad id", []string{"container", "close", "--server", srv, "abc"}, `container id "abc": want the decimal number`},
		{"close zero id", []string{"container", "close", "--server", srv, "0"}, `container id "0"`},
		{"close negative id", []string{"container", "close", "--server", srv, "-3"}, `unknown shorthand flag: '3'`},
		{"close two ids", []string{"container", "close", "--server", srv, "1", "2"}, "one container ID, not 2"},
		{"verify bad id", []string{"container", "verify", "--server", srv, "18446744073709551616"}, "want the decimal number"},
		{"verify unreachable", []string{"container", "verify", "--server", srv, "7"}, "cannot reach 127.0.0.1:1"},
		{"replicate no id", []string{"container", "replicate", "--server", srv, "--to", srv}, "which container?"},
		{"replicate no target", []string{"container", "replicate", "--server", srv, "7"}, "give --to ADDR"},
		{"replicate bad compression", []string{"container", "replicate", "--server", srv, "7", "--to", srv, "--compression", "rar"}, `--compression "rar": want none, gzip, snappy, lz4 or zstd`},
		{"replicate bad mode", []string{"container", "replicate", "--server", srv, "7", "--to", srv, "--mode", "sideways"}, `--mode "sideways": want push or pull`},
		{"replicate to itself", []string{"container", "replicate", "--server", srv, "7", "--to", srv}, "--to " + srv + " is the node at --server"},
		{"replicate unreachable", []string{"container", "replicate", "--server", srv, "7", "--to", "127.0.0.1:2"}, "cannot reach 127.0.0.1:1"},
		{"get no block", []string{"container", "get", "--server", srv}, "which block? give its XXH64"},
		{"get bad block", []string{"container", "get", "--server", srv, "xyz"}, `block id "xyz": want <16 hex digits>`},
		{"get bad size", []string{"container", "get", "--server", srv, "0123456789abcdef-x"}, "bad size"},
		{"get two blocks", []string{"container", "get", "--server", srv, "0123456789abcdef", "0123456789abcdef"}, "one block XXH64, not 2"},
		{"get into a missing directory", []string{"container", "get", "--server", srv, "0123456789abcdef", "-o", filepath.Join(dir, "no", "f")}, "does not exist"},
		{"get into a directory", []string{"container", "get", "--server", srv, "0123456789abcdef", "-o", dir}, "is a directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			expectRefusal(t, tt.args, tt.want)
		})
	}
	if des, _ := os.ReadDir(dir); len(des) != 3 {
		var names []string
		for _, de := range des {
			names = append(names, de.Name())
		}
		t.Errorf("%s holds %v after the refusals, want backing, file, held and nothing else", dir, names)
	}
}

// expectRefusal runs args, which must fail with one line on stderr that
// mentions want.
func expectRefusal(t *testing.T, args []string, want string) {
	t.Helper()
	clitest.Refused(t, program, args, want)
}

// syncBuffer is a bytes.Buffer safe to write from serve's goroutine while
// the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var listeningRE = regexp.MustCompile(`listening on (\S+) \(`)

// serveInProcess runs `replicad serve args...` until the test ends and
// returns its address and its stderr.
func serveInProcess(t *testing.T, args ...string) (string, *syncBuffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- program.Run(ctx, &out, &errb, append([]string{"serve", "--listen", "127.0.0.1:0"}, args...))
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("serve %v: exit %d, stderr %q", args, code, errb.String())
		}
	})
	var m []string
	exited, code := false, 0
	if !wait.Until(10*time.Second, func() bool {
		if m = listeningRE.FindStringSubmatch(out.String()); m != nil {
			return true
		}
		select {
		case code = <-done:
			exited = true
		default:
		}
		return exited
	}) {
		t.Fatalf("serve %v: no \"listening on\" within 10s; stderr %q", args, errb.String())
	}
	if m == nil {
		done <- code // for the cleanup
		t.Fatalf("serve %v: exit %d before listening, stderr %q", args, code, errb.String())
	}
	return m[1], &errb
}

// mustRun runs a command that must succeed and returns its stdout.
func mustRun(t *testing.T, args ...string) string {
	t.Helper()
	code, stdout, stderr := runCLI(t, args...)
	if code != 0 {
		t.Fatalf("%v: exit %d, stderr %q", args, code, stderr)
	}
	return stdout
}

// TestContainerCommands runs two nodes in-process and every container
// command between them.
func TestContainerCommands(t *testing.T) {
	dir := t.TempDir()
	a, aErr := serveInProcess(t, "--node-id", "a", "--volume", filepath.Join(dir, "a"))
	b, _ := serveInProcess(t, "--node-id", "b", "--volume", filepath.Join(dir, "b1"), "--volume", filepath.Join(dir, "b2"), "--push=false")
	if got := aErr.String(); !strings.Contains(got, "loopback addresses only") || strings.Count(got, "\n") != 1 {
		t.Errorf("serve without TLS said %q, want one line about loopback", got)
	}

	files := map[string][]byte{
		"one":   bytes.Repeat([]byte("one "), 300_000),
		"two":   []byte("two\n"),
		"empty": nil,
	}
	var names []string
	for name, data := range files {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		names = append(names, p)
	}
	var put struct {
		Files []struct {
			File      string `json:"file"`
			Container string `json:"container"`
			XXH64     string `json:"xxh64"`
			Size      int64  `json:"size"`
		} `json:"files"`
	}
	if err := json.Unmarshal([]byte(mustRun(t, append([]string{"container", "put", "--server", a, "--json"}, names...)...)), &put); err != nil {
		t.Fatal(err)
	}
	if len(put.Files) != 3 {
		t.Fatalf("put: %+v", put)
	}
	id := put.Files[0].Container
	for _, f := range put.Files {
		data := files[filepath.Base(f.File)]
		if f.Container != id || f.XXH64 != journal.Sum(data) || f.Size != int64(len(data)) {
			t.Errorf("put %s: %+v, want container %s, xxh64 %s", f.File, f, id, journal.Sum(data))
		}
	}
	text := mustRun(t, "container", "put", "--server", a, names[0])
	if want := fmt.Sprintf("%s  %s  %d  %s\n", id, journal.Sum(files[filepath.Base(names[0])]), len(files[filepath.Base(names[0])]), names[0]); text != want {
		t.Errorf("put prints %q, want %q", text, want)
	}

	list := func(addr string) []containerJSON {
		t.Helper()
		var out []containerJSON
		for _, line := range strings.Split(strings.TrimSpace(mustRun(t, "container", "list", "--server", addr, "--json")), "\n") {
			if line == "" {
				continue
			}
			var c containerJSON
			if err := json.Unmarshal([]byte(line), &c); err != nil {
				t.Fatalf("list --json line %q: %v", line, err)
			}
			out = append(out, c)
		}
		return out
	}
	if l := list(a); len(l) != 1 || fmt.Sprint(l[0].ID) != id || l[0].State != "OPEN" || l[0].Blocks != 3 {
		t.Fatalf("list: %+v", l)
	}
	expectRefusal(t, []string{"container", "replicate", "--server", a, id, "--to", b}, "not closed")
	if out := mustRun(t, "container", "close", "--server", a, id); !strings.Contains(out, "CLOSED") {
		t.Errorf("close printed %q", out)
	}
	if out := mustRun(t, "container", "list", "--server", a); !strings.Contains(out, "DESCRIPTOR CHECKSUM") || !strings.Contains(out, id+"  CLOSED") {
		t.Errorf("list printed %q", out)
	}

	// b serves with --push=false; a pushes by default, and --mode pull.
	out := mustRun(t, "container", "replicate", "--server", a, id, "--to", b, "--compression", "lz4", "--wait-scan")
	if !strings.Contains(out, "CLOSED; push, lz4, ") || !strings.Contains(out, "1 attempt") {
		t.Errorf("replicate printed %q", out)
	}
	expectRefusal(t, []string{"container", "replicate", "--server", a, id, "--to", b, "--mode", "pull"}, "already exists")
	if out := mustRun(t, "container", "verify", "--server", b, id); !strings.Contains(out, "container "+id+": CLOSED, 3 blocks") {
		t.Errorf("verify printed %q", out)
	}
	for name, data := range files {
		got := mustRun(t, "container", "get", "--server", b, journal.Sum(data))
		if got != string(data) {
			t.Errorf("get %s: %d bytes, want %d", name, len(got), len(data))
		}
	}
	dst := filepath.Join(dir, "got")
	mustRun(t, "container", "get", "--server", b, journal.Sum(files["one"])+fmt.Sprintf("-%d", len(files["one"])), "-o", dst)
	if got, err := os.ReadFile(dst); err != nil || !bytes.Equal(got, files["one"]) {
		t.Errorf("get -o: %d bytes, %v", len(got), err)
	}
	expectRefusal(t, []string{"container", "get", "--server", b, "0123456789abcdef"}, "no block 0123456789abcdef on "+b)
	if l := list(b); len(l) != 1 || l[0].State != "CLOSED" || l[0].DescriptorChecksum == "" {
		t.Errorf("list on b: %+v", l)
	}

	// Back from b (pull by its --push=false) to a third node.
	c, _ := serveInProcess(t, "--node-id", "c", "--volume", filepath.Join(dir, "c"))
	if out := mustRun(t, "container", "replicate", "--server", b, id, "--to", c, "--compression", "zstd"); !strings.Contains(out, "on "+c+": RECOVERING; pull, zstd") {
		t.Errorf("replicate printed %q", out)
	}
	var l []containerJSON
	if !wait.Until(10*time.Second, func() bool { l = list(c); return len(l) == 1 && l[0].State == "CLOSED" }) {
		t.Fatalf("the copy on c: %+v, want CLOSED within 10s", l)
	}
}
