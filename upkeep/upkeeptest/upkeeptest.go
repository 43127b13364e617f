// Package upkeeptest gives tests a journal and a cmroot store in one
// state directory, checked when the test ends, with helpers to fill them.
package upkeeptest

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/cmfs-project/cmfs/cmroot"
	"github.com/cmfs-project/cmfs/journal"
)

// Env is a journal and a store in the state directory Dir.
type Env struct {
	Dir   string
	J     *journal.Log
	Store *cmroot.Store
}

// New opens an Env in a fresh directory. Cleanup verifies the journal and
// closes both; close anything that serves them in a cleanup registered
// after New, so that it runs first.
func New(t *testing.T) *Env {
	t.Helper()
	dir := t.TempDir()
	j, err := journal.Open(filepath.Join(dir, "journal.db"), journal.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	store, err := cmroot.Open(filepath.Join(dir, "cmroot"), cmroot.Options{NoSync: true})
	if err != nil {
		j.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := j.Verify(); err != nil {
			t.Errorf("journal Verify: %v", err)
		}
		store.Close()
		j.Close()
	})
	return &Env{Dir: dir, J: j, Store: store}
}

// Preserve stores content in cmroot and returns a file naming its entry.
func (e *Env) Preserve(t *testing.T, content string) journal.File {
	t.Helper()
	p := filepath.Join(e.Dir, "victim")
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	sum := journal.Sum([]byte(content))
	name, _, err := e.Store.Preserve(p, sum, int64(len(content)), true)
	if err != nil {
		t.Fatal(err)
	}
	return journal.File{Path: "sales.db/orders/part-0", Size: int64(len(content)), XXH64: sum, CM: name}
}

// Append stamps and journals evs.
func (e *Env) Append(t *testing.T, evs ...*journal.Event) {
	t.Helper()
	for _, ev := range evs {
		ev.Stamp()
		if ev.Files == nil {
			ev.Files = []journal.File{}
		}
	}
	if err := e.J.Append(context.Background(), evs...); err != nil {
		t.Fatal(err)
	}
}
