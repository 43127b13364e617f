package cli_test

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/cmfs-project/cmfs/internal/cli"
	"github.com/cmfs-project/cmfs/internal/cli/clitest"
)

// toy is a command tree with the shapes the real ones have: a root
// persistent flag, a command with a duration, a list and a string, and a
// parent with a persistent flag (and its own PersistentPreRunE) above a
// subcommand with a flag of its own. Each command prints what it got.
var toy = cli.Program{Name: "toy", Root: func(stdout, stderr io.Writer) *cobra.Command {
	root := cli.Root(&cobra.Command{Use: "toy"}, stdout, stderr)
	var verbose bool
	root.PersistentFlags().BoolVar(&verbose, "verbose", false, "")

	var (
		retain  time.Duration
		exclude []string
		sync    string
	)
	mount := &cobra.Command{Use: "mount", RunE: func(cmd *cobra.Command, args []string) error {
		fmt.Fprintf(stdout, "retain=%s exclude=%s sync=%s verbose=%t\n", retain, strings.Join(exclude, ","), sync, verbose)
		return nil
	}}
	mount.Flags().DurationVar(&retain, "retain", 24*time.Hour, "")
	mount.Flags().StringArrayVar(&exclude, "exclude", []string{"def"}, "")
	mount.Flags().StringVar(&sync, "sync", "always", "")

	var (
		server, replication string
		join                []string
		hooked              bool
	)
	node := &cobra.Command{Use: "node", PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
		hooked = true
		return nil
	}}
	node.PersistentFlags().StringVar(&server, "server", "", "")
	put := &cobra.Command{Use: "put", RunE: func(cmd *cobra.Command, args []string) error {
		fmt.Fprintf(stdout, "server=%s given=%t replication=%s join=%s hooked=%t\n",
			server, cmd.Flags().Changed("server"), replication, strings.Join(join, ","), hooked)
		return nil
	}}
	put.Flags().StringVar(&replication, "replication", "replica:3", "")
	put.Flags().StringSliceVar(&join, "join", nil, "")
	node.AddCommand(put)
	root.AddCommand(mount, node)
	return root
}}

// writeFile writes a config file into a fresh directory and returns its path.
func writeFile(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "toy.yaml")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConfigPrecedence(t *testing.T) {
	const file = `
verbose: true
mount:
  retain: 72h
  exclude: [a, b]
node:
  server: file:1
  put:
    replication: replica:2
    join: [j1, j2]
`
	tests := []struct {
		name string
		file string            // "": no config file
		env  map[string]string // set for the run
		args []string          // before the file's --config
		want string
	}{
		{"defaults", "", nil, []string{"mount"},
			"retain=24h0m0s exclude=def sync=always verbose=false"},
		{"file", file, nil, []string{"mount"},
			"retain=72h0m0s exclude=a,b sync=always verbose=true"},
		{"env over file", file, map[string]string{"TOY_MOUNT_RETAIN": "96h", "TOY_MOUNT_EXCLUDE": "x,y", "TOY_VERBOSE": "false"}, []string{"mount"},
			"retain=96h0m0s exclude=x,y sync=always verbose=false"},
		{"env over default", "", map[string]string{"TOY_MOUNT_SYNC": "interval:10ms", "TOY_MOUNT_EXCLUDE": "x"}, []string{"mount"},
			"retain=24h0m0s exclude=x sync=interval:10ms verbose=false"},
		{"flag over env over file", file, map[string]string{"TOY_MOUNT_RETAIN": "96h", "TOY_MOUNT_EXCLUDE": "x"}, []string{"mount", "--retain", "1h", "--exclude", "z", "--exclude", "w"},
			"retain=1h0m0s exclude=z,w sync=always verbose=true"},
		{"flag over file", file, nil, []string{"--verbose=false", "mount", "--exclude", "z"},
			"retain=72h0m0s exclude=z sync=always verbose=false"},
		{"empty env is unset", file, map[string]string{"TOY_MOUNT_RETAIN": ""}, []string{"mount"},
			"retain=72h0m0s exclude=a,b sync=always verbose=true"},
		{"one item for a list", "mount: {exclude: solo}\n", nil, []string{"mount"},
			"retain=24h0m0s exclude=solo sync=always verbose=false"},
		{"quoted comma in a list variable", "", map[string]string{"TOY_MOUNT_EXCLUDE": `"a,b",c`}, []string{"mount"},
			"retain=24h0m0s exclude=a,b,c sync=always verbose=false"},
		{"persistent flag from the file", file, nil, []string{"node", "put"},
			"server=file:1 given=true replication=replica:2 join=j1,j2 hooked=true"},
		{"persistent flag from env", file, map[string]string{"TOY_NODE_SERVER": "env:1", "TOY_NODE_PUT_JOIN": "e1,e2"}, []string{"node", "put"},
			"server=env:1 given=true replication=replica:2 join=e1,e2 hooked=true"},
		{"persistent flag on the command line", file, map[string]string{"TOY_NODE_SERVER": "env:1"}, []string{"node", "put", "--server", "cli:1", "--join", "c1"},
			"server=cli:1 given=true replication=replica:2 join=c1 hooked=true"},
		{"nothing given", "", nil, []string{"node", "put"},
			"server= given=false replication=replica:3 join= hooked=true"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			args := tt.args
			if tt.file != "" {
				args = append([]string{"--config", writeFile(t, tt.file)}, args...)
			}
			code, stdout, stderr := clitest.Run(t, toy, args...)
			if code != 0 {
				t.Fatalf("exit %d, stderr %q", code, stderr)
			}
			if got := strings.TrimSpace(stdout); got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}

// TestConfigFileNamed checks how the file is found: --config, else
// $TOY_CONFIG, else none at all.
func TestConfigFileNamed(t *testing.T) {
	byFlag := writeFile(t, "mount: {retain: 1h}\n")
	byEnv := writeFile(t, "mount: {retain: 2h}\n")
	for _, tt := range []struct {
		name string
		env  string
		args []string
		want string
	}{
		{"flag", "", []string{"--config", byFlag, "mount"}, "retain=1h0m0s"},
		{"flag after the command", "", []string{"mount", "--config", byFlag}, "retain=1h0m0s"},
		{"env", byEnv, []string{"mount"}, "retain=2h0m0s"},
		{"flag over env", byEnv, []string{"--config", byFlag, "mount"}, "retain=1h0m0s"},
		{"none", "", []string{"mount"}, "retain=24h0m0s"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("TOY_CONFIG", tt.env)
			code, stdout, stderr := clitest.Run(t, toy, tt.args...)
			if code != 0 || !strings.HasPrefix(stdout, tt.want+" ") {
				t.Errorf("exit %d, stdout %q, stderr %q; want %s", code, stdout, stderr, tt.want)
			}
		})
	}
	t.Run("missing", func(t *testing.T) {
		clitest.Refused(t, toy, []string{"--config", "/nonexistent.yaml", "mount"}, "config file /nonexistent.yaml: no such file or directory")
		t.Setenv("TOY_CONFIG", "/nonexistent.yaml")
		clitest.Refused(t, toy, []string{"mount"}, "config file /nonexistent.yaml ($TOY_CONFIG): no such file or directory")
	})
}

// TestConfigErrors checks that each thing wrong with a file is named by
// its line and key, by 'config check' (every error, one line each) and at
// the start of any command (the first, with how to see the rest).
func TestConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		text string
		want []string // the lines after "toy: FILE:"
	}{
		{"bad duration", "mount:\n  sync: always\n  retain: 3x\n",
			[]string{`3: mount.retain: unknown unit "x" in duration "3x"`}},
		{"wrong type", "verbose: 12\nnode:\n  put: {join: [a]}\n  server: [a, b]\n",
			[]string{`1: verbose: invalid bool "12"`, `4: node.server: takes one value, not a list`}},
		{"mapping for a flag", "mount:\n  retain: {h: 1}\n", []string{`2: mount.retain: takes a value, not a mapping`}},
		{"no value", "mount:\n  retain:\n", []string{`2: mount.retain: no value (leave the key out for the default)`}},
		{"value for a command", "mount: 72h\n", []string{`1: mount: want a mapping of the flags of 'toy mount'`}},
		{"unknown key", "mount:\n  retian: 1h\n", []string{`2: mount.retian: unknown key: 'toy mount' has no flag --retian`}},
		{"unknown section", "mount: {retain: 1h}\nmnt:\n  retain: 1h\n", []string{`2: mnt: unknown key: there is no command 'toy mnt'`}},
		{"subcommand at the wrong level", "put: {join: [a]}\n", []string{`1: put: unknown key: there is no command 'toy put'`}},
		{"persistent flag below its command", "node:\n  put:\n    server: x\n", []string{`3: node.put.server: unknown key: 'toy node put' has no flag --server`}},
		{"config in the file", "config: other.yaml\n", []string{`1: config: unknown key: 'toy' has no flag --config`}},
		{"given twice", "mount:\n  retain: 1h\n  retain: 2h\n", []string{`3: mount.retain: given twice (first at line 2)`}},
		{"bad item in a list", "mount:\n  exclude:\n    - a\n    - [b]\n", []string{`4: mount.exclude: want a value in the list`}},
		{"bad syntax", "mount:\n  retain: 1h\n  sync: a: b\n", []string{`3: mapping values are not allowed in this context`}},
		// The YAML parser names the line where the mapping the bad line
		// breaks begins, not the bad line.
		{"bad indent", "mount:\n  retain: 1h\n exclude: a\n", []string{`2: did not find expected key`}},
		{"tab", "mount:\n\tretain: 1h\n", []string{`2: found character that cannot start any token`}},
		{"not a mapping", "- mount\n", []string{`1: want a mapping of keys, such as 'mount: {retain: 72h}' (see 'toy config keys')`}},
		{"two documents", "mount: {}\n---\nnode: {}\n", []string{`2: a second YAML document (one file holds one)`}},
		{"sorted by line", "node:\n  put:\n    replication: 3\n    join: [a]\n  sever: x\nmount:\n  retain: never\n",
			[]string{`5: node.sever: unknown key: 'toy node' has no flag --sever`, `7: mount.retain: invalid duration "never"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := writeFile(t, tt.text)
			var want []string
			for _, w := range tt.want {
				want = append(want, "toy: "+file+":"+w)
			}

			code, stdout, stderr := clitest.Run(t, toy, "config", "check", file)
			if code != 1 || stdout != "" {
				t.Errorf("config check: exit %d, stdout %q; want 1 and nothing", code, stdout)
			}
			if got := strings.TrimSuffix(stderr, "\n"); got != strings.Join(want, "\n") {
				t.Errorf("config check: stderr\n%s\nwant\n%s", got, strings.Join(want, "\n"))
			}

			// Any command refuses to start, even one the bad key is not for.
			first := strings.TrimPrefix(want[0], "toy: ")
			if len(want) > 1 {
				first += fmt.Sprintf(" (%d more; see 'toy config check %s')", len(want)-1, file)
			}
			for _, args := range [][]string{{"mount"}, {"node", "put"}} {
				code, _, stderr := clitest.Run(t, toy, append([]string{"--config", file}, args...)...)
				if code != 1 || stderr != "toy: "+first+"\n" {
					t.Errorf("%s: exit %d, stderr %q; want 1 and %q", args, code, stderr, "toy: "+first+"\n")
				}
			}
		})
	}
}

func TestConfigCheckOK(t *testing.T) {
	for _, text := range []string{
		"",
		"# nothing set\n",
		"mount: {retain: 7h, exclude: [a, 'b*'], sync: interval:10ms}\nnode: {server: 'h:1', put: {join: [a, b], replication: replica:1}}\nverbose: true\n",
		"mount:\nnode:\n  put: {}\n",
	} {
		file := writeFile(t, text)
		code, stdout, stderr := clitest.Run(t, toy, "config", "check", file)
		if code != 0 || stdout != file+": OK\n" || stderr != "" {
			t.Errorf("config check of %q: exit %d, stdout %q, stderr %q; want 0 and %q", text, code, stdout, stderr, file+": OK\n")
		}
	}
	clitest.Refused(t, toy, []string{"config", "check"}, "need FILE")
	clitest.Refused(t, toy, []string{"config", "check", "/nonexistent.yaml"}, "config file /nonexistent.yaml: no such file or directory")
}

// TestConfigBuiltins checks that a broken file stops no command that
// does not run with it: help, completion, and config check of another.
func TestConfigBuiltins(t *testing.T) {
	bad := writeFile(t, "mount: {retain: never}\n")
	good := writeFile(t, "mount: {retain: 1h}\n")
	t.Setenv("TOY_CONFIG", bad)
	for _, args := range [][]string{{"help", "mount"}, {"mount", "--help"}, {"completion", "bash"}, {"config", "check", good}, {"config", "keys"}, {}} {
		if code, _, stderr := clitest.Run(t, toy, args...); code != 0 {
			t.Errorf("%q with a broken $TOY_CONFIG: exit %d, stderr %q", args, code, stderr)
		}
	}
}

func TestConfigEnvErrors(t *testing.T) {
	for _, tt := range []struct{ env, value, want, flag string }{
		{"TOY_MOUNT_RETAIN", "3x", `TOY_MOUNT_RETAIN: unknown unit "x" in duration "3x"`, "--retain=1h"},
		{"TOY_VERBOSE", "yes", `TOY_VERBOSE: invalid bool "yes"`, "--verbose"},
		{"TOY_MOUNT_EXCLUDE", `a,"b`, `TOY_MOUNT_EXCLUDE: invalid list "a,\"b": extraneous or missing " in quoted-field`, "--exclude=a"},
	} {
		t.Run(tt.env, func(t *testing.T) {
			t.Setenv(tt.env, tt.value)
			clitest.Refused(t, toy, []string{"mount"}, tt.want)
			// Given on the command line, the flag's variable is not read.
			if code, _, stderr := clitest.Run(t, toy, "mount", tt.flag); code != 0 {
				t.Errorf("mount %s: exit %d, %q", tt.flag, code, stderr)
			}
		})
	}
	// A variable of another command's flag is not this command's business.
	t.Setenv("TOY_NODE_PUT_REPLICATION", "")
	t.Setenv("TOY_NODE_SERVER", "x")
	if code, _, stderr := clitest.Run(t, toy, "mount"); code != 0 {
		t.Errorf("mount with another command's variable: exit %d, %q", code, stderr)
	}
}

func TestKeys(t *testing.T) {
	var got []string
	for _, k := range cli.Keys(toy) {
		got = append(got, k.Name()+" "+k.Env)
	}
	want := []string{
		"verbose TOY_VERBOSE",
		"mount.exclude TOY_MOUNT_EXCLUDE",
		"mount.retain TOY_MOUNT_RETAIN",
		"mount.sync TOY_MOUNT_SYNC",
		"node.server TOY_NODE_SERVER",
		"node.put.join TOY_NODE_PUT_JOIN",
		"node.put.replication TOY_NODE_PUT_REPLICATION",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("Keys:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
