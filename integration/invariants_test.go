package integration

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/cmfs-project/cmfs/journal"
)

// replayJournal is journal.Replay as readTree lists a tree.
func replayJournal(evs []journal.Event) tree {
	tr := tree{}
	for p, w := range journal.Replay(evs) {
		if w.Symlink {
			tr[p] = "symlink -> " + w.Target
		} else {
			tr[p] = fmt.Sprintf("file %d %s", w.Size, w.XXH64)
		}
	}
	return tr
}

// journaledTree reads the files and symlinks below backing that the
// journal should describe: without the state directory and the paths cmfs
// does not protect (excluded).
func journaledTree(t testing.TB, backing, state string) tree {
	t.Helper()
	var skip []string
	if rel, err := filepath.Rel(backing, state); err == nil && !strings.HasPrefix(rel, "..") {
		skip = append(skip, filepath.ToSlash(rel))
	}
	tr := readTree(t, backing, skip...)
	for p, v := range tr {
		if v == "dir" || excluded(p) {
			delete(tr, p)
		}
	}
	return tr
}

// journalTreeViolations replays the journal of state against the tree in
// backing (I3: the journal never lies about the tree) and describes every
// path where they differ, sorted. The backing directory must have been
// empty at the journal's first event: a file no event names is a change
// the journal missed.
func journalTreeViolations(t testing.TB, backing, state string) []string {
	t.Helper()
	want := replayJournal(events(t, state))
	got := journaledTree(t, backing, state)
	var out []string
	for p, w := range want {
		g, ok := got[p]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("%s: the journal says %s, the tree has nothing", p, w))
		case g != w:
			out = append(out, fmt.Sprintf("%s: the journal says %s, the tree holds %s", p, w, g))
		}
	}
	for p, g := range got {
		if _, ok := want[p]; !ok {
			out = append(out, fmt.Sprintf("%s: the tree holds %s, no event names it", p, g))
		}
	}
	sort.Strings(out)
	return out
}

// checkJournalMatchesTree fails t, listing the paths, unless the latest
// event naming each path describes what backing holds there (I3).
func checkJournalMatchesTree(t testing.TB, backing, state string) {
	t.Helper()
	if v := journalTreeViolations(t, backing, state); len(v) > 0 {
		t.Errorf("I3 the journal does not describe the tree at %d paths:\n  %s", len(v), strings.Join(v, "\n  "))
	}
}
