package integration

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// killLoopRounds is how many times TestKillShellWriters kills the mount.
const killLoopRounds = 8

// shellWriters are the shell loops TestKillShellWriters runs against the
// mount, as an operator's scripts would: overwrite with >, append, a
// truncate, write-temp-then-mv -f, rm and recreate. $D is a partition
// directory of the mount; each loop runs until the mount dies under it.
var shellWriters = []string{
	`i=0; while :; do i=$((i+1)); echo "r-$i" > "$D/part-0" || exit 0; done`,
	`i=0; while :; do i=$((i+1)); echo "a-$i" >> "$D/part-1" || exit 0; [ $((i % 50)) -eq 0 ] && { truncate -s 3 "$D/part-1" || exit 0; }; done`,
	`i=0; while :; do i=$((i+1)); echo "n-$i" > "$D/.tmp-$i" && mv -f "$D/.tmp-$i" "$D/part-3" || exit 0; done`,
	`i=0; while :; do i=$((i+1)); echo "c-$i" > "$D/part-4" && rm "$D/part-4" || exit 0; echo "d-$i" > "$D/part-4" || exit 0; done`,
}

// TestKillShellWriters kills the mount with SIGKILL while shell loops
// overwrite, append, truncate, rename over and delete files, remounts
// (half the rounds after `cmfs fsck --repair`), and checks after every
// round that the journal's last word on every path is what the tree holds
// and that every original an event names is in cmroot.
func TestKillShellWriters(t *testing.T) {
	requireFUSE(t)
	backing := filepath.Join(t.TempDir(), "backing")
	dir := "k.db/t/p=1"
	if err := os.Mkdir(backing, 0o755); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(backing, ".cmfs")
	rng := rand.New(rand.NewPCG(8, 8))
	for round := range killLoopRounds {
		mp := filepath.Join(t.TempDir(), "mnt")
		if err := os.Mkdir(mp, 0o755); err != nil {
			t.Fatal(err)
		}
		mount := startForeground(t, backing, mp)
		if err := os.MkdirAll(filepath.Join(mp, dir), 0o755); err != nil {
			t.Fatal(err)
		}
		var shells []*exec.Cmd
		for _, script := range shellWriters {
			sh := exec.Command("sh", "-c", script)
			sh.Env = append(os.Environ(), "D="+filepath.Join(mp, dir))
			if err := sh.Start(); err != nil {
				t.Fatal(err)
			}
			shells = append(shells, sh)
		}
		time.Sleep(time.Duration(150+rng.IntN(600)) * time.Millisecond) // the kill lands anywhere
		mount.kill()
		for _, sh := range shells {
			sh.Wait()
		}
		mount.wait(t)
		if round%2 == 1 {
			if res := cmfs(t, "fsck", "--repair", backing); res.Code != 0 {
				t.Fatalf("round %d: cmfs fsck --repair: %v", round, res)
			}
		}
		// Remounting runs recovery; the next round writes through it.
		m := mountAt(t, backing)
		m.unmount(t)
		if res := checkJournalMatchesTree(t, backing, state); res != "" {
			t.Fatalf("round %d: the journal lies about the tree:\n%s", round, res)
		}
	}
	if n := len(events(t, state)); n < 100 {
		t.Errorf("only %d events after %d rounds: the writers hardly ran", n, killLoopRounds)
	}
}

// foreground is a `cmfs mount` running in the foreground, to be killed.
type foreground struct {
	mp     string
	cmd    *exec.Cmd
	exited chan error
	log    string
}

// startForeground mounts backing at mp with a foreground `cmfs mount` and
// waits until the mount is there.
func startForeground(t *testing.T, backing, mp string) *foreground {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "cmfs.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	live.Store(mp, true)
	f := &foreground{mp: mp, cmd: exec.Command(cmfsBin, "mount", backing, mp), exited: make(chan error, 1), log: logPath}
	f.cmd.Stdout, f.cmd.Stderr = logFile, logFile
	if err := f.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { f.exited <- f.cmd.Wait() }()
	t.Cleanup(func() {
		f.kill()
		f.wait(t)
	})
	if !poll(10*time.Second, func() bool {
		select {
		case err := <-f.exited:
			f.exited <- err
			return true
		default:
		}
		return isMounted(mp)
	}) || !isMounted(mp) {
		log, _ := os.ReadFile(logPath)
		t.Fatalf("cmfs mount %s did not come up:\n%s", mp, log)
	}
	return f
}

// kill sends SIGKILL to the mount process.
func (f *foreground) kill() { f.cmd.Process.Signal(syscall.SIGKILL) }

// wait waits for the process to end and the dead mount to be gone.
func (f *foreground) wait(t *testing.T) {
	t.Helper()
	err := <-f.exited
	f.exited <- err
	forceUnmount(t, f.mp)
	waitFor(t, 10*time.Second, "dead mount to go", func() bool { return !isMounted(f.mp) })
	live.Delete(f.mp)
}

// lastWord is what the journal says a path holds.
type lastWord struct {
	kind      string // "file", "dir", "symlink"
	size      int64
	xxh64     string
	eventID   uint64
	eventType string
}

// journalTree replays events into the tree they describe: every path the
// journal last left in existence, with the content its latest event gave
// it. Directory renames move everything below; RMDIR and the DROP types
// remove the directory.
func journalTree(t testing.TB, state string) map[string]lastWord {
	t.Helper()
	tree := map[string]lastWord{}
	move := func(from, to string) {
		for p, w := range tree {
			if p == from || strings.HasPrefix(p, from+"/") {
				delete(tree, p)
				tree[to+strings.TrimPrefix(p, from)] = w
			}
		}
	}
	for _, e := range events(t, state) {
		at := func(kind string) lastWord { return lastWord{kind: kind, eventID: e.ID, eventType: string(e.Type)} }
		switch e.Type {
		case "MKDIR", "CREATE_DATABASE", "CREATE_TABLE", "ADD_PARTITION":
			tree[e.Path] = at("dir")
		case "RMDIR", "DROP_DATABASE", "DROP_TABLE", "DROP_PARTITION":
			for p := range tree {
				if p == e.Path || strings.HasPrefix(p, e.Path+"/") {
					delete(tree, p)
				}
			}
		case "DELETE":
			delete(tree, e.Path)
		case "SYMLINK":
			tree[e.Path] = at("symlink")
		case "RENAME", "RENAME_DATABASE", "RENAME_TABLE", "RENAME_PARTITION":
			if e.Target == "exchange" {
				tmp := "\x00exchange"
				move(e.Path, tmp)
				move(e.NewPath, e.Path)
				move(tmp, e.NewPath)
			} else {
				for p := range tree {
					if p == e.NewPath || strings.HasPrefix(p, e.NewPath+"/") {
						delete(tree, p)
					}
				}
				move(e.Path, e.NewPath)
			}
		}
		for _, f := range e.Files {
			if f.CM == "" {
				w := at("file")
				w.size, w.xxh64 = f.Size, f.XXH64
				tree[f.Path] = w
			}
		}
	}
	return tree
}

// checkJournalMatchesTree compares the journal's last word on every path
// with the backing tree (the state directory left out) and checks that
// every cmroot entry an event names is there with its content. It returns
// the differences, "" when there are none.
func checkJournalMatchesTree(t testing.TB, backing, state string) string {
	t.Helper()
	want := journalTree(t, state)
	var diffs []string
	var files []string
	got := map[string]string{}
	err := filepath.Walk(backing, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(backing, p)
		rel = filepath.ToSlash(rel)
		switch {
		case rel == ".":
			return nil
		case p == state || rel == ".cmfs":
			return filepath.SkipDir
		case fi.IsDir():
			got[rel] = "dir"
		case fi.Mode()&os.ModeSymlink != 0:
			got[rel] = "symlink"
		case fi.Mode().IsRegular():
			got[rel] = "file"
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sums := xxhsums(t, files...)
	for rel, kind := range got {
		w, ok := want[rel]
		switch {
		case !ok:
			diffs = append(diffs, fmt.Sprintf("%s: a %s in the tree, no event says it exists", rel, kind))
		case w.kind != kind:
			diffs = append(diffs, fmt.Sprintf("%s: a %s in the tree, event %d (%s) says a %s", rel, kind, w.eventID, w.eventType, w.kind))
		case kind == "file":
			p := filepath.Join(backing, filepath.FromSlash(rel))
			fi, err := os.Lstat(p)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Size() != w.size || sums[p] != w.xxh64 {
				diffs = append(diffs, fmt.Sprintf("%s: tree holds %d bytes xxh64 %s, event %d (%s) says %d bytes %s",
					rel, fi.Size(), sums[p], w.eventID, w.eventType, w.size, w.xxh64))
			}
		}
	}
	for rel, w := range want {
		if _, ok := got[rel]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s: event %d (%s) says a %s, the tree has nothing", rel, w.eventID, w.eventType, w.kind))
		}
	}
	cm := filepath.Join(state, "cmroot")
	originals := map[string]string{} // entry path → the xxh64 events give it
	for _, e := range events(t, state) {
		for _, f := range e.Files {
			if f.CM == "" {
				continue
			}
			p, err := cmEntry(cm, f.CM)
			if err != nil {
				diffs = append(diffs, fmt.Sprintf("event %d (%s %s): original %s: %v", e.ID, e.Type, e.Path, f.CM, err))
				continue
			}
			originals[p] = f.XXH64
		}
	}
	paths := make([]string, 0, len(originals))
	for p := range originals {
		paths = append(paths, p)
	}
	for p, sum := range xxhsums(t, paths...) {
		if sum != originals[p] {
			diffs = append(diffs, fmt.Sprintf("original %s hashes to %s, events say %s", p, sum, originals[p]))
		}
	}
	return strings.Join(diffs, "\n")
}
