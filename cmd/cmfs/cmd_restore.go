package main

import (
	"github.com/cmfs-project/cmfs/internal/durable"

	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cmfs-project/cmfs/cmroot"
	"github.com/cmfs-project/cmfs/control"
	"github.com/cmfs-project/cmfs/internal/checksum"
	"github.com/cmfs-project/cmfs/internal/statedir"
	"github.com/cmfs-project/cmfs/journal"
)

type restoreOptions struct {
	stateOptions
	event uint64
	to    string
}

func newRestoreCmd(g *globalOptions) *cobra.Command {
	var opts restoreOptions
	cmd := &cobra.Command{
		Use:   "restore [--state DIR | BACKING] --event N [--to DIR] [PATH...]",
		Short: "Put back the originals an event preserved",
		Long: `Put back the originals that event N preserved (the files it lists with a
cmroot name), at their paths relative to the warehouse root, or below --to
DIR keeping those paths. PATH arguments (relative to the warehouse root)
restrict which files: a file matches a PATH equal to it or a directory
above it. The restored bytes are checked against the event's xxh64.

Mounted, restore writes through the mountpoint (temp file + rename), so
the restore is itself journaled and whatever it replaces is preserved.
Unmounted, it writes into the backing directory directly and refuses to
replace a file with different content.`,
		Example: `  cmfs restore /data/warehouse --event 42
  cmfs restore /data/warehouse --event 42 sales.db/orders/dt=2024-01-01
  cmfs restore --state /var/lib/cmfs --event 42 --to /tmp/recovered`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runRestore(cmd.Context(), g, opts, args)
		},
	}
	opts.addFlags(cmd)
	cmd.Flags().Uint64Var(&opts.event, "event", 0, "the event `N` whose preserved originals to put back (required)")
	cmd.Flags().StringVar(&opts.to, "to", "", "restore below `DIR` instead of at the original paths")
	return cmd
}

// restoreSource reads the preserved originals, from the mount or from the
// unmounted store.
type restoreSource interface {
	event(ctx context.Context, id uint64) (journal.Event, error)
	// put writes the entry's content to dst. replace says dst may be
	// replaced (the write goes through a live mount, which preserves it).
	put(ctx context.Context, f journal.File, dst string, replace bool) error
	Close() error
}

func runRestore(ctx context.Context, g *globalOptions, opts restoreOptions, args []string) error {
	t, args, err := opts.resolve(args, true)
	if err != nil {
		return err
	}
	if opts.event == 0 {
		return errors.New("restore: which event? give --event N")
	}
	filters, err := restoreFilters(args)
	if err != nil {
		return err
	}

	var (
		src  restoreSource
		root string // where the warehouse's relative paths land
		mnt  string // the live mountpoint, if mounted
	)
	if c, st := live(ctx, t); c != nil {
		src, mnt, root = &mountSource{c: c}, st.Mountpoint, st.Mountpoint
	} else {
		off, err := openOffline(t)
		if err != nil {
			return err
		}
		src, root = &storeSource{off: off}, t.backing
	}
	defer src.Close()
	if opts.to != "" {
		if root, err = filepath.Abs(opts.to); err != nil {
			return err
		}
	} else if root == "" {
		return fmt.Errorf("the backing directory of %s is unknown: give BACKING or --to DIR", t.state)
	}

	e, err := src.event(ctx, opts.event)
	if err != nil {
		return err
	}
	files, err := preserved(e, filters)
	if err != nil {
		return err
	}
	for _, f := range files {
		dst := filepath.Join(root, filepath.FromSlash(f.Path))
		if !within(dst, root) || dst == root {
			return fmt.Errorf("event %d names %q, which lies outside the warehouse", e.ID, f.Path)
		}
		replace := mnt != "" && within(dst, mnt)
		if err := src.put(ctx, f, dst, replace); err != nil {
			return err
		}
		fmt.Fprintf(g.stdout, "restored %s (%d bytes, xxh64 %s) from event %d\n", dst, f.Size, f.XXH64, e.ID)
	}
	return nil
}

// restoreFilters cleans the PATH arguments into warehouse-relative paths.
func restoreFilters(args []string) ([]string, error) {
	var out []string
	for _, a := range args {
		p := path.Clean(filepath.ToSlash(a))
		if path.IsAbs(p) || p == ".." || strings.HasPrefix(p, "../") {
			return nil, fmt.Errorf("PATH %s: give it relative to the warehouse root (like sales.db/orders/part-0)", a)
		}
		out = append(out, p)
	}
	return out, nil
}

// preserved returns the event's preserved originals that match a filter
// (all when there are none).
func preserved(e journal.Event, filters []string) ([]journal.File, error) {
	var all []journal.File
	for _, f := range e.Files {
		if f.CM != "" {
			all = append(all, f)
		}
	}
	if len(all) == 0 {
		return nil, fmt.Errorf("event %d (%s %s) preserved nothing", e.ID, e.Type, e.Path)
	}
	if len(filters) == 0 {
		return all, nil
	}
	var out []journal.File
	for _, p := range filters {
		n := len(out)
		for _, f := range all {
			if p == "." || f.Path == p || strings.HasPrefix(f.Path, p+"/") {
				out = append(out, f)
			}
		}
		if len(out) == n {
			return nil, fmt.Errorf("event %d preserved nothing at %s", e.ID, p)
		}
	}
	return out, nil
}

// mountSource restores through a live mount: the event and the entry's
// location come over the control socket; the bytes are read from cmroot
// directly (same host) and written through the mountpoint.
type mountSource struct{ c *control.Client }

func (s *mountSource) Close() error { return s.c.Close() }

func (s *mountSource) event(ctx context.Context, id uint64) (journal.Event, error) {
	var found *journal.Event
	err := s.c.Events(ctx, id, id, false, func(e journal.Event) error {
		found = &e
		return nil
	})
	if err != nil {
		return journal.Event{}, fmt.Errorf("event %d: %w", id, err)
	}
	if found == nil {
		st, _ := s.c.Status(ctx)
		return journal.Event{}, fmt.Errorf("no event %d: the journal ends at %d", id, st.LastEventID)
	}
	return *found, nil
}

func (s *mountSource) put(ctx context.Context, f journal.File, dst string, replace bool) error {
	ent, err := s.c.Lookup(ctx, f.CM)
	if err != nil {
		return missingEntry(f, err)
	}
	if done, err := existing(f, dst, replace); done || err != nil {
		return err
	}
	return copyVerified(ent.Path, dst, f)
}

// storeSource restores from an unmounted state directory.
type storeSource struct{ off *offline }

func (s *storeSource) Close() error { return s.off.Close() }

func (s *storeSource) event(_ context.Context, id uint64) (journal.Event, error) {
	if last := s.off.j.Last(); id > last {
		return journal.Event{}, fmt.Errorf("no event %d: the journal ends at %d", id, last)
	}
	e, err := s.off.j.Get(id)
	if err != nil {
		return journal.Event{}, fmt.Errorf("event %d: %w", id, err)
	}
	return *e, nil
}

func (s *storeSource) put(_ context.Context, f journal.File, dst string, replace bool) error {
	if _, err := s.off.store.Lookup(f.CM); err != nil {
		return missingEntry(f, err)
	}
	if done, err := existing(f, dst, replace); done || err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("restore %s: %w", f.Path, err)
	}
	if err := s.off.store.Restore(f.CM, dst); err != nil {
		return fmt.Errorf("restore %s: %w", f.Path, err)
	}
	if err := verify(dst, f); err != nil {
		os.Remove(dst)
		return err
	}
	return nil
}

func missingEntry(f journal.File, err error) error {
	if errors.Is(err, cmroot.ErrNotFound) {
		return fmt.Errorf("restore %s: its original %s is missing from cmroot (removed by gc, or lost): %w", f.Path, f.CM, err)
	}
	return fmt.Errorf("restore %s: look up %s: %w", f.Path, f.CM, err)
}

// existing checks what is at dst already: the same content (nothing to
// do), something else (refused unless replace), or nothing.
func existing(f journal.File, dst string, replace bool) (done bool, err error) {
	fi, err := os.Lstat(dst)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("restore %s: %w", f.Path, err)
	}
	if fi.Mode().IsRegular() && fi.Size() == f.Size {
		if _, sum, err := checksum.File(dst, nil); err == nil && sum == f.XXH64 {
			return true, nil
		}
	}
	if replace {
		return false, nil
	}
	return false, fmt.Errorf("restore %s: %s exists with other content; move it away or restore with --to DIR", f.Path, dst)
}

// verify checks that the file at p holds the event's content.
func verify(p string, f journal.File) error {
	_, sum, err := checksum.File(p, nil)
	if err != nil {
		return fmt.Errorf("verify %s: %w", p, err)
	}
	if sum != f.XXH64 {
		return fmt.Errorf("restore %s: wrote content with xxh64 %s, the event says %s", f.Path, sum, f.XXH64)
	}
	return nil
}

// copyVerified copies src to dst through a temp file: write, fsync,
// check the written bytes against the event, rename over dst, fsync the
// directory. The temp file sits in a staging directory next to dst whose
// name the mount excludes from protection by default (.hive-staging*),
// so through a mount the journal shows the restore as new content at
// dst, not as a stray temp file renamed.
func copyVerified(src, dst string, f journal.File) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("restore %s: open original: %w", f.Path, err)
	}
	defer in.Close()
	mode := fs.FileMode(0o644)
	if fi, err := in.Stat(); err == nil {
		mode = fi.Mode().Perm()
	}
	dir := filepath.Dir(dst)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("restore %s: %w", f.Path, err)
	}
	staging, err := os.MkdirTemp(dir, statedir.RestoreStagingPrefix)
	if err != nil {
		return fmt.Errorf("restore %s: %w", f.Path, err)
	}
	defer os.RemoveAll(staging)
	tmp, err := os.OpenFile(filepath.Join(staging, filepath.Base(dst)), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("restore %s: %w", f.Path, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
		}
	}()
	if _, err = io.Copy(tmp, in); err != nil {
		return fmt.Errorf("restore %s: copy: %w", f.Path, err)
	}
	if err = tmp.Chmod(mode); err != nil {
		return fmt.Errorf("restore %s: %w", f.Path, err)
	}
	if err = tmp.Sync(); err != nil {
		return fmt.Errorf("restore %s: fsync: %w", f.Path, err)
	}
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("restore %s: close: %w", f.Path, err)
	}
	if err = verify(tmp.Name(), f); err != nil {
		return err
	}
	if err = os.Rename(tmp.Name(), dst); err != nil {
		return fmt.Errorf("restore %s: %w", f.Path, err)
	}
	return durable.SyncDir(dir)
}
