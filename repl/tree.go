package repl

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"github.com/cmfs-project/cmfs/internal/checksum"
	"github.com/cmfs-project/cmfs/internal/statedir"
)

// Tree is the current source tree, as a BOOTSTRAP dump lists it.
type Tree interface {
	// Walk calls fn, one call at a time, for every directory, regular
	// file and symlink below the root (not the root itself): every kind
	// of entry an INCREMENTAL dump carries. fn's error stops the walk and
	// is returned.
	Walk(ctx context.Context, fn func(Entry) error) error
}

// EntryKind says what an Entry is.
type EntryKind uint8

// Entry kinds.
const (
	EntryDir EntryKind = iota + 1
	EntryFile
	EntrySymlink
)

// Entry is one directory, file or symlink of a Tree.
type Entry struct {
	Path   string // slash-separated, relative to the root
	Kind   EntryKind
	Size   int64  // a file's
	XXH64  string // a file's
	Target string // a symlink's, as readlink(2) returns it
}

// LocalTree walks a directory on this machine and hashes every file.
// It leaves out cmfs's state directory (.cmfs), the names a replica keeps
// at its root (.replstate, .repl-staging, .repl-lock), every path with a component
// matching one of the Exclude globs (path.Match syntax, as cmfs mount
// --exclude), and everything that is not a directory, a regular file or a
// symlink (devices, fifos, sockets: cmfs journals none of them). A
// symlink is listed with its target, never followed.
type LocalTree struct {
	Root    string
	Exclude []string
	// Workers bounds how many files are hashed at once; 0 means GOMAXPROCS.
	Workers int
}

var _ Tree = LocalTree{}

// skipAtRoot are top-level names that are never part of the tree.
var skipAtRoot = map[string]bool{statedir.Name: true, stateFile: true, stagingDir: true, lockFile: true}

func (t LocalTree) excluded(rel string) bool {
	if !strings.Contains(rel, "/") && skipAtRoot[rel] {
		return true
	}
	return statedir.Excluded(t.Exclude, rel)
}

type hashed struct {
	Entry
	err error
}

// Walk implements Tree. Files are hashed by a pool of workers; fn is
// called from Walk's goroutine only.
func (t LocalTree) Walk(ctx context.Context, fn func(Entry) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	workers := t.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	jobs := make(chan string, 4*workers)
	results := make(chan hashed, 4*workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 256<<10)
			for rel := range jobs {
				size, sum, err := checksum.File(filepath.Join(t.Root, filepath.FromSlash(rel)), buf)
				select {
				case results <- hashed{Entry: Entry{Path: rel, Kind: EntryFile, Size: size, XXH64: sum}, err: err}:
				case <-ctx.Done():
				}
			}
		}()
	}
	walkErr := make(chan error, 1)
	go func() {
		defer close(jobs)
		walkErr <- filepath.WalkDir(t.Root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if p != t.Root && errors.Is(err, fs.ErrNotExist) {
					// A directory removed after its parent listed it:
					// as for a file, the events after the pin replay it.
					return nil
				}
				return err
			}
			if p == t.Root {
				return nil
			}
			rel, err := filepath.Rel(t.Root, p)
			if err != nil {
				return err
			}
			rel = filepath.ToSlash(rel)
			if t.excluded(rel) {
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
			var msg hashed
			switch {
			case d.IsDir():
				msg = hashed{Entry: Entry{Path: rel, Kind: EntryDir}}
			case d.Type()&fs.ModeSymlink != 0:
				target, err := os.Readlink(p)
				msg = hashed{Entry: Entry{Path: rel, Kind: EntrySymlink, Target: target}, err: err}
			case d.Type().IsRegular():
				select {
				case jobs <- rel:
				case <-ctx.Done():
					return ctx.Err()
				}
				return nil
			default:
				return nil
			}
			select {
			case results <- msg:
			case <-ctx.Done():
				return ctx.Err()
			}
			return nil
		})
	}()
	go func() {
		wg.Wait()
		close(results)
	}()
	var err error
	for r := range results {
		if err != nil {
			continue // drain, so that the workers end
		}
		switch {
		case errors.Is(r.err, os.ErrNotExist):
			// Deleted during the walk: the events after the pin replay it.
		case r.err != nil:
			err = fmt.Errorf("walk %s: %w", r.Path, r.err)
		default:
			err = fn(r.Entry)
		}
		if err != nil {
			cancel()
		}
	}
	if werr := <-walkErr; err == nil && werr != nil && !errors.Is(werr, context.Canceled) {
		err = fmt.Errorf("walk %s: %w", t.Root, werr)
	}
	if err == nil {
		err = ctx.Err()
	}
	return err
}
