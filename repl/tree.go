package repl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"github.com/cespare/xxhash/v2"

	"github.com/cmfs-project/cmfs/journal"
)

// Tree is the current source tree, as a BOOTSTRAP dump lists it.
type Tree interface {
	// Walk calls fn, one call at a time, for every directory and regular
	// file below the root (not the root itself), with its slash-separated
	// path relative to the root; size and xxh64 are those of a file.
	// fn's error stops the walk and is returned.
	Walk(ctx context.Context, fn func(path string, isDir bool, size int64, xxh64 string) error) error
}

// LocalTree walks a directory on this machine and hashes every file.
// It leaves out cmfs's state directory (.cmfs), the names a replica keeps
// at its root (.replstate, .repl-staging), every path with a component
// matching one of the Exclude globs (path.Match syntax, as cmfs mount
// --exclude), and everything that is not a directory or a regular file
// (symlinks, devices: a known limit of BOOTSTRAP).
type LocalTree struct {
	Root    string
	Exclude []string
	// Workers bounds how many files are hashed at once; 0 means GOMAXPROCS.
	Workers int
}

var _ Tree = LocalTree{}

// skipAtRoot are top-level names that are never part of the tree.
var skipAtRoot = map[string]bool{stateDirName: true, stateFile: true, stagingDir: true}

func (t LocalTree) excluded(rel string) bool {
	if !strings.Contains(rel, "/") && skipAtRoot[rel] {
		return true
	}
	for _, c := range strings.Split(rel, "/") {
		for _, g := range t.Exclude {
			if ok, _ := path.Match(g, c); ok {
				return true
			}
		}
	}
	return false
}

type hashed struct {
	rel   string
	size  int64
	sum   string
	isDir bool
	err   error
}

// Walk implements Tree. Files are hashed by a pool of workers; fn is
// called from Walk's goroutine only.
func (t LocalTree) Walk(ctx context.Context, fn func(path string, isDir bool, size int64, xxh64 string) error) error {
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
				size, sum, err := hashFile(filepath.Join(t.Root, filepath.FromSlash(rel)), buf)
				select {
				case results <- hashed{rel: rel, size: size, sum: sum, err: err}:
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
				msg = hashed{rel: rel, isDir: true}
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
			err = fmt.Errorf("walk %s: %w", r.rel, r.err)
		default:
			err = fn(r.rel, r.isDir, r.size, r.sum)
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

// hashFile returns the size and xxh64 of the file at p.
func hashFile(p string, buf []byte) (int64, string, error) {
	f, err := os.Open(p)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	h := xxhash.New()
	n, err := io.CopyBuffer(h, f, buf)
	if err != nil {
		return 0, "", err
	}
	return n, journal.FormatSum(h.Sum64()), nil
}
