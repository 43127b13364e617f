package protect

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/journal"
)

// lostPower changes the backing tree of a closed harness behind the
// journal's back, as changes whose events and intents a power loss took
// back leave it, and returns what reconciliation must find.
func lostPower(t *testing.T, h *harness) Recovery {
	t.Helper()
	b := func(rel string) string { return filepath.Join(h.backing, rel) }
	// An O_TRUNC in flight: the original linked into cmroot, a new
	// inode (another size) swapped into its place.
	if _, _, err := h.store.Preserve(b("d.db/t/p=1/trunc"), journal.Sum([]byte("trunc original\n")), 15, false); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(b("d.db/t/p=1/trunc")); err != nil {
		t.Fatal(err)
	}
	writeNew(t, b("d.db/t/p=1/trunc"), "x\n")
	// An in-place write of the same size, the original copied first.
	f, err := os.Open(b("notes/same-size"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.store.PreserveCopy(f); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.WriteFile(b("notes/same-size"), []byte("SAME SIZE\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A file created and written.
	writeNew(t, b("d.db/t/p=1/new"), "brand new\n")
	// An unlink: the file moved into cmroot.
	if _, _, err := h.store.Preserve(b("d.db/t/p=1/unlinked"), journal.Sum([]byte("unlinked\n")), 9, true); err != nil {
		t.Fatal(err)
	}
	// A file gone and its content nowhere.
	if err := os.Remove(b("notes/vanished")); err != nil {
		t.Fatal(err)
	}
	// A rename: gone at its old name, its content at the new one.
	if err := os.Rename(b("d.db/t/p=1/from"), b("d.db/t/p=1/to")); err != nil {
		t.Fatal(err)
	}
	// A symlink pointed elsewhere, and one made.
	os.Remove(b("notes/link"))
	if err := os.Symlink("elsewhere", b("notes/link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("same-size", b("notes/newlink")); err != nil {
		t.Fatal(err)
	}
	// A name no event can carry, made behind the mount's back.
	writeNew(t, b("notes/bad-\xff-name"), "not UTF-8\n")
	// Scratch space and the state directory are no part of the tree.
	writeNew(t, b("d.db/t/_temporary/0/part-0"), "scratch\n")
	writeNew(t, b(".cmfs/somefile"), "state\n")
	return Recovery{
		Reconciled: true,
		Changed:    3, // trunc, same-size, link
		Added:      3, // new, to, newlink
		Removed:    3, // unlinked, vanished, from
		Lost:       1, // vanished
	}
}

func writeNew(t *testing.T, p, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// reconcileSetup makes, through the core, the tree lostPower changes.
func reconcileSetup(t *testing.T, backing string) *harness {
	t.Helper()
	h := openHarness(t, backing)
	for _, f := range []struct{ rel, data string }{
		{"d.db/t/p=1/trunc", "trunc original\n"},
		{"notes/same-size", "same size\n"},
		{"d.db/t/p=1/unlinked", "unlinked\n"},
		{"notes/vanished", "vanished\n"},
		{"d.db/t/p=1/from", "renamed\n"},
		{"d.db/t/p=1/kept", "untouched\n"},
	} {
		mkdirs(t, h, filepath.Dir(f.rel))
		if err := h.write(f.rel, os.O_WRONLY|os.O_CREATE, f.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.core.Symlink(ctx, "same-size", "notes/link", Caller{}); err != nil {
		t.Fatal(err)
	}
	return h
}

// counts is the part of a Recovery reconciliation decides.
func counts(r Recovery) Recovery {
	return Recovery{Reconciled: r.Reconciled, Changed: r.Changed, Added: r.Added, Removed: r.Removed, Lost: r.Lost}
}

func TestReconcile(t *testing.T) {
	backing := filepath.Join(t.TempDir(), "backing")
	h := reconcileSetup(t, backing)
	h.close(t)
	// Reopened without a reconciliation, then after the power loss.
	h = openHarness(t, backing)
	want := lostPower(t, h)
	h.close(t)
	h = openHarnessWith(t, backing, func(o *Options) { o.Reconcile = true })
	got := h.recovered
	evs := h.events(t)
	if counts(got) != want {
		t.Errorf("recovery %+v, want %+v", got, want)
	}
	// trunc, same-size, new, to, kept, link, newlink; the files are
	// hashed (their ctimes are all recent), the symlinks read.
	if got.Walked != 7 || got.Hashed != 5 {
		t.Errorf("walked %d, hashed %d; want 7 walked (the state directory and scratch space left out), 5 hashed", got.Walked, got.Hashed)
	}
	if f := got.Findings(h.state); !strings.Contains(f, "journaled 3 changed, 3 new and 3 removed path(s)") || !strings.Contains(f, "content lost: 1 file(s)") {
		t.Errorf("findings %q", f)
	}
	// The name no event can carry was left out; I3 is about the others.
	os.Remove(filepath.Join(backing, "notes/bad-\xff-name"))
	bad := append(treeViolations(t, h, evs), lostOriginals(h, evs)...)
	for _, v := range bad {
		t.Error(v)
	}
	// The events name the originals cmroot holds.
	named := map[string]string{}
	for _, e := range evs {
		for _, f := range e.Files {
			if f.CM != "" {
				named[string(e.Type)+" "+e.Path] = f.CM
			}
		}
	}
	for _, k := range []string{"INSERT d.db/t/p=1/trunc", "WRITE notes/same-size", "DELETE d.db/t/p=1/unlinked"} {
		if named[k] == "" {
			t.Errorf("no reconciled %s naming its original in cmroot (originals named: %v)", k, named)
		}
	}
	for _, e := range evs {
		if e.Type == journal.Delete && e.Path == "notes/vanished" && len(e.Files) != 0 {
			t.Errorf("DELETE of vanished content names %v", e.Files)
		}
	}
	h.close(t)

	// Once the journal describes the tree, a second reconciliation
	// finds nothing.
	h = openHarnessWith(t, backing, func(o *Options) { o.Reconcile = true })
	if c := counts(h.recovered); c != (Recovery{Reconciled: true}) {
		t.Errorf("second reconciliation %+v, want nothing found", c)
	}
	if f := h.recovered.Findings(h.state); f != "" {
		t.Errorf("second reconciliation's findings %q", f)
	}
	h.close(t)
}

// TestReconcileOnlyWhenAsked: a plain Open walks nothing.
func TestReconcileOnlyWhenAsked(t *testing.T) {
	backing := filepath.Join(t.TempDir(), "backing")
	h := reconcileSetup(t, backing)
	lostPower(t, h)
	h.close(t)
	h = openHarness(t, backing)
	defer h.close(t)
	if h.recovered != (Recovery{}) {
		t.Errorf("Open without Reconcile: %+v", h.recovered)
	}
}

// TestReconcileAfterTailDropped: a tail check that dropped events
// reconciles, whatever Options.Reconcile says.
func TestReconcileAfterTailDropped(t *testing.T) {
	backing := filepath.Join(t.TempDir(), "backing")
	h := reconcileSetup(t, backing)
	want := lostPower(t, h)
	h.close(t)
	tail := &TailReport{Events: 3, Kept: 1, Why: "b: gone"}
	h = openHarnessWith(t, backing, func(o *Options) { o.Tail = tail })
	defer h.close(t)
	want.TailDropped, want.TailWhy = 2, "b: gone"
	got := counts(h.recovered)
	got.TailDropped, got.TailWhy = h.recovered.TailDropped, h.recovered.TailWhy
	if got != want {
		t.Errorf("recovery %+v, want %+v", got, want)
	}
	if f := h.recovered.Findings(h.state); !strings.Contains(f, "dropped the last 2 event(s)") {
		t.Errorf("findings %q", f)
	}
}

// TestReconcileStatsOldFiles: files whose ctime is older than the newest
// surviving event less the margin, at their last word's size, are
// stat'ed, not hashed; a file no event names that old predates the
// journal and is left alone.
func TestReconcileStatsOldFiles(t *testing.T) {
	backing := filepath.Join(t.TempDir(), "backing")
	h := reconcileSetup(t, backing)
	h.close(t)
	writeNew(t, filepath.Join(backing, "preexisting"), "from before\n")
	// Same size, other bytes, changed long "before" the newest event:
	// taken to hold its last word.
	if err := os.WriteFile(filepath.Join(backing, "notes/same-size"), []byte("SAME SIZE\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h = openHarnessWith(t, backing, func(o *Options) {
		o.Reconcile = true
		o.Since = time.Now().Add(time.Hour) // every ctime is older
		o.ReconcileMargin = time.Second
	})
	defer h.close(t)
	if c := counts(h.recovered); c != (Recovery{Reconciled: true}) || h.recovered.Hashed != 0 {
		t.Errorf("recovery %+v, want nothing hashed or journaled", h.recovered)
	}
}

// TestReconcileAfterRecoveryInterval: under --sync=interval the events
// recovery journals for the in-flight table are written, not yet
// flushed, so the journal does not show them; reconciliation must fold
// them in rather than journal the same change again.
func TestReconcileAfterRecoveryInterval(t *testing.T) {
	backing := filepath.Join(t.TempDir(), "backing")
	h := openHarness(t, backing)
	mkdirs(t, h, "d.db/t/p=1")
	if err := h.write("d.db/t/p=1/f", os.O_WRONLY|os.O_CREATE, "f\n"); err != nil {
		t.Fatal(err)
	}
	h.crashAt(t, failpointName(journal.Delete, stepApplied), func() { h.core.Unlink(ctx, "d.db/t/p=1/f", Use{}) })

	h = openHarnessJournal(t, backing, journal.Options{NoSync: true, Sync: journal.SyncInterval, Interval: time.Hour},
		func(o *Options) { o.Reconcile = true })
	defer h.close(t)
	got := h.recovered
	if got.Journaled != 1 || counts(got) != (Recovery{Reconciled: true}) {
		t.Errorf("recovery %+v: want the unlink journaled by the in-flight table's recovery, nothing more by reconciliation", got)
	}
}
