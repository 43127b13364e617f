package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/internal/loopfs"
	"github.com/cmfs-project/cmfs/internal/procfs"
)

// TestRunPrepare: Prepare runs once per subject before the first run,
// untimed; a subject whose Prepare fails is reported with the reason and
// not run.
func TestRunPrepare(t *testing.T) {
	good, bad := t.TempDir(), t.TempDir()
	prepared := map[string]int{}
	w := Workload{
		Name: "w", Unit: Millis, Data: true,
		Prepare: func(dir string) error {
			prepared[dir]++
			if dir == bad {
				return errors.New("no room")
			}
			return os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644)
		},
		Run: func(dir string, rep int) (Measurement, error) {
			if _, err := os.Stat(filepath.Join(dir, "f")); err != nil {
				return Measurement{}, err
			}
			return Measurement{Elapsed: 1, Ops: 1}, nil
		},
	}
	subjects := []Subject{{Name: NativeName, Mount: &Mount{Dir: good}}, {Name: CmfsName, Mount: &Mount{Dir: bad}}}
	cfg := Config{Reps: 1, DataReps: 3}
	rows, err := Run(context.Background(), cfg, []Workload{w}, subjects, nil)
	if err != nil {
		t.Fatal(err)
	}
	if prepared[good] != 1 || prepared[bad] != 1 {
		t.Errorf("Prepare ran %v, want once per subject", prepared)
	}
	r := rows[0]
	if len(r.Runs[NativeName]) != 3 || len(r.Runs[CmfsName]) != 0 {
		t.Errorf("runs: %v; want 3 for the prepared subject, none for the other", r.Runs)
	}
	if e := r.Errs[CmfsName]; !strings.Contains(e, "prepare: no room") {
		t.Errorf("error of the unprepared subject: %q", e)
	}
}

// TestOnScratch runs a row on XFS and leaves nothing behind: no mount, no
// loop device, no image.
func TestOnScratch(t *testing.T) {
	if why := loopfs.Missing("xfs"); why != "" {
		t.Skip(why)
	}
	dir := t.TempDir()
	cfg := Config{FileSize: 1 << 20, Reps: 1, DataReps: 2, Timeout: 0}
	rows, err := OnScratch(context.Background(), cfg, dir, Scratch{Type: "xfs", Size: XFSImageSize(cfg, 1)}, []Impl{Native{}}, XFSWorkloads(cfg), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || len(rows[0].Runs[NativeName]) != 2 || len(rows[0].Errs) != 0 {
		t.Fatalf("rows: %+v", rows[0])
	}
	if !strings.HasSuffix(rows[0].Name, ", XFS") {
		t.Errorf("row name %q", rows[0].Name)
	}
	if procfs.Mounted(filepath.Join(dir, "xfs")) {
		t.Error("XFS still mounted")
	}
	if _, err := os.Stat(filepath.Join(dir, "xfs.img")); !os.IsNotExist(err) {
		t.Errorf("image left: %v", err)
	}
}

// named is the native column under another name, so that one test can
// run two columns without FUSE.
type named string

func (n named) Name() string { return string(n) }

func (named) Mount(ctx context.Context, backing, mnt string) (*Mount, error) {
	return Native{}.Mount(ctx, backing, mnt)
}

// TestOnScratchPerColumn: with PerColumn every column's backing directory
// is on a filesystem of its own, fresh (no file the other column made is
// on it), and all of them are gone afterwards.
func TestOnScratchPerColumn(t *testing.T) {
	if why := loopfs.Missing("ext4"); why != "" {
		t.Skip(why)
	}
	dir := t.TempDir()
	devs := map[string]uint64{}
	w := Workload{
		Name: "small", Unit: OpsPerSec,
		Run: func(d string, rep int) (Measurement, error) {
			var st syscall.Stat_t
			if err := syscall.Stat(d, &st); err != nil {
				return Measurement{}, err
			}
			devs[d] = st.Dev
			ents, err := os.ReadDir(filepath.Dir(d))
			if err != nil {
				return Measurement{}, err
			}
			for _, e := range ents {
				if e.Name() != filepath.Base(d) && e.Name() != "lost+found" {
					return Measurement{}, fmt.Errorf("%s shares its filesystem with %s", d, e.Name())
				}
			}
			return Measurement{Elapsed: time.Millisecond, Ops: 1}, os.WriteFile(filepath.Join(d, "f"), nil, 0o644)
		},
	}
	cfg := Config{Reps: 1}
	sc := Scratch{Type: "ext4", Size: 64 << 20, PerColumn: true}
	rows, err := OnScratch(context.Background(), cfg, dir, sc, []Impl{named("a"), named("b c")}, []Workload{w}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || len(rows[0].Runs) != 2 || len(rows[0].Errs) != 0 {
		t.Fatalf("rows: %+v", rows[0])
	}
	if len(devs) != 2 {
		t.Fatalf("ran in %v, want two directories", devs)
	}
	var seen []uint64
	for d, dev := range devs {
		if slices.Contains(seen, dev) {
			t.Errorf("%s is on a filesystem another column has too", d)
		}
		seen = append(seen, dev)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if procfs.Mounted(filepath.Join(dir, e.Name())) {
			t.Errorf("%s still mounted", e.Name())
		}
		if strings.HasSuffix(e.Name(), ".img") {
			t.Errorf("image %s left", e.Name())
		}
	}
}
