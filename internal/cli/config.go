package cli

import (
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
)

// Every flag of every command of a Program can also be given in one YAML
// file (--config FILE, or $PROG_CONFIG) and in the environment. A flag
// takes the first of: the command line, its environment variable, the
// file, its default. Nothing is read from a path nobody named.
//
// Keys mirror the command tree: a command's section is a mapping of its
// flags and its subcommands' sections, and a flag sits in the section of
// the command that declares it (a persistent flag once, for all the
// commands below). Every value goes through the flag's own parser, so a
// file or a variable can say exactly what the command line can, and is
// refused with the same words; a list is the flag given once per item.

// Key is a setting a config file or the environment can give: one flag
// of one command.
type Key struct {
	// Path is the command's names below the root, then the flag's:
	// ["mount", "retain"].
	Path []string
	// Env is the environment variable: the program's name, then Path,
	// upper case, '-' and '.' as '_' (CMFS_MOUNT_RETAIN).
	Env  string
	Flag *pflag.Flag
}

// Name is the key as an error names it: "mount.retain".
func (k Key) Name() string { return strings.Join(k.Path, ".") }

// List reports whether the flag repeats: a YAML list in the file, a
// comma-separated list in the environment.
func (k Key) List() bool { _, ok := k.Flag.Value.(pflag.SliceValue); return ok }

// Keys lists every key of p's command tree, in the order of its help.
func Keys(p Program) []Key {
	var keys []Key
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if configurable(c, f) {
				keys = append(keys, newKey(p.Name, path, f))
			}
		})
		for _, sub := range c.Commands() {
			if !builtin(sub) {
				walk(sub, append(path[:len(path):len(path)], sub.Name()))
			}
		}
	}
	walk(p.Root(io.Discard, io.Discard), nil)
	return keys
}

func newKey(prog string, cmdPath []string, f *pflag.Flag) Key {
	path := append(cmdPath[:len(cmdPath):len(cmdPath)], f.Name)
	env := strings.NewReplacer("-", "_", ".", "_").Replace(strings.ToUpper(prog + "_" + strings.Join(path, "_")))
	return Key{Path: path, Env: env, Flag: f}
}

// configFlag names the file; it is the one flag a file cannot set.
const configFlag = "config"

// builtin reports whether c is one of the commands no key configures:
// cobra's help and completion, and config.
func builtin(c *cobra.Command) bool {
	if !c.HasParent() || c.Parent().HasParent() {
		return false
	}
	switch c.Name() {
	case "help", "completion", "config", cobra.ShellCompRequestCmd, cobra.ShellCompNoDescRequestCmd:
		return true
	}
	return false
}

// configurable reports whether f, declared by c, has a key: not cobra's
// --help and --version, nor --config.
func configurable(c *cobra.Command, f *pflag.Flag) bool {
	switch f.Name {
	case "help":
		return false
	case "version", configFlag:
		return c.HasParent()
	}
	return true
}

// ownFlag is c's flag name if c declares it and it has a key, or nil.
func ownFlag(c *cobra.Command, name string) *pflag.Flag {
	f := c.LocalFlags().Lookup(name)
	if f == nil || !configurable(c, f) {
		return nil
	}
	return f
}

// subcommand is c's subcommand name if it has keys, or nil.
func subcommand(c *cobra.Command, name string) *cobra.Command {
	for _, sub := range c.Commands() {
		if sub.Name() == name && !builtin(sub) {
			return sub
		}
	}
	return nil
}

// FileError is one thing wrong with a config file: where, which key
// (none for bad YAML) and what.
type FileError struct {
	File string
	Line int
	Key  string
	Msg  string
}

func (e *FileError) Error() string {
	if e.Key == "" {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s:%d: %s: %s", e.File, e.Line, e.Key, e.Msg)
}

// setting is one key a file gives, and its values: one for a flag that
// takes one, a list's items in order for one that repeats.
type setting struct {
	key    Key
	values []*yaml.Node
}

// parse reads a config file's text against the command tree under root
// and returns its settings, or every error it finds, each at its line.
// It checks names and shapes only; load checks the values.
func parse(prog, file string, data []byte, root *cobra.Command) ([]setting, []error) {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
		return nil, nil // empty: every flag at its default
	} else if err != nil {
		return nil, []error{syntaxError(file, err)}
	}
	var next yaml.Node
	if err := dec.Decode(&next); err == nil {
		return nil, []error{&FileError{File: file, Line: next.Line, Msg: "a second YAML document (one file holds one)"}}
	} else if !errors.Is(err, io.EOF) {
		return nil, []error{syntaxError(file, err)}
	}
	top := doc.Content[0]
	if isNull(top) {
		return nil, nil
	}
	if top.Kind != yaml.MappingNode {
		return nil, []error{&FileError{File: file, Line: top.Line, Msg: fmt.Sprintf("want a mapping of keys, such as 'mount: {retain: 72h}' (see '%s config keys')", prog)}}
	}
	p := parser{prog: prog, file: file}
	p.section(top, root, nil)
	return p.settings, p.errs
}

type parser struct {
	prog, file string
	settings   []setting
	errs       []error
}

func (p *parser) fail(n *yaml.Node, key, format string, args ...any) {
	p.errs = append(p.errs, &FileError{File: p.file, Line: n.Line, Key: key, Msg: fmt.Sprintf(format, args...)})
}

// section reads the mapping m of command c's keys; path is c's names
// below the root.
func (p *parser) section(m *yaml.Node, c *cobra.Command, path []string) {
	seen := map[string]int{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], deref(m.Content[i+1])
		name := k.Value
		key := strings.Join(append(path[:len(path):len(path)], name), ".")
		if k.Kind != yaml.ScalarNode {
			p.fail(k, "", "want a key name")
			continue
		}
		if first, ok := seen[name]; ok {
			p.fail(k, key, "given twice (first at line %d)", first)
			continue
		}
		seen[name] = k.Line
		if sub := subcommand(c, name); sub != nil {
			switch {
			case isNull(v):
			case v.Kind == yaml.MappingNode:
				p.section(v, sub, append(path[:len(path):len(path)], name))
			default:
				p.fail(v, key, "want a mapping of the flags of '%s'", sub.CommandPath())
			}
			continue
		}
		f := ownFlag(c, name)
		switch {
		case f == nil && v.Kind == yaml.MappingNode:
			p.fail(k, key, "unknown key: there is no command '%s %s'", c.CommandPath(), name)
			continue
		case f == nil:
			p.fail(k, key, "unknown key: '%s' has no flag --%s", c.CommandPath(), name)
			continue
		}
		s := setting{key: newKey(p.prog, path, f)}
		switch {
		case isNull(v):
			p.fail(v, key, "no value (leave the key out for the default)")
			continue
		case v.Kind == yaml.ScalarNode:
			s.values = []*yaml.Node{v}
		case v.Kind == yaml.SequenceNode && s.key.List():
			for _, item := range v.Content {
				if item = deref(item); item.Kind != yaml.ScalarNode || isNull(item) {
					p.fail(item, key, "want a value in the list")
					continue
				}
				s.values = append(s.values, item)
			}
		case v.Kind == yaml.SequenceNode:
			p.fail(v, key, "takes one value, not a list")
			continue
		default:
			p.fail(v, key, "takes a value, not a mapping")
			continue
		}
		p.settings = append(p.settings, s)
	}
}

func deref(n *yaml.Node) *yaml.Node {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		return n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.Tag == "!!null" }

// syntaxError turns the YAML parser's "yaml: line N: …" into "FILE:N: …".
func syntaxError(file string, err error) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if n, msg, ok := strings.Cut(rest, ": "); ok {
			if line, err := strconv.Atoi(n); err == nil {
				return &FileError{File: file, Line: line, Msg: msg}
			}
		}
	}
	return fmt.Errorf("%s: %s", file, msg)
}

// load parses data, the text of file, against root and sets every value
// on root's flags: root is a tree built for the purpose, so that every
// key is checked, those of the commands not run too.
func load(prog, file string, data []byte, root *cobra.Command) ([]setting, []error) {
	settings, errs := parse(prog, file, data, root)
	for _, s := range settings {
		for _, v := range s.values {
			if err := set(s.key.Flag, v.Value); err != nil {
				errs = append(errs, &FileError{File: file, Line: v.Line, Key: s.key.Name(), Msg: invalid(s.key.Flag, v.Value, err)})
			}
		}
	}
	slices.SortStableFunc(errs, func(a, b error) int { return lineOf(a) - lineOf(b) })
	return settings, errs
}

func lineOf(err error) int {
	var fe *FileError
	if errors.As(err, &fe) {
		return fe.Line
	}
	return 0
}

// set gives f the value v as the command line would, and marks it given
// (a command that asks whether a flag was given gets the same answer).
func set(f *pflag.Flag, v string) error {
	if err := f.Value.Set(v); err != nil {
		return err
	}
	f.Changed = true
	return nil
}

// invalid says what is wrong with v for f, in the words of f's own parser:
// `invalid duration "3x"`, `invalid format "xml": want text or json`.
func invalid(f *pflag.Flag, v string, err error) string {
	var ne *strconv.NumError
	if errors.As(err, &ne) {
		if errors.Is(ne.Err, strconv.ErrRange) {
			return fmt.Sprintf("invalid %s %q: out of range", f.Value.Type(), v)
		}
		return fmt.Sprintf("invalid %s %q", f.Value.Type(), v)
	}
	msg := strings.TrimPrefix(err.Error(), "time: ")
	if strings.Contains(msg, strconv.Quote(v)) {
		return msg
	}
	return fmt.Sprintf("invalid %s %q: %s", f.Value.Type(), v, msg)
}

// splitList splits a list flag's environment variable at its commas, as
// pflag reads a string slice (CSV: quote an item that holds a comma).
func splitList(v string) ([]string, error) {
	r := csv.NewReader(strings.NewReader(v))
	items, err := r.Read()
	if err != nil {
		var pe *csv.ParseError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, fmt.Errorf("invalid list %q: %w", v, err)
	}
	return items, nil
}
