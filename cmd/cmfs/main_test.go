package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/internal/cli/clitest"
	"github.com/cmfs-project/cmfs/journal"
)

// runCLI runs the command line in-process and returns its exit code, stdout
// and stderr.
func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	return clitest.Run(t, program, args...)
}

// TestBadInput checks that every bad command line fails with one clear
// line on stderr, before anything is mounted.
func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	backing := filepath.Join(dir, "backing")
	mnt := filepath.Join(dir, "mnt")
	inside := filepath.Join(backing, "inside")
	file := filepath.Join(dir, "file")
	corrupt := filepath.Join(dir, "corrupt")
	for _, d := range []string{backing, mnt, inside, filepath.Join(corrupt, ".cmfs")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(corrupt, ".cmfs", "journal.db"), bytes.Repeat([]byte("garbage!"), 1024), 0o600); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name string
		args []string
		want string // in the stderr line
	}{
		{"unknown command", []string{"frobnicate"}, `unknown command "frobnicate"`},
		{"unknown flag", []string{"mount", "--bogus", backing, mnt}, "unknown flag: --bogus"},
		{"bad duration", []string{"mount", "--retain", "soon", backing, mnt}, `invalid argument "soon"`},
		{"zero retain", []string{"mount", "--retain", "0s", backing, mnt}, "must be positive"},
		{"bad log format", []string{"mount", "--log-format", "xml", backing, mnt}, `invalid argument "xml" for "--log-format" flag: want text or json`},
		{"bad log level", []string{"mount", "--log-level", "loud", backing, mnt}, `invalid argument "loud" for "--log-level" flag: want debug, info, warn or error`},
		{"bad exclude", []string{"mount", "--exclude", "a/b", backing, mnt}, "not a glob of one path component"},
		{"bad metrics address", []string{"mount", "--metrics", "9890", backing, mnt}, `--metrics "9890": want HOST:PORT, such as 127.0.0.1:9890`},
		{"bad metrics port", []string{"mount", "--metrics", "127.0.0.1:99999", backing, mnt}, `--metrics "127.0.0.1:99999": want HOST:PORT`},
		{"mount no args", []string{"mount"}, "need BACKING and MOUNTPOINT"},
		{"mount one arg", []string{"mount", backing}, "need BACKING and MOUNTPOINT"},
		{"missing backing", []string{"mount", filepath.Join(dir, "nope"), mnt}, "does not exist"},
		{"backing is a file", []string{"mount", file, mnt}, "is not a directory"},
		{"missing mountpoint", []string{"mount", backing, filepath.Join(dir, "nope")}, "does not exist"},
		{"mountpoint is a file", []string{"mount", backing, file}, "is not a directory"},
		{"mountpoint is backing", []string{"mount", backing, backing}, "is the backing directory"},
		{"mountpoint inside backing", []string{"mount", backing, inside}, "inside the backing directory"},
		{"backing inside mountpoint", []string{"mount", inside, backing}, "inside the mountpoint"},
		{"mountpoint busy", []string{"mount", backing, "/proc"}, "is busy"},
		{"state not creatable", []string{"mount", "--state", filepath.Join(file, "state"), backing, mnt}, "cannot be created"},
		{"corrupt journal", []string{"mount", corrupt, mnt}, "journal"},
		{"umount not mounted", []string{"umount", mnt}, "is not mounted"},
		{"umount no args", []string{"umount"}, "need MOUNTPOINT"},
		{"events no target", []string{"events"}, "give BACKING or --state DIR"},
		{"events both", []string{"events", "--state", dir, backing}, "not both"},
		{"events never mounted", []string{"events", backing}, "never mounted"},
		{"events bad range", []string{"events", backing, "--from", "5", "--to", "2"}, "before --from"},
		{"events bad number", []string{"events", backing, "--from", "x"}, `invalid argument "x"`},
		{"status never mounted", []string{"status", backing}, "never mounted"},
		{"status extra", []string{"status", backing, "x"}, "accepts at most 1 arg"},
		{"fsck never mounted", []string{"fsck", backing}, "never mounted"},
		{"gc negative", []string{"gc", backing, "--retain", "-1s"}, "must not be negative"},
		{"restore no event", []string{"restore", backing}, "--event N"},
		{"restore absolute path", []string{"restore", backing, "--event", "1", "/etc"}, "relative to the warehouse root"},
		{"restore never mounted", []string{"restore", backing, "--event", "1"}, "never mounted"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clitest.Refused(t, program, tt.args, tt.want)
		})
	}
	// Failed validation leaves no state behind in the backing directory.
	if _, err := os.Stat(filepath.Join(backing, ".cmfs")); !os.IsNotExist(err) {
		t.Errorf("a failed mount left %s/.cmfs behind (err %v)", backing, err)
	}
}

func TestWithin(t *testing.T) {
	tests := []struct {
		p, base string
		want    bool
	}{
		{"/a", "/a", true},
		{"/a/b", "/a", true},
		{"/ab", "/a", false},
		{"/", "/a", false},
		{"/a/..b", "/a", true},
	}
	for _, tt := range tests {
		if got := within(tt.p, tt.base); got != tt.want {
			t.Errorf("within(%q, %q) = %v, want %v", tt.p, tt.base, got, tt.want)
		}
	}
}

func TestWriteEventJSON(t *testing.T) {
	e := journal.Event{
		ID: 7, Time: time.Date(2024, 1, 1, 12, 0, 0, 5, time.FixedZone("x", 3600)),
		Type: journal.Delete, Path: "sales.db/orders/dt=2024-01-01/part-0",
		DB: "sales", Table: "orders", Partition: "dt=2024-01-01",
		Files: []journal.File{{Path: "sales.db/orders/dt=2024-01-01/part-0", Size: 3, XXH64: "0123456789abcdef", CM: "0123456789abcdef-3"}},
	}
	var b bytes.Buffer
	if err := writeEvent(&b, e, true); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if got, want := strings.Join(keys, ","), "db,files,id,partition,path,table,time,type"; got != want {
		t.Errorf("keys = %s, want %s", got, want)
	}
	if got, want := m["time"], "2024-01-01T11:00:00.000000005Z"; got != want {
		t.Errorf("time = %v, want %v", got, want)
	}
	f := m["files"].([]any)[0].(map[string]any)
	if f["cm"] != "0123456789abcdef-3" || f["xxh64"] != "0123456789abcdef" || f["size"] != 3.0 {
		t.Errorf("file = %v", f)
	}

	b.Reset()
	if err := writeEvent(&b, e, false); err != nil {
		t.Fatal(err)
	}
	want := "7 2024-01-01T11:00:00.000000005Z DELETE sales.db/orders/dt=2024-01-01/part-0 sales.db/orders/dt=2024-01-01/part-0:3:0123456789abcdef:0123456789abcdef-3\n"
	if b.String() != want {
		t.Errorf("text = %q, want %q", b.String(), want)
	}
}

func TestPreservedFilter(t *testing.T) {
	e := journal.Event{ID: 3, Type: journal.DropPartition, Path: "s.db/t/p=1", Files: []journal.File{
		{Path: "s.db/t/p=1/a", CM: "a-1"},
		{Path: "s.db/t/p=1/sub/b", CM: "b-1"},
		{Path: "s.db/t/p=1/new"},
	}}
	tests := []struct {
		filters []string
		want    int
		err     bool
	}{
		{nil, 2, false},
		{[]string{"s.db/t/p=1/a"}, 1, false},
		{[]string{"s.db/t/p=1/sub"}, 1, false},
		{[]string{"s.db/t"}, 2, false},
		{[]string{"s.db/t/p=1/new"}, 0, true},
		{[]string{"s.db/t/p=1/s"}, 0, true},
	}
	for _, tt := range tests {
		got, err := preserved(e, tt.filters)
		if (err != nil) != tt.err || len(got) != tt.want {
			t.Errorf("preserved(%v) = %d files, %v; want %d, error %v", tt.filters, len(got), err, tt.want, tt.err)
		}
	}
	if _, err := preserved(journal.Event{ID: 1, Type: journal.Mkdir, Path: "x"}, nil); err == nil || !strings.Contains(err.Error(), "preserved nothing") {
		t.Errorf("preserved(no originals) = %v, want 'preserved nothing'", err)
	}
}
