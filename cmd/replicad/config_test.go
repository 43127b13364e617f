package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cmfs-project/cmfs/internal/cli/clitest"
)

// TestConfigSample checks that the sample file dist/replicad.yaml passes
// 'replicad config check'.
func TestConfigSample(t *testing.T) {
	code, stdout, stderr := runCLI(t, "config", "check", "../../dist/replicad.yaml")
	if code != 0 || stdout != "../../dist/replicad.yaml: OK\n" {
		t.Errorf("config check dist/replicad.yaml: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

// TestConfigKeys checks that every flag has a key and a variable of its
// own, none taken by replicad's other variables, and docs/config.md lists
// them all.
func TestConfigKeys(t *testing.T) {
	clitest.CheckKeys(t, program, "../../docs/config.md", "REPLICAD_CONFIG", tokenEnv)
}

// TestConfigApplied checks that a file's values reach the command, and
// that the command line wins over them.
func TestConfigApplied(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "replicad.yaml")
	if err := os.WriteFile(file, []byte("status:\n  target: "+dir+"\n  json: true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCLI(t, "--config", file, "status")
	if code != 0 || !strings.HasPrefix(stdout, `{"last_repl_id":0`) {
		t.Errorf("status from the file: exit %d, stdout %q, stderr %q; want JSON", code, stdout, stderr)
	}
	code, stdout, stderr = runCLI(t, "--config", file, "status", "--json=false")
	if code != 0 || strings.HasPrefix(stdout, "{") {
		t.Errorf("status --json=false over the file: exit %d, stdout %q, stderr %q; want text", code, stdout, stderr)
	}
}

// TestConfigRefused checks that a bad value from a config file or the
// environment stops a command before it does anything, named by line or
// variable, and that a value from either counts as given for the checks
// that ask whether a flag was.
func TestConfigRefused(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "replicad.yaml")
	tests := []struct {
		name string
		text string
		env  map[string]string
		args []string
		want string
	}{
		{"bad value in a nested section", "container:\n  server: 127.0.0.1:1\n  put:\n    json: maybe\n", nil, []string{"container", "list"},
			file + `:4: container.put.json: invalid bool "maybe"`},
		{"persistent flag below its command", "container:\n  list:\n    server: 127.0.0.1:1\n", nil, []string{"container", "list"},
			file + `:3: container.list.server: unknown key: 'replicad container list' has no flag --server`},
		{"unknown command", "serve: {listen: 127.0.0.1:1}\nfolow: {interval: 1s}\n", nil, []string{"serve"},
			file + `:2: folow: unknown key: there is no command 'replicad folow'`},
		{"bad size from env", "", map[string]string{"REPLICAD_SERVE_CONTAINER_SIZE": "big"}, []string{"serve"},
			`REPLICAD_SERVE_CONTAINER_SIZE: invalid size "big": want a number of bytes`},
		{"given by the file", "dump: {from: 0}\n", nil, []string{"dump"}, "--from must be at least 1"},
		{"given by env", "serve:\n  volume: [" + dir + "]\n", map[string]string{"REPLICAD_SERVE_INGEST_IDLE": "2m"}, []string{"serve"},
			"--ingest-idle needs --ingest"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			args := tt.args
			if tt.text != "" {
				if err := os.WriteFile(file, []byte(tt.text), 0o644); err != nil {
					t.Fatal(err)
				}
				args = append([]string{"--config", file}, args...)
			}
			clitest.Refused(t, program, args, tt.want)
		})
	}
}
