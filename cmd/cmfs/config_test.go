package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/cmfs-project/cmfs/internal/cli/clitest"
	"github.com/cmfs-project/cmfs/internal/failpoint"
	"github.com/cmfs-project/cmfs/internal/statedir"
)

// TestConfigSample checks that the sample file dist/cmfs.yaml passes
// 'cmfs config check'.
func TestConfigSample(t *testing.T) {
	code, stdout, stderr := runCLI(t, "config", "check", "../../dist/cmfs.yaml")
	if code != 0 || stdout != "../../dist/cmfs.yaml: OK\n" {
		t.Errorf("config check dist/cmfs.yaml: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

// TestConfigKeys checks that every flag has a key and a variable of its
// own, none taken by cmfs's other variables, and docs/config.md lists
// them all.
func TestConfigKeys(t *testing.T) {
	clitest.CheckKeys(t, program, "../../docs/config.md",
		"CMFS_CONFIG", failpoint.EnvVar, "CMFS_TRACE", "CMFS_CPUPROFILE", statedir.TestBootIDEnv)
}

// TestConfigRefused checks that a bad value from a config file or the
// environment stops a command before it does anything, named by line or
// variable, and that a value from either reaches the command's own checks.
func TestConfigRefused(t *testing.T) {
	dir := t.TempDir()
	backing, mnt := filepath.Join(dir, "backing"), filepath.Join(dir, "mnt")
	for _, d := range []string{backing, mnt} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	file := filepath.Join(dir, "cmfs.yaml")
	tests := []struct {
		name string
		text string            // of the config file, if any
		env  map[string]string // set for the run
		args []string
		want string
	}{
		{"bad duration", "mount:\n  sync: always\n  retain: 3x\n", nil, []string{"mount", backing, mnt},
			file + `:3: mount.retain: unknown unit "x" in duration "3x"`},
		{"unknown key", "mount:\n  retian: 3h\n", nil, []string{"mount", backing, mnt},
			file + `:2: mount.retian: unknown key: 'cmfs mount' has no flag --retian`},
		{"another command's key", "mount: {retain: 3h}\ngc: {retain-max: 3x}\n", nil, []string{"mount", backing, mnt},
			file + `:2: gc.retain-max: unknown unit "x" in duration "3x"`},
		{"zero retain from the file", "mount: {retain: 0s}\n", nil, []string{"mount", backing, mnt}, "--retain 0s: must be positive"},
		{"bad exclude from the file", "mount: {exclude: [ok, a/b]}\n", nil, []string{"mount", backing, mnt}, `--exclude "a/b": not a glob of one path component`},
		{"bad duration from env", "", map[string]string{"CMFS_MOUNT_RETAIN": "soon"}, []string{"mount", backing, mnt},
			`CMFS_MOUNT_RETAIN: invalid duration "soon"`},
		{"range from file and env", "events: {from: 5}\n", map[string]string{"CMFS_EVENTS_TO": "2"}, []string{"events", backing}, "before --from"},
		{"file from env", "status: {json: maybe}\n", map[string]string{"CMFS_CONFIG": file}, []string{"status", backing},
			file + `:1: status.json: invalid bool "maybe"`},
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
				if tt.env["CMFS_CONFIG"] == "" {
					args = append([]string{"--config", file}, args...)
				}
			}
			clitest.Refused(t, program, args, tt.want)
		})
	}
}
