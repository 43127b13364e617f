package cli

import (
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// configurer applies a Program's config file and environment to one run
// of its command tree.
type configurer struct {
	p    Program
	done bool
}

// configure gives root --config, the config command, and the hook that
// applies the file and the environment to the flags of the command that
// runs, before it runs.
func (p Program) configure(root *cobra.Command) {
	c := &configurer{p: p}
	root.PersistentFlags().String(configFlag, "", fmt.Sprintf("read flags from this YAML `FILE` (also $%s; see '%s config')", c.envName(), p.Name))
	root.AddCommand(c.command())
	hook(root, c.apply)
}

// envName is the variable that names the file when --config does not.
func (c *configurer) envName() string { return strings.ToUpper(c.p.Name) + "_CONFIG" }

// hook puts apply before every command's own PersistentPreRun(E): cobra
// runs only the nearest one, so a command that has its own would skip
// the root's.
func hook(c *cobra.Command, apply func(*cobra.Command, []string) error) {
	own, ownE := c.PersistentPreRun, c.PersistentPreRunE
	if !c.HasParent() || own != nil || ownE != nil {
		c.PersistentPreRun = nil
		c.PersistentPreRunE = func(cmd *cobra.Command, args []string) error {
			if err := apply(cmd, args); err != nil {
				return err
			}
			switch {
			case ownE != nil:
				return ownE(cmd, args)
			case own != nil:
				own(cmd, args)
			}
			return nil
		}
	}
	for _, sub := range c.Commands() {
		hook(sub, apply)
	}
}

// apply sets each flag of cmd the command line did not give from its
// environment variable, else from the config file. The whole file is
// checked, the keys of other commands too: a file 'config check' refuses
// is refused by every command.
func (c *configurer) apply(cmd *cobra.Command, _ []string) error {
	if c.done || !cmd.HasParent() {
		return nil
	}
	top := cmd
	for top.Parent().HasParent() {
		top = top.Parent()
	}
	if builtin(top) {
		return nil // help, completion and config check work whatever the file holds
	}
	c.done = true

	given := map[*pflag.Flag]bool{}
	var keys []Key // of every flag cmd has, its own and its parents' persistent ones
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		given[f] = f.Changed
		if k, ok := c.keyOf(cmd, f); ok {
			keys = append(keys, k)
		}
	})
	env := map[*pflag.Flag]string{}
	for _, k := range keys {
		// An empty variable is unset: a unit can clear one it inherits.
		if v := os.Getenv(k.Env); v != "" && !given[k.Flag] {
			env[k.Flag] = v
		}
	}

	file, from := cmd.Root().PersistentFlags().Lookup(configFlag).Value.String(), ""
	if file == "" {
		file, from = os.Getenv(c.envName()), " ($"+c.envName()+")"
	}
	if file != "" {
		data, err := os.ReadFile(file)
		if err != nil {
			return fmt.Errorf("config file %s%s: %w", file, from, UnwrapPath(err))
		}
		settings, errs := load(c.p.Name, file, data, c.p.Root(io.Discard, io.Discard))
		if len(errs) > 0 {
			return c.startError(file, errs)
		}
		byName := map[string]*pflag.Flag{}
		for _, k := range keys {
			byName[k.Name()] = k.Flag
		}
		for _, s := range settings {
			f := byName[s.key.Name()]
			if _, inEnv := env[f]; f == nil || given[f] || inEnv {
				continue // another command's, or overridden
			}
			for _, v := range s.values {
				if err := set(f, v.Value); err != nil {
					return &FileError{File: file, Line: v.Line, Key: s.key.Name(), Msg: invalid(f, v.Value, err)}
				}
			}
		}
	}

	for _, k := range keys {
		v, ok := env[k.Flag]
		if !ok {
			continue
		}
		items := []string{v}
		if k.List() {
			var err error
			if items, err = splitList(v); err != nil {
				return fmt.Errorf("%s: %w", k.Env, err)
			}
		}
		for _, item := range items {
			if err := set(k.Flag, item); err != nil {
				return fmt.Errorf("%s: %s", k.Env, invalid(k.Flag, item, err))
			}
		}
	}
	return nil
}

// keyOf is the key of f, a flag of cmd: it belongs to the nearest of cmd
// and its parents that declares it.
func (c *configurer) keyOf(cmd *cobra.Command, f *pflag.Flag) (Key, bool) {
	for d := cmd; d != nil; d = d.Parent() {
		if ownFlag(d, f.Name) != f {
			continue
		}
		var path []string
		for p := d; p.HasParent(); p = p.Parent() {
			path = append([]string{p.Name()}, path...)
		}
		return newKey(c.p.Name, path, f), true
	}
	return Key{}, false
}

// startError is the one line a command refused for its file prints: the
// first error, and how to see the others.
func (c *configurer) startError(file string, errs []error) error {
	if len(errs) == 1 {
		return errs[0]
	}
	return fmt.Errorf("%w (%d more; see '%s config check %s')", errs[0], len(errs)-1, c.p.Name, file)
}

func (c *configurer) command() *cobra.Command {
	prog := c.p.Name
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Check a config file; list the keys a file and the environment can set",
		Long: fmt.Sprintf(`Every flag of every %[1]s command can also be set in one YAML file,
named by --config FILE or $%[2]s (no other file is read), and by an
environment variable. A flag takes the first of: the command line, its
variable, the file, its default.

Keys follow the commands: a command's section holds its flags and its
subcommands' sections, and a persistent flag sits in the section of the
command that declares it. Variables are the program's name, then the
section names and the flag's, upper case, with '_' for '-':

    mount:              %[3]s_MOUNT_RETAIN=72h
      retain: 72h
      exclude: [_tmp*, "*.crc"]

A list key is the flag given once per item; its variable is a
comma-separated list. Every value is read by the flag's own parser. An
empty variable counts as unset. Unknown keys are refused, with the line.`, prog, c.envName(), strings.ToUpper(prog)),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "check FILE",
		Short: "Check a config file: every key known, every value valid; prints OK or each error",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return fmt.Errorf("config check: need FILE, got %d argument(s) (see '%s --help')", len(args), cmd.CommandPath())
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			file := args[0]
			data, err := os.ReadFile(file)
			if err != nil {
				return fmt.Errorf("config file %s: %w", file, UnwrapPath(err))
			}
			_, errs := load(prog, file, data, c.p.Root(io.Discard, io.Discard))
			if len(errs) == 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "%s: OK\n", file)
				return nil
			}
			for _, err := range errs {
				fmt.Fprintf(cmd.ErrOrStderr(), "%s: %v\n", prog, err)
			}
			return &ExitError{Code: 1}
		},
	}, &cobra.Command{
		Use:   "keys",
		Short: "List every key: its environment variable, type and default",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "KEY\tVARIABLE\tTYPE\tDEFAULT")
			for _, k := range Keys(c.p) {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", k.Name(), k.Env, keyType(k), keyDefault(k))
			}
			return tw.Flush()
		},
	})
	return cmd
}

// keyType is a key's type as 'config keys' prints it.
func keyType(k Key) string {
	if k.List() {
		return "list"
	}
	return k.Flag.Value.Type()
}

// keyDefault is a key's default as 'config keys' prints it.
func keyDefault(k Key) string {
	if d := k.Flag.DefValue; d != "[]" && d != "" {
		return d
	}
	return "-"
}
