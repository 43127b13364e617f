package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cmfs-project/cmfs/cmroot"
	"github.com/cmfs-project/cmfs/internal/auth"
	"github.com/cmfs-project/cmfs/internal/cli/clitest"
	"github.com/cmfs-project/cmfs/internal/statedir"
	"github.com/cmfs-project/cmfs/journal"
)

// TestMain points every serve and client the tests run at one token file
// ($REPLICAD_TOKEN_FILE), as nodes on one host share one.
func TestMain(m *testing.M) {
	os.Exit(withToken(m))
}

func withToken(m *testing.M) int {
	dir, err := os.MkdirTemp("", "replicad-token-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, auth.FileName)
	if _, err := auth.File(path); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	os.Setenv(tokenEnv, path)
	return m.Run()
}

// testToken is the token of TestMain's file.
func testToken(t *testing.T) string {
	t.Helper()
	tok, err := auth.Read(os.Getenv(tokenEnv))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// runCLI runs the command line in-process and returns its exit code, stdout
// and stderr.
func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	return clitest.Run(t, program, args...)
}

// TestBadInput checks that every bad command line fails with one clear
// line on stderr, without FUSE or network.
func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	backing := filepath.Join(dir, "backing")
	state := filepath.Join(backing, ".cmfs")
	bare := filepath.Join(dir, "bare") // a state directory never mounted
	notDump := filepath.Join(dir, "notdump")
	for _, d := range []string{state, bare, notDump} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	writeRecord(t, state, backing)
	target := t.TempDir()

	tests := []struct {
		name string
		args []string
		want string // in the stderr line
	}{
		{"unknown command", []string{"frobnicate"}, `unknown command "frobnicate"`},
		{"root args", []string{"dump", "x"}, `unknown command "x"`},

		{"serve unknown flag", []string{"serve", "--bogus"}, "unknown flag: --bogus"},
		{"serve no state", []string{"serve"}, "give --state DIR"},
		{"serve missing state", []string{"serve", "--state", filepath.Join(dir, "nope")}, "does not exist"},
		{"serve state is a file", []string{"serve", "--state", file}, "is not a directory"},
		{"serve never mounted", []string{"serve", "--state", bare}, "give --backing DIR"},
		{"serve not loopback", []string{"serve", "--state", state, "--listen", "0.0.0.0:9860"}, "refusing to listen on 0.0.0.0:9860 without TLS"},
		{"serve every interface", []string{"serve", "--backing", backing, "--listen", ":9860"}, "without TLS"},
		{"serve bad address", []string{"serve", "--state", state, "--listen", "nope"}, `address "nope"`},
		{"serve extra arg", []string{"serve", "--state", state, "x"}, `unknown command "x"`},
		{"serve ingest replication without ingest", []string{"serve", "--state", state, "--volume", dir, "--ingest-replication", "replica:2"}, "--ingest-replication needs --ingest"},
		{"serve bad ingest replication", []string{"serve", "--state", state, "--volume", dir, "--ingest", "--ingest-replication", "three"}, `--ingest-replication "three": want replica:N`},

		{"dump no state", []string{"dump", "--out", dir}, "give --state DIR"},
		{"dump no out", []string{"dump", "--state", state}, "give --out DUMPROOT"},
		{"dump from zero", []string{"dump", "--state", state, "--out", dir, "--from", "0"}, "--from must be at least 1"},
		{"dump to without from", []string{"dump", "--state", state, "--out", dir, "--to", "3"}, "--to needs --from"},
		{"dump to before from", []string{"dump", "--state", state, "--out", dir, "--from", "5", "--to", "3"}, "before --from 5"},
		{"dump bad number", []string{"dump", "--state", state, "--out", dir, "--from", "x"}, `invalid argument "x"`},
		{"dump never mounted", []string{"dump", "--state", bare, "--out", dir}, "never mounted"},
		{"dump no journal", []string{"dump", "--state", state, "--out", dir}, "no cmfs journal"},
		{"dump out not creatable", []string{"dump", "--state", state, "--out", filepath.Join(file, "d")}, "cannot be created"},

		{"load no dump", []string{"load", "--target", target, "--source-state", state}, "give --dump DIR"},
		{"load no target", []string{"load", "--dump", notDump, "--source-state", state}, "give --target DIR"},
		{"load no source", []string{"load", "--dump", notDump, "--target", target}, "give --source ADDR, --source-state DIR or --cluster COORD"},
		{"load two sources", []string{"load", "--dump", notDump, "--target", target, "--source", "127.0.0.1:9860", "--source-state", state}, "not both"},
		{"load bad cluster", []string{"load", "--dump", notDump, "--target", target, "--cluster", "coord"}, `--cluster "coord": want HOST:PORT`},
		{"load missing dump", []string{"load", "--dump", filepath.Join(dir, "nope"), "--target", target, "--source-state", state}, "does not exist"},
		{"load not a dump", []string{"load", "--dump", notDump, "--target", target, "--source-state", state}, "_dumpmetadata"},
		{"load unknown flag", []string{"load", "--from", "3"}, "unknown flag: --from"},

		{"status no target", []string{"status"}, "give --target DIR"},
		{"status missing target", []string{"status", "--target", filepath.Join(dir, "nope")}, "does not exist"},
		{"status extra arg", []string{"status", "--target", target, "x"}, `unknown command "x"`},

		{"follow no source", []string{"follow", "--target", target}, "give --source ADDR"},
		{"follow no target", []string{"follow", "--source", "127.0.0.1:9860"}, "give --target DIR"},
		{"follow zero interval", []string{"follow", "--source", "127.0.0.1:9860", "--target", target, "--interval", "0s"}, "must be positive"},
		{"follow bad interval", []string{"follow", "--source", "127.0.0.1:9860", "--target", target, "--interval", "soon"}, `invalid argument "soon"`},
		{"follow not loopback", []string{"follow", "--source", "192.0.2.1:9860", "--target", target}, "without TLS"},
		{"follow target not creatable", []string{"follow", "--source", "127.0.0.1:9860", "--target", filepath.Join(file, "t")}, "cannot be created"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clitest.Refused(t, program, tt.args, tt.want)
		})
	}
}

// writeRecord writes the mount record a cmfs mount leaves in its state
// directory.
func writeRecord(t *testing.T, state, backing string) {
	t.Helper()
	b, err := json.Marshal(map[string]any{"backing": backing, "mountpoint": "/nonexistent", "cmroot": "", "retain": "24h", "pid": 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(state, statedir.RecordFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestDumpLoadUnmounted runs bootstrap, incremental, load and status
// against an unmounted journal (as a mount would have left it), with the
// source's files read locally.
func TestDumpLoadUnmounted(t *testing.T) {
	dir := t.TempDir()
	backing := filepath.Join(dir, "backing")
	state := filepath.Join(backing, statedir.Name)
	part := filepath.Join(backing, "sales.db", "orders", "dt=1")
	for _, d := range []string{state, filepath.Join(state, statedir.CMRootDir), part, filepath.Join(backing, "sales.db", "orders", "_temporary")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeRecord(t, state, backing)
	put := func(rel, content string) journal.File {
		t.Helper()
		if err := os.WriteFile(filepath.Join(backing, rel), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return journal.File{Path: rel, Size: int64(len(content)), XXH64: journal.Sum([]byte(content))}
	}
	j, err := journal.Open(filepath.Join(state, statedir.JournalFile), journal.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	f0 := put("sales.db/orders/dt=1/part-0", "zero")
	put("sales.db/orders/_temporary/scratch", "not replicated")
	if err := j.Append(context.Background(), &journal.Event{Type: journal.Insert, Path: f0.Path, DB: "sales", Table: "orders", Partition: "dt=1", Files: []journal.File{f0}}); err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}

	dumps := filepath.Join(dir, "dumps")
	replica := filepath.Join(dir, "replica")
	var dr dumpReport
	runJSON(t, &dr, "dump", "--state", state, "--out", dumps, "--json")
	if dr.Kind != "BOOTSTRAP" || dr.To != 1 || dr.Dump != filepath.Join(dumps, "bootstrap-1") {
		t.Fatalf("bootstrap dump = %+v", dr)
	}
	var lr loadReport
	runJSON(t, &lr, "load", "--dump", dr.Dump, "--target", replica, "--source-state", state, "--json")
	if lr.Files != 1 || lr.To != 1 {
		t.Fatalf("bootstrap load = %+v", lr)
	}

	// Two more events: an insert, then the insert of a file that is
	// overwritten afterwards without an event (the load must find its
	// content in cmroot).
	j, err = journal.Open(filepath.Join(state, statedir.JournalFile), journal.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	f1 := put("sales.db/orders/dt=1/part-1", "one")
	f2 := put("sales.db/orders/dt=1/part-2", "two")
	for _, f := range []journal.File{f1, f2} {
		if err := j.Append(context.Background(), &journal.Event{Type: journal.Insert, Path: f.Path, DB: "sales", Table: "orders", Partition: "dt=1", Files: []journal.File{f}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	entry, err := cmroot.EntryPath(filepath.Join(state, statedir.CMRootDir), f2.XXH64+"-3")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(entry), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(backing, f2.Path), entry); err != nil {
		t.Fatal(err)
	}
	put(f2.Path, "TWO")

	runJSON(t, &dr, "dump", "--state", state, "--out", dumps, "--from", "2", "--json")
	if dr.Kind != "INCREMENTAL" || dr.From != 2 || dr.To != 3 || dr.Dump != filepath.Join(dumps, "incremental-2-3") {
		t.Fatalf("incremental dump = %+v", dr)
	}
	// A rerun finds the same dump.
	var again dumpReport
	runJSON(t, &again, "dump", "--state", state, "--out", dumps, "--from", "2", "--json")
	if again != dr {
		t.Errorf("rerun dump = %+v, want %+v", again, dr)
	}
	runJSON(t, &lr, "load", "--dump", dr.Dump, "--target", replica, "--source-state", state, "--json")
	if lr.Applied != 2 || lr.Files != 2 || lr.Bytes != 6 {
		t.Errorf("incremental load = %+v", lr)
	}
	runJSON(t, &lr, "load", "--dump", dr.Dump, "--target", replica, "--source-state", state, "--json")
	if lr.Applied != 0 {
		t.Errorf("second load applied %d events, want 0", lr.Applied)
	}
	for rel, want := range map[string]string{f0.Path: "zero", f1.Path: "one", f2.Path: "two"} {
		got, err := os.ReadFile(filepath.Join(replica, rel))
		if err != nil || string(got) != want {
			t.Errorf("replica %s = %q, %v; want %q", rel, got, err, want)
		}
	}
	if _, err := os.Stat(filepath.Join(replica, "sales.db/orders/_temporary")); !os.IsNotExist(err) {
		t.Errorf("scratch directory replicated (err %v)", err)
	}

	var sr statusReport
	runJSON(t, &sr, "status", "--target", replica, "--json")
	if sr.LastReplID != 3 || sr.Dump == "" || sr.Time == "" || sr.Source == "" {
		t.Errorf("status = %+v", sr)
	}
	var fresh statusReport
	runJSON(t, &fresh, "status", "--target", t.TempDir(), "--json")
	if fresh != (statusReport{}) {
		t.Errorf("status of a fresh target = %+v", fresh)
	}
	if code, _, stderr := runCLI(t, "dump", "--state", state, "--out", dumps, "--from", "4"); code == 0 || !strings.Contains(stderr, "journal ends at 3") {
		t.Errorf("dump past the end: exit %d, stderr %q", code, stderr)
	}
}

// runJSON runs a command that must succeed and decodes its JSON output.
func runJSON(t *testing.T, v any, args ...string) {
	t.Helper()
	code, stdout, stderr := runCLI(t, args...)
	if code != 0 {
		t.Fatalf("%v: exit %d, stderr %q", args, code, stderr)
	}
	if err := json.Unmarshal([]byte(stdout), v); err != nil {
		t.Fatalf("%v: output %q: %v", args, stdout, err)
	}
}
