package repl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/cmfs-project/cmfs/journal"
)

// Origin is one place a Fallback fetches from, named in its messages
// ("the source", "the cluster").
type Origin struct {
	Name    string
	Fetcher Fetcher
}

// Fallback is a Fetcher that asks its origins in turn and returns the
// first reader one gives: a load that fetches from the source and, where
// the source has no copy or cannot be reached, from the cluster's blocks
// (`replicad load --source … --cluster …`).
//
// An origin's ErrUnsafePath and the context's error end the search: the
// path is refused wherever the bytes are (the loader then asks for the
// content by checksum alone), and a cancelled load asks no one else. Any
// other error goes on to the next origin. A reader is not replaced once
// returned: bytes that turn out stale or corrupt are the loader's to ask
// for again (with f.CM set), and the next Fetch starts at the first
// origin again.
//
// When every origin fails the error names each one's answer, on one line,
// and wraps ErrNoCopy only if every origin said it has no copy — an origin
// that could not be asked may still hold the content, so a load that
// tolerates ErrNoCopy (a BOOTSTRAP's racing window) must not skip it.
type Fallback []Origin

var _ Fetcher = Fallback(nil)

// Fetch implements Fetcher.
func (fb Fallback) Fetch(ctx context.Context, f journal.File) (io.ReadCloser, error) {
	if len(fb) == 0 {
		return nil, fmt.Errorf("fetch %s: no origin to fetch from: %w", f.Path, ErrNoCopy)
	}
	errs := make([]error, 0, len(fb))
	for _, o := range fb {
		rc, err := o.Fetcher.Fetch(ctx, f)
		if err == nil {
			return rc, nil
		}
		if errors.Is(err, ErrUnsafePath) || ctx.Err() != nil {
			return nil, err
		}
		errs = append(errs, err)
	}
	return nil, &fallbackError{file: f, origins: fb, errs: errs}
}

// fallbackError is a Fallback's failure: what each origin answered.
type fallbackError struct {
	file    journal.File
	origins Fallback
	errs    []error
}

func (e *fallbackError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "fetch %s (%d bytes, xxh64 %s): ", e.file.Path, e.file.Size, e.file.XXH64)
	if len(e.origins) == 1 {
		fmt.Fprintf(&b, "%s did not have it (", e.origins[0].Name)
	} else {
		b.WriteString("neither ")
		for i, o := range e.origins {
			if i > 0 {
				b.WriteString(" nor ")
			}
			b.WriteString(o.Name)
		}
		b.WriteString(" had it (")
	}
	for i, err := range e.errs {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s: %v", e.origins[i].Name, err)
	}
	b.WriteString(")")
	return b.String()
}

// Unwrap returns every origin's error when each said it has no copy
// (each wraps ErrNoCopy), else the other failures alone, so that
// errors.Is(err, ErrNoCopy) is false.
func (e *fallbackError) Unwrap() []error {
	var others []error
	for _, err := range e.errs {
		if !errors.Is(err, ErrNoCopy) {
			others = append(others, err)
		}
	}
	if len(others) == 0 {
		return e.errs
	}
	return others
}
