package main

import (
	"github.com/cmfs-project/cmfs/internal/cli"

	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/cmfs-project/cmfs/cmroot"
	"github.com/cmfs-project/cmfs/control"
	"github.com/cmfs-project/cmfs/internal/statedir"
	"github.com/cmfs-project/cmfs/journal"
)

// maxSocketPath is the longest path a unix socket can bind (sun_path is
// 108 bytes, NUL included).
const maxSocketPath = 107

// stateOptions selects a state directory: --state DIR or a BACKING
// argument (state BACKING/.cmfs), exactly one.
type stateOptions struct {
	state string
}

func (o *stateOptions) addFlags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&o.state, "state", "", "state `DIR` (default: BACKING/.cmfs)")
}

// target is where a command works: the state directory and, when known,
// the backing directory.
type target struct {
	state   string
	backing string
	record  statedir.Record // zero unless the state has been mounted before
}

// resolve picks the state directory from --state or the first argument
// and returns the remaining arguments. With keepRest false any extra
// argument is an error.
func (o *stateOptions) resolve(args []string, keepRest bool) (target, []string, error) {
	var t target
	switch {
	case o.state != "":
		if !keepRest && len(args) > 0 {
			return t, nil, fmt.Errorf("give either --state DIR or BACKING, not both (got --state %s and %q)", o.state, args[0])
		}
		abs, err := filepath.Abs(o.state)
		if err != nil {
			return t, nil, err
		}
		t.state = abs
	case len(args) == 0:
		return t, nil, errors.New("which mount? give BACKING or --state DIR")
	default:
		backing, err := cli.Directory("backing directory", args[0])
		if err != nil {
			return t, nil, err
		}
		t.backing, t.state = backing, filepath.Join(backing, statedir.Name)
		args = args[1:]
		if !keepRest && len(args) > 0 {
			return t, nil, fmt.Errorf("unexpected argument %q", args[0])
		}
	}
	rec, err := statedir.ReadRecord(t.state)
	if err != nil {
		return t, nil, err
	}
	t.record = rec
	if t.backing == "" {
		t.backing = rec.Backing
	}
	return t, args, nil
}

func (t target) socket() string { return filepath.Join(t.state, statedir.SocketFile) }

func (t target) cmroot() string {
	if t.record.CMRoot != "" {
		return t.record.CMRoot
	}
	return filepath.Join(t.state, statedir.CMRootDir)
}

// live returns a client and the mount's status when a mount answers on
// the target's control socket, and nil when none does.
func live(ctx context.Context, t target) (*control.Client, *control.Status) {
	c, err := control.Dial(t.socket())
	if err != nil {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := c.Status(ctx)
	if err != nil {
		c.Close()
		return nil, nil
	}
	return c, &st
}

// openJournal opens the journal of an unmounted target read-only.
func openJournal(t target) (*journal.Log, error) {
	path := filepath.Join(t.state, statedir.JournalFile)
	if _, err := os.Stat(path); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("no cmfs journal in %s (never mounted?)", t.state)
		}
		return nil, fmt.Errorf("journal %s: %w", path, cli.UnwrapPath(err))
	}
	j, err := journal.Open(path, journal.Options{ReadOnly: true, LockTimeout: time.Second})
	if errors.Is(err, journal.ErrLocked) {
		return nil, fmt.Errorf("journal %s is held by a mount whose control socket does not answer: %w", path, err)
	}
	if err != nil {
		return nil, err // journal.Open names the file
	}
	return j, nil
}

// openStore opens the cmroot of an unmounted target.
func openStore(t target) (*cmroot.Store, error) {
	dir := t.cmroot()
	if _, err := os.Stat(dir); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("no cmroot at %s (never mounted?)", dir)
		}
		return nil, fmt.Errorf("cmroot %s: %w", dir, cli.UnwrapPath(err))
	}
	s, err := cmroot.Open(dir, cmroot.Options{Retain: t.record.Retention(cmroot.DefaultRetain)})
	if err != nil {
		return nil, err // cmroot.Open names the directory
	}
	return s, nil
}

// offline is an unmounted target's journal and store, opened together.
type offline struct {
	j     *journal.Log
	store *cmroot.Store
}

func openOffline(t target) (*offline, error) {
	j, err := openJournal(t)
	if err != nil {
		return nil, err
	}
	s, err := openStore(t)
	if err != nil {
		j.Close()
		return nil, err
	}
	return &offline{j: j, store: s}, nil
}

func (o *offline) Close() error {
	return errors.Join(o.store.Close(), o.j.Close())
}
