package repl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/cmfs-project/cmfs/journal"
)

// fakeFetcher answers every Fetch with data or err and counts the calls.
type fakeFetcher struct {
	data  string
	err   error
	calls int
}

func (f *fakeFetcher) Fetch(ctx context.Context, _ journal.File) (io.ReadCloser, error) {
	f.calls++
	if f.err != nil {
		return nil, f.err
	}
	return io.NopCloser(strings.NewReader(f.data)), nil
}

func TestFallback(t *testing.T) {
	file := journal.File{Path: "s.db/t/part-0", Size: 4, XXH64: journal.Sum([]byte("data"))}
	noCopy := fmt.Errorf("fetch s.db/t/part-0: %w", ErrNoCopy)
	down := errors.New("cannot reach 127.0.0.1:1: connection refused")
	unsafe := fmt.Errorf("s.db/t/part-0 leads outside: %w", ErrUnsafePath)
	tests := []struct {
		name        string
		first, then *fakeFetcher
		want        string // the bytes read, or "" for an error
		thenCalls   int
		isNoCopy    bool
		isOther     error
		msgHas      []string
	}{
		{name: "the first has it", first: &fakeFetcher{data: "data"}, then: &fakeFetcher{data: "other"}, want: "data"},
		{name: "no copy at the first", first: &fakeFetcher{err: noCopy}, then: &fakeFetcher{data: "data"}, want: "data", thenCalls: 1},
		{name: "the first is down", first: &fakeFetcher{err: down}, then: &fakeFetcher{data: "data"}, want: "data", thenCalls: 1},
		{name: "an unsafe path ends the search", first: &fakeFetcher{err: unsafe}, then: &fakeFetcher{data: "data"}, isOther: ErrUnsafePath},
		{name: "neither has a copy", first: &fakeFetcher{err: noCopy}, then: &fakeFetcher{err: noCopy}, thenCalls: 1, isNoCopy: true,
			msgHas: []string{"s.db/t/part-0", "neither the source nor the cluster had it", "the source: ", "the cluster: "}},
		{name: "one could not be asked", first: &fakeFetcher{err: down}, then: &fakeFetcher{err: noCopy}, thenCalls: 1, isOther: down,
			msgHas: []string{"neither the source nor the cluster had it", "connection refused"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fb := Fallback{{Name: "the source", Fetcher: tt.first}, {Name: "the cluster", Fetcher: tt.then}}
			rc, err := fb.Fetch(context.Background(), file)
			if tt.then.calls != tt.thenCalls {
				t.Errorf("the second origin was asked %d times, want %d", tt.then.calls, tt.thenCalls)
			}
			if tt.want != "" {
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(rc)
				rc.Close()
				if string(b) != tt.want {
					t.Errorf("read %q, want %q", b, tt.want)
				}
				return
			}
			if err == nil {
				rc.Close()
				t.Fatal("got a reader, want an error")
			}
			if got := errors.Is(err, ErrNoCopy); got != tt.isNoCopy {
				t.Errorf("errors.Is(%v, ErrNoCopy) = %v, want %v", err, got, tt.isNoCopy)
			}
			if tt.isOther != nil && !errors.Is(err, tt.isOther) {
				t.Errorf("%v does not wrap %v", err, tt.isOther)
			}
			for _, s := range tt.msgHas {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("%q does not say %q", err, s)
				}
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("%q is more than one line", err)
			}
		})
	}
}

func TestFallbackCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	then := &fakeFetcher{data: "data"}
	fb := Fallback{{Name: "the source", Fetcher: &fakeFetcher{err: context.Canceled}}, {Name: "the cluster", Fetcher: then}}
	if _, err := fb.Fetch(ctx, journal.File{Path: "f", Size: 4, XXH64: journal.Sum([]byte("data"))}); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	if then.calls != 0 {
		t.Errorf("a cancelled fetch asked the next origin %d times", then.calls)
	}
}
