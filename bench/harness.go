package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/cmfs-project/cmfs/internal/auth"
)

// TokenEnv names replicad's token file when --token-file is not given.
const TokenEnv = "REPLICAD_TOKEN_FILE"

// UseToken creates a token file in dir and names it in this process's
// environment, so that every replicad serve and client a run starts
// shares it, as the nodes on one host do. It returns the token, for the
// clients and servers a run makes in process.
func UseToken(dir string) (string, error) {
	path := filepath.Join(dir, auth.FileName)
	tok, err := auth.File(path)
	if err != nil {
		return "", err
	}
	return tok, os.Setenv(TokenEnv, path)
}

// What the benchmark programs (cmd/cmfsbench, cmd/replbench) share to set
// themselves up.

// GoBuild builds pkg of the module at root into out.
func GoBuild(ctx context.Context, root, out, pkg string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w: %s", pkg, err, FirstLines(string(b), 4))
	}
	return nil
}

// CleanRunDir unmounts whatever an interrupted run left mounted under dir
// and removes it.
func CleanRunDir(dir string) error {
	left, err := FUSEMountsUnder(dir)
	if err != nil {
		return err
	}
	for _, mnt := range left {
		if err := Unmount(mnt); err != nil {
			return fmt.Errorf("left over from an earlier run: %w", err)
		}
	}
	return os.RemoveAll(dir)
}

// RequiredVersion returns the version of module that go.mod requires.
func RequiredVersion(gomod, module string) string {
	b, err := os.ReadFile(gomod)
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "require "))
		if len(f) >= 2 && f[0] == module {
			return f[1]
		}
	}
	return ""
}

// ModuleRoot returns the directory of the go.mod above the working
// directory.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory: run from the module")
		}
		dir = parent
	}
}

// FirstLines returns the first n lines of s on one line.
func FirstLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = append(lines[:n], "...")
	}
	return strings.Join(lines, " | ")
}

// RunDir prepares a benchmark program's work directory: dir, or by
// default .bench/name at the module root, made absolute, emptied (what an
// interrupted run left mounted there is unmounted first) and created.
func RunDir(dir, name string) (string, error) {
	if dir == "" {
		root, err := ModuleRoot()
		if err != nil {
			return "", err
		}
		dir = filepath.Join(root, ".bench", name)
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	if err := CleanRunDir(dir); err != nil {
		return "", err
	}
	return dir, os.MkdirAll(dir, 0o755)
}

// ShortRevision resolves rev to the abbreviated hash of its commit in the
// git repository at root.
func ShortRevision(ctx context.Context, root, rev string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", "-C", root, "rev-parse", "--verify", "--short", rev+"^{commit}")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git rev-parse %s: %w: %s", rev, err, FirstLines(stderr.String(), 2))
	}
	return strings.TrimSpace(string(out)), nil
}

// BuildRevision builds pkg as it is at revision rev of the git repository
// at root into out: rev's tree is extracted (git archive) into src, which
// is emptied first and removed afterwards, and built there offline
// (GOPROXY=off, GOTOOLCHAIN=local), so a revision whose modules are not in
// the module cache fails with go's reason instead of downloading them.
func BuildRevision(ctx context.Context, root, rev, src, out, pkg string) error {
	if err := os.RemoveAll(src); err != nil {
		return err
	}
	if err := os.MkdirAll(src, 0o755); err != nil {
		return err
	}
	defer os.RemoveAll(src)
	tarball := src + ".tar"
	defer os.Remove(tarball)
	steps := []struct {
		name string
		argv []string
	}{
		{"git archive " + rev, []string{"git", "-C", root, "archive", "--format=tar", "-o", tarball, rev}},
		{"tar -x", []string{"tar", "-x", "-f", tarball, "-C", src}},
	}
	for _, s := range steps {
		if b, err := exec.CommandContext(ctx, s.argv[0], s.argv[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %w: %s", s.name, err, FirstLines(string(b), 4))
		}
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-mod=readonly", "-buildvcs=false", "-o", out, pkg)
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "GOPROXY=off", "GOTOOLCHAIN=local", "GOWORK=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s at %s: %w: %s", pkg, rev, err, FirstLines(string(b), 4))
	}
	return nil
}
