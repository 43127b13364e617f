package integration

import (
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestMakeInstall runs `make install` into a temporary PREFIX from the
// module root, as a user would, and checks what it put there works: both
// programs run, every command --help lists has a man page that man
// renders without a warning, the completion scripts parse; then `make
// uninstall` with the same PREFIX leaves nothing behind. Needs no FUSE.
func TestMakeInstall(t *testing.T) {
	root := repoRoot(t)
	for _, tool := range []string{"make", "go", "install"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is missing: %v", tool, err)
		}
	}
	prefix := t.TempDir()
	makeIn(t, root, 5*time.Minute, "install", "DESTDIR=", "PREFIX="+prefix)

	bin := filepath.Join(prefix, "bin")
	if res := runTool(t, 30*time.Second, filepath.Join(bin, "cmfs"), "--version"); res.Code != 0 || !strings.HasPrefix(res.Stdout, "cmfs version ") {
		t.Errorf("installed cmfs --version: %v", res)
	}
	if res := runTool(t, 30*time.Second, filepath.Join(bin, "replicad"), "--help"); res.Code != 0 || !strings.Contains(res.Stdout, "Usage:") {
		t.Errorf("installed replicad --help: %v", res)
	}

	// Every unit, naming the programs where install put them.
	units, _ := filepath.Glob(filepath.Join(root, "dist", "systemd", "*.service"))
	if len(units) == 0 {
		t.Fatal("no units in dist/systemd")
	}
	for _, u := range units {
		installed := string(readFile(t, filepath.Join(prefix, "lib", "systemd", "system", filepath.Base(u))))
		if exec := unitLine(t, installed, "ExecStart"); strings.Contains(installed, "@BINDIR@") || !strings.HasPrefix(exec, bin+"/") {
			t.Errorf("installed %s: ExecStart=%s; want @BINDIR@ replaced by %s", filepath.Base(u), exec, bin)
		}
	}

	man1 := filepath.Join(prefix, "share", "man", "man1")
	var pages []string
	for _, prog := range []string{"cmfs", "replicad"} {
		for _, path := range commandPaths(t, filepath.Join(bin, prog), nil) {
			page := filepath.Join(man1, strings.Join(path, "-")+".1")
			checkManHeader(t, page, path)
			pages = append(pages, page)
		}
	}
	if entries, _ := os.ReadDir(man1); len(entries) != len(pages) {
		t.Errorf("%s holds %d pages; the two programs have %d commands", man1, len(entries), len(pages))
	}
	checkManRenders(t, pages)

	share := filepath.Join(prefix, "share")
	for _, prog := range []string{"cmfs", "replicad"} {
		bash := filepath.Join(share, "bash-completion", "completions", prog)
		zsh := filepath.Join(share, "zsh", "site-functions", "_"+prog)
		fish := filepath.Join(share, "fish", "vendor_completions.d", prog+".fish")
		for _, f := range []string{bash, zsh, fish} {
			if fi, err := os.Stat(f); err != nil || fi.Size() == 0 {
				t.Errorf("completion %s: %v (size %v)", f, err, fi)
			}
		}
		if out, err := exec.Command("bash", "-n", bash).CombinedOutput(); err != nil {
			t.Errorf("bash -n %s: %v\n%s", bash, err, out)
		}
		for shell, f := range map[string]string{"zsh": zsh, "fish": fish} {
			if _, err := exec.LookPath(shell); err == nil {
				if out, err := exec.Command(shell, "-n", f).CombinedOutput(); err != nil {
					t.Errorf("%s -n %s: %v\n%s", shell, f, err, out)
				}
			}
		}
	}

	makeIn(t, root, time.Minute, "uninstall", "DESTDIR=", "PREFIX="+prefix)
	var left []string
	filepath.WalkDir(prefix, func(p string, d fs.DirEntry, err error) error {
		if p != prefix {
			left = append(left, p)
		}
		return err
	})
	if len(left) > 0 {
		t.Errorf("make uninstall left %d entries under %s: %v", len(left), prefix, left)
	}
}

// repoRoot is the module root: the integration directory's parent.
func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// makeIn runs make with args in dir and fails t unless it exits 0.
func makeIn(t testing.TB, dir string, timeout time.Duration, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "make", append([]string{"--no-print-directory"}, args...)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

var availableCommand = regexp.MustCompile(`^  (\S+)\s`)

// commandPaths returns the command path of prog's root and of every
// command below it that --help lists (help itself has no page).
func commandPaths(t testing.TB, prog string, path []string) [][]string {
	t.Helper()
	res := runTool(t, 30*time.Second, prog, append(append([]string{}, path...), "--help")...)
	if res.Code != 0 {
		t.Fatalf("%s %s --help: %v", prog, strings.Join(path, " "), res)
	}
	out := [][]string{append([]string{filepath.Base(prog)}, path...)}
	in := false
	for _, line := range strings.Split(res.Stdout, "\n") {
		switch {
		case line == "Available Commands:":
			in = true
		case in && line == "":
			in = false
		case in:
			if m := availableCommand.FindStringSubmatch(line); m != nil && m[1] != "help" {
				sub := append(append([]string{}, path...), m[1])
				out = append(out, commandPaths(t, prog, sub)...)
			}
		}
	}
	return out
}

// checkManHeader checks page is the section 1 page of the command path:
// its .TH header names it.
func checkManHeader(t testing.TB, page string, path []string) {
	t.Helper()
	b, err := os.ReadFile(page)
	if err != nil {
		t.Errorf("man page of %q: %v", strings.Join(path, " "), err)
		return
	}
	want := `.TH "` + strings.ToUpper(strings.Join(path, "-")) + `" "1" `
	if !strings.HasPrefix(string(b), want) && !strings.Contains(string(b), "\n"+want) {
		t.Errorf("%s: no %q header; starts %q", page, want, firstLines(string(b), 3))
	}
}

// checkManRenders checks man, where installed, renders every page
// without a warning and with a NAME section naming its command. One man
// for all the pages (it takes its time per call); a page at a time only
// to name the one that warns.
func checkManRenders(t testing.TB, pages []string) {
	t.Helper()
	if _, err := exec.LookPath("man"); err != nil {
		t.Logf("man is missing: the pages are checked by their headers only")
		return
	}
	man := func(pages ...string) (string, string, error) {
		cmd := exec.Command("man", append([]string{"--warnings", "-l"}, pages...)...)
		cmd.Env = append(os.Environ(), "MANWIDTH=80", "MANPAGER=cat", "PAGER=cat")
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		return string(out), stderr.String(), err
	}
	out, warn, err := man(pages...)
	if err != nil || warn != "" {
		for _, p := range pages {
			if _, warn, err := man(p); err != nil || warn != "" {
				t.Errorf("man -l %s: %v\n%s", p, err, warn)
			}
		}
		return
	}
	for _, p := range pages {
		name := strings.TrimSuffix(filepath.Base(p), ".1")
		if !strings.Contains(out, "NAME\n       "+name+" ") {
			t.Errorf("man -l renders no NAME section naming %s", name)
		}
	}
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}
