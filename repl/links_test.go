package repl

import (
	"os"
	"testing"

	"github.com/cmfs-project/cmfs/journal"
)

// TestLoadLinkedNames applies what cmfs journals for a write through one
// of a file's hard links: one event listing the new content under every
// name (and the original under every name). Every name at the target
// gets the content, which is fetched from the source once.
func TestLoadLinkedNames(t *testing.T) {
	s := newSource(t)
	s.mkdir("d.db")
	s.mkdir("d.db/t")
	s.mkdir("d.db/t/p=1")
	s.write("d.db/t/p=1/a", "original")
	for _, name := range []string{"d.db/t/p=1/b", "d.db/t/p=1/c"} {
		if err := os.Link(s.abs("d.db/t/p=1/a"), s.abs(name)); err != nil {
			t.Fatal(err)
		}
		b := []byte("original")
		e := &journal.Event{Type: journal.Link, Path: "d.db/t/p=1/a", NewPath: name,
			Files: []journal.File{{Path: name, Size: int64(len(b)), XXH64: journal.Sum(b)}}}
		s.emit(e)
	}
	linked := uint64(len(s.ev.events))
	orig := s.preserve("d.db/t/p=1/a")
	f, err := os.OpenFile(s.abs("d.db/t/p=1/a"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(" and more"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	b := []byte("original and more")
	e := &journal.Event{Type: journal.Insert, Path: "d.db/t/p=1/a"}
	for _, name := range []string{"d.db/t/p=1/a", "d.db/t/p=1/b", "d.db/t/p=1/c"} {
		e.Files = append(e.Files, journal.File{Path: name, Size: int64(len(b)), XXH64: journal.Sum(b)})
	}
	for _, name := range []string{"d.db/t/p=1/a", "d.db/t/p=1/b", "d.db/t/p=1/c"} {
		o := orig
		o.Path = name
		e.Files = append(e.Files, o)
	}
	s.emit(e)
	last := uint64(len(s.ev.events))

	t.Run("incremental on the linked state", func(t *testing.T) {
		target := t.TempDir()
		mustLoad(t, mustDump(t, s, 1, linked), target, s.fetcher())
		checkTarget(t, s, target, linked)
		fe := s.fetcher()
		mustLoad(t, mustDump(t, s, linked+1, last), target, fe)
		checkTarget(t, s, target, last)
		if st := fe.Stats(); st.Files != 1 || st.Bytes != int64(len(b)) {
			t.Errorf("fetched %d files, %d bytes; want the content once: 1 file, %d bytes", st.Files, st.Bytes, len(b))
		}
	})
	t.Run("incremental from 1", func(t *testing.T) {
		target := t.TempDir()
		mustLoad(t, mustDump(t, s, 1, last), target, s.fetcher())
		checkTarget(t, s, target, last)
	})
	t.Run("catalog", func(t *testing.T) {
		cat, err := OpenCatalog(t.TempDir() + "/catalog.db")
		if err != nil {
			t.Fatal(err)
		}
		defer cat.Close()
		// Built from an empty tree before the first event, so that every
		// event applies to it.
		ev := &sliceEvents{events: s.ev.events[:0]}
		empty := t.TempDir()
		if _, err := cat.Update(t.Context(), ev, LocalTree{Root: empty}); err != nil {
			t.Fatal(err)
		}
		if _, err := cat.Update(t.Context(), &s.ev, nil); err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		err = cat.Walk(t.Context(), func(e Entry) error {
			if e.Kind == EntryFile {
				got[e.Path] = e.XXH64
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"d.db/t/p=1/a", "d.db/t/p=1/b", "d.db/t/p=1/c"} {
			if got[name] != journal.Sum(b) {
				t.Errorf("catalog: %s has xxh64 %q, want %s", name, got[name], journal.Sum(b))
			}
		}
	})
}
