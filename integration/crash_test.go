package integration

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/cmfs-project/cmfs/internal/wait"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/journal"
)

const (
	crashWorkers = 8
	crashFiles   = 160 // per worker: 1280 deletes and overwrites a round
)

// crashOriginal is the content a crash round's file starts with: distinct
// per path, so every original has its own cmroot entry.
func crashOriginal(path string) []byte {
	var b bytes.Buffer
	for b.Len() < 1500+len(path)*13 {
		fmt.Fprintf(&b, "%s original\n", path)
	}
	return b.Bytes()
}

func crashNew(path string) []byte { return []byte("new content of " + path + "\n") }

func crashPath(worker, i int) string {
	if i%2 == 0 {
		return fmt.Sprintf("crash.db/t/w=%d/f%03d", worker, i)
	}
	return fmt.Sprintf("plain/w%d/f%03d", worker, i)
}

// crashAck is what the kernel acknowledged for one file.
type crashAck struct {
	deleted   bool // unlink returned 0
	truncated bool // open(O_TRUNC) returned an fd
	written   bool // write and close of the new content returned 0
}

func TestCrash(t *testing.T) {
	requireFUSE(t)
	total := crashWorkers * crashFiles
	// Kill points, as counts of acknowledged operations.
	for round, killAt := range []int{1, total / 5, total / 2, total * 3 / 4, total - 100} {
		t.Run(fmt.Sprintf("kill after %d acks", killAt), func(t *testing.T) {
			crashRound(t, killAt, round%2 == 1)
		})
	}
}

// crashRound runs the concurrent deletes and overwrites against a
// foreground mount, kills it with SIGKILL once killAt operations have been
// acknowledged, recovers (by fsck --repair first when repair is set, then
// a remount) and checks that nothing acknowledged or preserved was lost.
func crashRound(t *testing.T, killAt int, repair bool) {
	backing := filepath.Join(t.TempDir(), "backing")
	for w := range crashWorkers {
		for i := range crashFiles {
			p := crashPath(w, i)
			writeFile(t, filepath.Join(backing, filepath.FromSlash(p)), crashOriginal(p))
		}
	}
	mp := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(mp, 0o755); err != nil {
		t.Fatal(err)
	}
	logFile, err := os.Create(filepath.Join(t.TempDir(), "cmfs.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	live.Store(mp, true)
	cmd := exec.Command(cmfsBin, "mount", backing, mp)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var once sync.Once
	kill := func() {
		once.Do(func() {
			// The child, and any process it left serving the mount.
			cmd.Process.Signal(syscall.SIGKILL)
			for _, pid := range daemonPIDs(mp) {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		})
	}
	t.Cleanup(func() {
		kill()
		<-exited
		forceUnmount(t, mp)
	})
	if !wait.Until(10*time.Second, func() bool {
		if isMounted(mp) {
			return true
		}
		select {
		case err := <-exited:
			exited <- err
			log, _ := os.ReadFile(logFile.Name())
			t.Fatalf("cmfs mount exited before mounting: %v\n%s", err, log)
		default:
		}
		return false
	}) {
		t.Fatalf("cmfs mount %s: not mounted after 10s", mp)
	}

	var (
		acks    [crashWorkers][crashFiles]crashAck
		acked   atomic.Int64
		killed  = make(chan struct{})
		killOne sync.Once
		wg      sync.WaitGroup
		errMu   sync.Mutex
		early   []string // failures before the kill
	)
	ack := func() {
		if acked.Add(1) == int64(killAt) {
			killOne.Do(func() { close(killed) })
		}
	}
	failed := func(format string, args ...any) bool {
		select {
		case <-killed:
			return true // the mount is dead or dying: stop quietly
		default:
		}
		errMu.Lock()
		early = append(early, fmt.Sprintf(format, args...))
		errMu.Unlock()
		return true
	}
	for w := range crashWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range crashFiles {
				p := filepath.Join(mp, filepath.FromSlash(crashPath(w, i)))
				if (i/2+w)%2 == 0 {
					if err := syscall.Unlink(p); err != nil {
						failed("unlink %s: %v", p, err)
						return
					}
					acks[w][i].deleted = true
					ack()
					continue
				}
				fd, err := syscall.Open(p, syscall.O_WRONLY|syscall.O_TRUNC|syscall.O_CLOEXEC, 0)
				if err != nil {
					failed("open O_TRUNC %s: %v", p, err)
					return
				}
				acks[w][i].truncated = true
				ack()
				_, werr := syscall.Write(fd, crashNew(crashPath(w, i)))
				cerr := syscall.Close(fd)
				if err := errors.Join(werr, cerr); err != nil {
					failed("write+close %s: %v", p, err)
					return
				}
				acks[w][i].written = true
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-killed:
	case <-done:
		t.Errorf("all operations finished before %d were acknowledged", killAt)
	}
	kill()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		forceUnmount(t, mp)
		<-done
	}
	if len(early) > 0 {
		t.Errorf("%d operations failed before the kill, first: %s", len(early), early[0])
	}
	<-exited
	exited <- nil
	forceUnmount(t, mp)
	wait.For(t, 10*time.Second, "dead mount to go", func() bool { return !isMounted(mp) })
	t.Logf("killed after %d acknowledged operations; %d in all", killAt, acked.Load())

	state := filepath.Join(backing, ".cmfs")
	if repair {
		if res := cmfs(t, "fsck", "--state", state, "--repair"); res.Code != 0 {
			t.Errorf("cmfs fsck --repair after the crash: %v", res)
		}
	} else if res := cmfs(t, "fsck", "--state", state); res.Code != 0 {
		t.Logf("cmfs fsck (no repair) after the crash: %v", res)
	}
	m := mountAt(t, backing)
	evs := events(t, m.State)
	checkEvents(t, m, evs, false)

	type key struct {
		typ  journal.Type
		path string
	}
	preserved := map[key]journal.File{} // original preserved by an event of that type
	written := map[string]journal.File{}
	for _, ev := range evs {
		for _, f := range ev.Files {
			if f.CM != "" {
				preserved[key{ev.Type, f.Path}] = f
			} else {
				written[f.Path] = f
			}
		}
	}
	// Changes that took effect without an event: operations in flight at
	// the kill. Not acknowledged, so they may or may not have happened;
	// but if one did, recovery (the in-flight table) must have journaled
	// it, or the journal no longer describes the tree.
	var entries, unjournaled []string
	for w := range crashWorkers {
		for i := range crashFiles {
			p := crashPath(w, i)
			orig := crashOriginal(p)
			a := acks[w][i]
			name := fmt.Sprintf("%s-%d", journal.Sum(orig), len(orig))
			switch {
			case a.deleted:
				if f, ok := preserved[key{journal.Delete, p}]; !ok || f.CM != name {
					t.Errorf("acknowledged unlink of %s: no DELETE event preserving %s (got %+v)", p, name, f)
				}
				if _, err := os.Lstat(m.path(p)); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("acknowledged unlink of %s: the file is back after recovery (%v)", p, err)
				}
			case a.truncated:
				if f, ok := preserved[key{journal.Truncate, p}]; !ok || f.CM != name {
					t.Errorf("acknowledged O_TRUNC open of %s: no TRUNCATE event preserving %s (got %+v)", p, name, f)
				}
			}
			if a.written {
				want := crashNew(p)
				if f, ok := written[p]; !ok || f.XXH64 != journal.Sum(want) || f.Size != int64(len(want)) {
					t.Errorf("acknowledged close of %s: no event with its new content (got %+v)", p, f)
				}
				if got, err := os.ReadFile(m.path(p)); err != nil || !bytes.Equal(got, want) {
					t.Errorf("acknowledged close of %s: it holds %q (%v), want %q", p, got, err, want)
				}
			}
			// No original lost: still at its path, or in cmroot.
			if got, err := os.ReadFile(m.path(p)); err == nil && bytes.Equal(got, orig) {
				continue
			}
			_, del := preserved[key{journal.Delete, p}]
			_, trunc := preserved[key{journal.Truncate, p}]
			if !del && !trunc {
				unjournaled = append(unjournaled, p)
			}
			e, err := cmEntry(m.CMRoot, name)
			if err != nil {
				t.Errorf("original of %s lost: not at its path and %v", p, err)
				continue
			}
			entries = append(entries, e)
		}
	}
	sums := xxhsums(t, entries...)
	for e, sum := range sums {
		if want, _, _ := bytes.Cut([]byte(filepath.Base(e)), []byte("-")); sum != string(want) {
			t.Errorf("cmroot entry %s: xxhsum -H64 %s", e, sum)
		}
	}
	t.Logf("%d events after recovery; %d originals found only in cmroot", len(evs), len(entries))
	if len(unjournaled) > 0 {
		t.Errorf("%d changes took effect without an event after recovery (their originals are in cmroot): %v", len(unjournaled), unjournaled)
	}
}
