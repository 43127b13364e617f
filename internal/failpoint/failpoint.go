// Package failpoint names the points between the steps of an operation
// where a test may stop the process, as etcd's gofail does, without a
// build step: code calls Hit("unlink/preserved") between two steps, which
// costs one atomic load when nothing is armed.
//
// A test arms points in one of two ways:
//
//   - in-process, with Set: its function runs at every Hit (a unit test
//     panics from it to model the process dying there);
//   - in a child process, with the environment variable CMFS_FAILPOINT
//     ("name" or "name:n", several separated by commas): the process
//     kills itself with SIGKILL at the n-th hit of name (default the
//     first). Programs call FromEnv once at start.
//
// Names are "<operation>/<step>"; every name used is listed in Names, so a
// test can try them all and a misspelt one is refused.
package failpoint

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
)

// EnvVar arms failpoints in a child process.
const EnvVar = "CMFS_FAILPOINT"

var (
	mu    sync.Mutex
	names []string
	hook  atomic.Pointer[func(string)]
)

// Register adds names to the known failpoints and returns the first, so a
// package can declare its points as variables.
func Register(name string) string {
	mu.Lock()
	defer mu.Unlock()
	if !slices.Contains(names, name) {
		names = append(names, name)
	}
	return name
}

// Names returns every registered failpoint, sorted.
func Names() []string {
	mu.Lock()
	defer mu.Unlock()
	out := slices.Clone(names)
	slices.Sort(out)
	return out
}

// Armed says whether anything is armed: callers that build a name test it
// first, so an unarmed process pays one atomic load.
func Armed() bool { return hook.Load() != nil }

// Hit marks that the code reached the failpoint name.
func Hit(name string) {
	if f := hook.Load(); f != nil {
		(*f)(name)
	}
}

// Set runs fn at every Hit until the returned function is called.
func Set(fn func(name string)) (reset func()) {
	hook.Store(&fn)
	return func() { hook.Store(nil) }
}

// FromEnv arms the failpoints EnvVar names: the process kills itself at
// the chosen hit. It refuses a name no package registered.
func FromEnv() error {
	spec := os.Getenv(EnvVar)
	if spec == "" {
		return nil
	}
	counts := map[string]*atomic.Int64{}
	for _, item := range strings.Split(spec, ",") {
		name, n, _ := strings.Cut(strings.TrimSpace(item), ":")
		at := int64(1)
		if n != "" {
			v, err := strconv.ParseInt(n, 10, 64)
			if err != nil || v < 1 {
				return fmt.Errorf("%s: bad count in %q", EnvVar, item)
			}
			at = v
		}
		if !slices.Contains(Names(), name) {
			return fmt.Errorf("%s: no failpoint %q", EnvVar, name)
		}
		c := &atomic.Int64{}
		c.Store(at)
		counts[name] = c
	}
	Set(func(name string) {
		if c, ok := counts[name]; ok && c.Add(-1) == 0 {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // SIGKILL cannot be caught: nothing runs past here
		}
	})
	return nil
}
