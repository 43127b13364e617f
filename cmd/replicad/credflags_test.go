package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/internal/auth"
)

// TestCredentialRefusals checks that a client without a usable
// credential, and a serve with an unsafe token file, are refused with one
// line before anything connects.
func TestCredentialRefusals(t *testing.T) {
	dir, state := warehouseState(t)
	open := filepath.Join(dir, "open.token")
	if err := os.WriteFile(open, []byte("0123456789abcdef0123456789abcdef\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chmod(open, 0o644)
	link := filepath.Join(dir, "link.token")
	if err := os.Symlink(os.Getenv(tokenEnv), link); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.token")
	target := filepath.Join(dir, "replica")
	const src = "127.0.0.1:9860"
	tests := []struct {
		name string
		env  bool // $REPLICAD_TOKEN_FILE set (TestMain's)
		args []string
		want string
	}{
		{"follow", false, []string{"follow", "--source", src, "--target", target}, "--source 127.0.0.1:9860: no credential: give --token-file (same host) or --tls-cert/--tls-key/--tls-ca"},
		{"slots", false, []string{"slots", "--source", src}, "no credential"},
		{"container", false, []string{"container", "list", "--server", src}, "--server 127.0.0.1:9860: no credential"},
		{"follow missing token file", true, []string{"follow", "--source", src, "--target", target, "--token-file", missing}, "token file " + missing + " does not exist"},
		{"follow token and tls", true, []string{"follow", "--source", src, "--target", target, "--token-file", open, "--tls-ca", open}, "not both"},
		{"serve open token file", true, []string{"serve", "--state", state, "--listen", "127.0.0.1:0", "--token-file", open}, "chmod 600 " + open},
		{"serve token symlink", true, []string{"serve", "--state", state, "--listen", "127.0.0.1:0", "--token-file", link}, "not a regular file"},
		{"node open token file", true, []string{"serve", "--volume", filepath.Join(dir, "vol"), "--listen", "127.0.0.1:0", "--token-file", open}, "chmod 600"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !tt.env {
				t.Setenv(tokenEnv, "")
			}
			expectRefusal(t, tt.args, tt.want)
		})
	}
	if _, err := os.Stat(target); !os.IsNotExist(err) {
		t.Errorf("a refused follow made its target: %v", err)
	}
}

// TestServeTokenFile: serve creates its token file in the state
// directory, names it, and follow with another token is refused at once
// (one line, exit 1), not retried.
func TestServeTokenFile(t *testing.T) {
	dir, state := warehouseState(t)
	t.Setenv(tokenEnv, "")
	addr, _ := serveInProcess(t, "--state", state)
	path := filepath.Join(state, auth.FileName)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("%s: mode %04o, want 0600", path, fi.Mode().Perm())
	}
	wrong := filepath.Join(dir, "wrong.token")
	if _, err := auth.File(wrong); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	code, _, stderr := runCLI(t, "follow", "--source", addr, "--target", filepath.Join(dir, "replica"), "--token-file", wrong)
	lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
	if code != 1 || len(lines) != 1 || !strings.Contains(stderr, "--source "+addr) || !strings.Contains(stderr, "wrong token") {
		t.Errorf("follow with a wrong token: exit %d, stderr %q; want exit 1 and one line about the wrong token", code, stderr)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("follow with a wrong token took %s: retried?", d)
	}
	if code, out, stderr := runCLI(t, "slots", "--source", addr, "--token-file", path); code != 0 || !strings.Contains(out, "no slots") {
		t.Errorf("slots with serve's token file: exit %d, %q, %q", code, out, stderr)
	}
}

// warehouseState makes a warehouse in a temporary directory, with its
// state directory and a mount record in it, as a mount leaves them; it
// returns the temporary directory and the state directory.
func warehouseState(t *testing.T) (dir, state string) {
	t.Helper()
	dir = t.TempDir()
	backing := filepath.Join(dir, "backing")
	state = filepath.Join(backing, ".cmfs")
	if err := os.MkdirAll(state, 0o755); err != nil {
		t.Fatal(err)
	}
	writeRecord(t, state, backing)
	return dir, state
}
