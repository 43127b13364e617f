package integration

import (
	"bytes"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"
)

// TestOverwritesRaceReleases: shell overwrites (O_TRUNC, which puts a new
// inode in place of the file's and keeps the old one in cmroot) of some
// files, while other handles of the same files are opened and released
// around them, and overwrites of other files run at the same time. A
// replacement may happen only once every release of the file has let go
// of its passthrough backing file: a new handle that inherited the old
// one would write into the original cmroot keeps, and the path would not
// hold what was written last. The Gate that orders them is let go of as
// soon as the file's use is read, so replacements of different files run
// side by side.
//
// Each file has one writer, so its content at the end is the writer's
// last; the cleanup's fsck checks every cmroot entry against its name and
// the journal against the tree.
func TestOverwritesRaceReleases(t *testing.T) {
	m := mount(t)
	const files = 4
	content := func(f, gen int) []byte {
		return bytes.Repeat([]byte(fmt.Sprintf("file %d generation %d\n", f, gen)), 100)
	}
	for f := range files {
		writeFile(t, m.path(fmt.Sprintf("f%d", f)), content(f, 0))
	}
	deadline := time.Now().Add(3 * time.Second)
	last := make([]int, files)
	var wg sync.WaitGroup
	errs := make(chan error, 4*files)
	for f := range files {
		p := m.path(fmt.Sprintf("f%d", f))
		wg.Add(2)
		go func() { // the writer: `>` again and again
			defer wg.Done()
			for gen := 1; time.Now().Before(deadline); gen++ {
				if err := os.WriteFile(p, content(f, gen), 0o644); err != nil {
					errs <- err
					return
				}
				last[f] = gen
			}
		}()
		go func() { // handles opened and released around the writer's
			defer wg.Done()
			buf := make([]byte, 64)
			for time.Now().Before(deadline) {
				fh, err := os.Open(p)
				if err != nil {
					errs <- err
					return
				}
				fh.Read(buf) // an empty read: the writer just truncated it
				if err := fh.Close(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	total := 0
	for f := range files {
		total += last[f]
		if got, want := readFile(t, m.path(fmt.Sprintf("f%d", f))), content(f, last[f]); !bytes.Equal(got, want) {
			t.Errorf("f%d holds %d bytes (%.40q…), want generation %d, its writer's last", f, len(got), got, last[f])
		}
	}
	t.Logf("%d overwrites of %d files", total, files)
	if total < files {
		t.Fatalf("only %d overwrites in all", total)
	}
}
