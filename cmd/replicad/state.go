package main

import (
	"github.com/cmfs-project/cmfs/internal/cli"

	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cmfs-project/cmfs/control"
	"github.com/cmfs-project/cmfs/internal/statedir"
	"github.com/cmfs-project/cmfs/journal"
	"github.com/cmfs-project/cmfs/repl"
)

// mount is a cmfs-protected warehouse on this machine: its state
// directory, backing directory (the warehouse root) and cmroot.
type mount struct {
	state   string
	backing string
	cmroot  string
}

// resolveMount finds the mount of a state directory. backing, if not
// empty, overrides the record's backing directory; with state empty it is
// required and the state is backing/.cmfs.
func resolveMount(state, backing string) (mount, error) {
	var m mount
	if state == "" && backing == "" {
		return m, errors.New("which warehouse? give --state DIR")
	}
	if backing != "" {
		b, err := cli.Directory("backing directory", backing)
		if err != nil {
			return m, err
		}
		m.backing = b
		if state == "" {
			state = filepath.Join(b, statedir.Name)
		}
	}
	s, err := cli.Directory("state directory", state)
	if err != nil {
		return m, err
	}
	m.state = s
	rec, err := statedir.ReadRecord(s)
	if err != nil {
		return m, err
	}
	if m.backing == "" {
		if rec.Backing == "" {
			return m, fmt.Errorf("state directory %s has no %s (never mounted?): give --backing DIR", state, statedir.RecordFile)
		}
		if m.backing, err = cli.Directory("backing directory", rec.Backing); err != nil {
			return m, fmt.Errorf("%w (from %s)", err, filepath.Join(s, statedir.RecordFile))
		}
	}
	m.cmroot = rec.CMRoot
	if m.cmroot == "" {
		m.cmroot = filepath.Join(s, statedir.CMRootDir)
	}
	return m, nil
}

// sourceID names a local source the way `replicad serve` names it by
// default (source.Config.SourceID): "<hostname>:<backing>", so dumps made
// locally and through serve can be loaded into the same target.
func (m mount) sourceID() string {
	host, err := os.Hostname()
	if err != nil {
		host = "localhost"
	}
	return host + ":" + m.backing
}

// openEvents returns the mount's journal as repl.Events: through the
// control socket while a mount answers there (it holds the journal's
// lock), else the journal file opened read-only.
func openEvents(ctx context.Context, m mount) (repl.Events, func() error, error) {
	if c, err := control.Dial(filepath.Join(m.state, statedir.SocketFile)); err == nil {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := c.Status(sctx)
		cancel()
		if err == nil {
			return controlEvents{c}, c.Close, nil
		}
		c.Close()
	}
	path := filepath.Join(m.state, statedir.JournalFile)
	if _, err := os.Stat(path); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil, fmt.Errorf("no cmfs journal in %s (never mounted?)", m.state)
		}
		return nil, nil, fmt.Errorf("journal %s: %w", path, cli.UnwrapPath(err))
	}
	j, err := journal.Open(path, journal.Options{ReadOnly: true, LockTimeout: time.Second})
	if errors.Is(err, journal.ErrLocked) {
		return nil, nil, fmt.Errorf("journal %s is held by a mount whose control socket does not answer: %w", path, err)
	}
	if err != nil {
		return nil, nil, err // journal.Open names the file
	}
	return repl.JournalEvents(j), j.Close, nil
}

// controlEvents adapts a mount's control socket to repl.Events.
type controlEvents struct{ c *control.Client }

func (e controlEvents) Last(ctx context.Context) (uint64, error) {
	st, err := e.c.Status(ctx)
	if err != nil {
		return 0, fmt.Errorf("mount status: %w", err)
	}
	return st.LastEventID, nil
}

func (e controlEvents) Range(ctx context.Context, from, to uint64, fn func(*journal.Event) error) error {
	return e.c.Events(ctx, from, to, false, func(ev journal.Event) error { return fn(&ev) })
}

// tree is the mount's backing directory as a BOOTSTRAP walks it: without
// cmfs's scratch paths, and without the state directory and cmroot when
// they live inside it under other names than .cmfs.
func (m mount) tree() repl.Tree {
	t := repl.LocalTree{Root: m.backing, Exclude: statedir.DefaultExcludes}
	var skip []string
	for _, d := range []string{m.state, m.cmroot} {
		if rel, err := filepath.Rel(m.backing, d); err == nil && rel != "." && !strings.HasPrefix(rel, "..") {
			skip = append(skip, filepath.ToSlash(rel))
		}
	}
	if len(skip) == 0 {
		return t
	}
	return skipTree{Tree: t, skip: skip}
}

// skipTree leaves paths below some directories out of a walk.
type skipTree struct {
	repl.Tree
	skip []string
}

func (t skipTree) Walk(ctx context.Context, fn func(repl.Entry) error) error {
	return t.Tree.Walk(ctx, func(e repl.Entry) error {
		for _, s := range t.skip {
			if e.Path == s || strings.HasPrefix(e.Path, s+"/") {
				return nil
			}
		}
		return fn(e)
	})
}

// makeDirectory is directory for a directory that is created if missing
// (its parent must exist).
func makeDirectory(what, p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", fmt.Errorf("%s %s: %w", what, p, err)
	}
	if err := os.Mkdir(abs, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		if errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("%s %s cannot be created: %s does not exist", what, p, filepath.Dir(abs))
		}
		return "", fmt.Errorf("%s %s cannot be created: %w", what, p, cli.UnwrapPath(err))
	}
	return cli.Directory(what, abs)
}

// printJSON prints v as one JSON object and a newline.
func printJSON(g *globalOptions, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(g.stdout, "%s\n", b)
	return err
}
