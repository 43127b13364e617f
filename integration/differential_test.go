package integration

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/journal"
)

// diffOps is how many operations TestDifferential applies.
const diffOps = 10000

// diffDirs are the directories the random operations work in: plain ones,
// the warehouse layout, an excluded staging directory, and one so deep
// that its files' paths from the mount's root are nearly PATH_MAX long.
var diffDirs = []string{"a", "a/b", "w.db", "w.db/t", "w.db/t/p=1", "w.db/t/p=2", "w.db/t/_temporary", "x", diffLong}

// diffLong is the deep directory: 127-byte components (as pjdfstest's),
// about 3900 bytes in all. TestDifferential keeps the mount's and the
// native tree's own paths short and gives the backing directory a long
// one, so that the daemon's backing path of a file there is longer than
// PATH_MAX while both callers' paths fit.
var diffLong = func() string {
	var parts []string
	for i := 0; len(parts)*128 < 3900; i++ {
		parts = append(parts, strings.Repeat(string(rune('a'+i%26)), 127))
	}
	return "L/" + strings.Join(parts, "/")
}()

var diffNames = []string{"f0", "f1", "f2", "f3"}

// diffPaths are every path an operation may name: the directories
// themselves (so file operations meet directories too) and files in them.
var diffPaths = func() []string {
	paths := append([]string(nil), diffDirs...)
	for _, d := range append([]string{""}, diffDirs...) {
		for _, n := range diffNames {
			paths = append(paths, strings.TrimPrefix(d+"/"+n, "/"))
		}
	}
	return paths
}()

var diffPerms = []uint32{0o600, 0o644, 0o755, 0o400, 0o444, 0o700, 0o640, 0o001, 0o4755, 0o2750, 0o1777, 0o6777, 0o620}

// diffOp is one random operation, applied identically to both trees.
type diffOp struct {
	kind  string
	path  string
	path2 string
	data  []byte
	off   int64
	mode  uint32
}

func (o diffOp) String() string {
	s := o.kind + " " + o.path
	if o.path2 != "" {
		s += " " + o.path2
	}
	if o.data != nil {
		s += fmt.Sprintf(" data=%d bytes", len(o.data))
	}
	switch o.kind {
	case "pwrite", "truncate", "ftruncate":
		s += fmt.Sprintf(" off=%d", o.off)
	case "create", "chmod", "mkdir":
		s += fmt.Sprintf(" mode=%o", o.mode)
	}
	return s
}

var diffKinds = []struct {
	kind   string
	weight int
}{
	{"create", 10}, {"overwrite", 10}, {"append", 6}, {"pwrite", 8},
	{"truncate", 5}, {"ftruncate", 4}, {"unlink", 8}, {"rename", 8},
	{"mkdir", 6}, {"rmdir", 4}, {"link", 3}, {"symlink", 2}, {"chmod", 4},
	{"read", 6}, {"stat", 4}, {"unlink-open", 3},
}

func randomOp(rng *rand.Rand) diffOp {
	total := 0
	for _, k := range diffKinds {
		total += k.weight
	}
	n := rng.IntN(total)
	var o diffOp
	for _, k := range diffKinds {
		if n < k.weight {
			o.kind = k.kind
			break
		}
		n -= k.weight
	}
	pick := func() string { return diffPaths[rng.IntN(len(diffPaths))] }
	o.path = pick()
	data := func() []byte {
		size := rng.IntN(4096)
		switch rng.IntN(10) {
		case 0:
			size = 0
		case 1:
			size = rng.IntN(128 << 10)
		}
		b := make([]byte, size)
		for i := range b {
			b[i] = byte(rng.UintN(256))
		}
		return b
	}
	switch o.kind {
	case "create", "overwrite", "append":
		o.data = data()
		o.mode = diffPerms[rng.IntN(len(diffPerms))] | 0o200
	case "pwrite":
		o.data = data()
		o.off = int64(rng.IntN(8192))
	case "truncate", "ftruncate":
		o.off = int64(rng.IntN(6000))
	case "rename", "link":
		o.path2 = pick()
	case "symlink":
		o.path2 = diffNames[rng.IntN(len(diffNames))]
	case "mkdir":
		o.path = diffDirs[rng.IntN(len(diffDirs))]
		o.mode = []uint32{0o755, 0o755, 0o1777, 0o2775, 0o700}[rng.IntN(5)]
		if rng.IntN(4) == 0 {
			o.path = pick()
		}
	case "rmdir":
		o.path = diffDirs[rng.IntN(len(diffDirs))]
	case "chmod":
		o.mode = diffPerms[rng.IntN(len(diffPerms))]
	}
	return o
}

// apply performs o below root and returns its errno and what it observed.
func (o diffOp) apply(root string) (syscall.Errno, string) {
	p := filepath.Join(root, o.path)
	p2 := filepath.Join(root, o.path2)
	errno := func(err error) syscall.Errno { return errnoOf(err) }
	// writeAll runs open, write (or pwrite), close and reports the first error.
	writeAll := func(flags int, mode uint32, off int64) (syscall.Errno, string) {
		fd, err := syscall.Open(p, flags|syscall.O_CLOEXEC, mode)
		if err != nil {
			return errno(err), "open"
		}
		var werr error
		if off >= 0 {
			_, werr = syscall.Pwrite(fd, o.data, off)
		} else if len(o.data) > 0 {
			_, werr = syscall.Write(fd, o.data)
		}
		cerr := syscall.Close(fd)
		if werr != nil {
			return errno(werr), "write"
		}
		return errno(cerr), "close"
	}
	switch o.kind {
	case "create":
		return writeAll(syscall.O_CREAT|syscall.O_EXCL|syscall.O_WRONLY, o.mode, -1)
	case "overwrite":
		return writeAll(syscall.O_CREAT|syscall.O_TRUNC|syscall.O_WRONLY, o.mode, -1)
	case "append":
		return writeAll(syscall.O_WRONLY|syscall.O_APPEND, 0, -1)
	case "pwrite":
		return writeAll(syscall.O_RDWR, 0, o.off)
	case "truncate":
		return errno(syscall.Truncate(p, o.off)), ""
	case "ftruncate":
		fd, err := syscall.Open(p, syscall.O_WRONLY|syscall.O_CLOEXEC, 0)
		if err != nil {
			return errno(err), "open"
		}
		terr := syscall.Ftruncate(fd, o.off)
		cerr := syscall.Close(fd)
		if terr != nil {
			return errno(terr), "ftruncate"
		}
		return errno(cerr), "close"
	case "unlink":
		return errno(syscall.Unlink(p)), ""
	case "rename":
		return errno(syscall.Rename(p, p2)), ""
	case "mkdir":
		return errno(syscall.Mkdir(p, o.mode)), ""
	case "rmdir":
		return errno(syscall.Rmdir(p)), ""
	case "link":
		return errno(syscall.Link(p, p2)), ""
	case "symlink":
		return errno(syscall.Symlink(o.path2, p)), ""
	case "chmod":
		return errno(syscall.Chmod(p, o.mode)), ""
	case "read":
		b, err := os.ReadFile(p)
		if err != nil {
			return errno(err), ""
		}
		return 0, fmt.Sprintf("%d bytes xxh64 %s", len(b), journal.Sum(b))
	case "stat":
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return errno(err), ""
		}
		size := st.Size
		if st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
			size = 0 // directory sizes are the file system's business
		}
		return 0, fmt.Sprintf("mode %o size %d nlink %d", st.Mode, size, st.Nlink)
	case "unlink-open":
		// An open file that is unlinked answers fstat with nlink 0 and
		// stays readable and writable.
		fd, err := syscall.Open(p, syscall.O_RDWR|syscall.O_CLOEXEC, 0)
		if err != nil {
			return errno(err), "open"
		}
		defer syscall.Close(fd)
		var before syscall.Stat_t
		if err := syscall.Fstat(fd, &before); err != nil {
			return errno(err), "fstat"
		}
		if err := syscall.Unlink(p); err != nil {
			return errno(err), "unlink"
		}
		var st syscall.Stat_t
		if err := syscall.Fstat(fd, &st); err != nil {
			return errno(err), "fstat"
		}
		if _, err := syscall.Pwrite(fd, []byte("late"), 0); err != nil {
			return errno(err), "pwrite"
		}
		buf := make([]byte, 8)
		n, err := syscall.Pread(fd, buf, 0)
		if err != nil {
			return errno(err), "pread"
		}
		return 0, fmt.Sprintf("nlink %d->%d size %d read %q", before.Nlink, st.Nlink, st.Size, buf[:n])
	}
	panic("unknown op " + o.kind)
}

func TestDifferential(t *testing.T) {
	seed := *seedFlag
	if seed == 0 {
		seed = time.Now().UnixNano()
	}
	t.Logf("seed %d (rerun with: go test ./integration/ -run TestDifferential -seed %d)", seed, seed)
	// A backing path 250 bytes longer than the mount's (diffLong).
	backing := filepath.Join(t.TempDir(), strings.Repeat("b", 250))
	if err := os.Mkdir(backing, 0o755); err != nil {
		t.Fatal(err)
	}
	// The state elsewhere: its control socket's path must stay short.
	m := mountAt(t, backing, "--state", filepath.Join(t.TempDir(), "state"))
	native := t.TempDir()
	for _, root := range []string{native, m.Mnt} {
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(diffLong)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(m.Backing) + 1 + len(diffLong) + 3; n < pathMax || len(m.Mnt)+1+len(diffLong)+3 >= pathMax {
		t.Fatalf("the premise: a backing path of %d bytes must not fit in a call, the mount's must", n)
	}
	rng := rand.New(rand.NewPCG(uint64(seed), uint64(seed)>>32|1))

	start := time.Now()
	var recent, all []string
	dumpLog := func() string {
		name := filepath.Join(os.TempDir(), fmt.Sprintf("cmfs-differential-%d.log", seed))
		if err := os.WriteFile(name, []byte(strings.Join(all, "\n")+"\n"), 0o644); err != nil {
			return err.Error()
		}
		return "every operation and its native result: " + name
	}
	okCount := map[string]int{}
	errCount := map[string]int{}
	deep := 0 // operations in diffLong that succeeded
	for i := range diffOps {
		o := randomOp(rng)
		wantErr, wantOut := o.apply(native)
		gotErr, gotOut := o.apply(m.Mnt)
		line := fmt.Sprintf("%5d %v: %v %s", i, o, wantErr, wantOut)
		recent = append(recent, line)
		all = append(all, line)
		if len(recent) > 25 {
			recent = recent[1:]
		}
		if gotErr != wantErr || gotOut != wantOut {
			t.Fatalf("seed %d, op %d %v: through cmfs %v (%d) %q, natively %v (%d) %q\nlast operations (native results):\n%s\n%s",
				seed, i, o, gotErr, gotErr, gotOut, wantErr, wantErr, wantOut, strings.Join(recent, "\n"), dumpLog())
		}
		if wantErr == 0 {
			if strings.HasPrefix(o.path, diffLong+"/") {
				deep++
			}
			okCount[o.kind]++
		} else {
			errCount[o.kind]++
		}
		if (i+1)%1000 == 0 || i == diffOps-1 {
			if d := diffTrees(snapshot(t, m.Mnt), snapshot(t, native)); d != "" {
				t.Fatalf("seed %d: after op %d the trees differ (through cmfs vs native):\n%s\nlast operations:\n%s\n%s",
					seed, i, d, strings.Join(recent, "\n"), dumpLog())
			}
		}
	}
	var kinds []string
	for _, k := range diffKinds {
		kinds = append(kinds, fmt.Sprintf("%s %d/%d", k.kind, okCount[k.kind], okCount[k.kind]+errCount[k.kind]))
	}
	sort.Strings(kinds)
	t.Logf("%d operations in %v (succeeded/total): %s; %d succeeded in the deep directory", diffOps, time.Since(start).Round(time.Millisecond), strings.Join(kinds, ", "), deep)
	if deep == 0 {
		t.Errorf("no operation on a file in the deep directory succeeded: the long paths went untested")
	}
	checkEvents(t, m, events(t, m.State), false)
}
