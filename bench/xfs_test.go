package bench

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

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

// TestOnXFS runs a row on XFS and leaves nothing behind: no mount, no
// loop device, no image.
func TestOnXFS(t *testing.T) {
	if why := loopfs.Missing("xfs"); why != "" {
		t.Skip(why)
	}
	dir := t.TempDir()
	cfg := Config{FileSize: 1 << 20, Reps: 1, DataReps: 2, Timeout: 0}
	rows, err := OnXFS(context.Background(), cfg, dir, XFSImageSize(cfg, 1), []Impl{Native{}}, XFSWorkloads(cfg), nil)
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
