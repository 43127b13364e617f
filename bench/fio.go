package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"time"
)

// FioBlock is the size of fio's random writes.
const FioBlock = 4 << 10

// FioRandWrite runs fio's 4 KiB random writes (psync, one job, time
// based) into the existing file at path of size bytes, with an fsync
// after every fsyncEvery writes (0: none), for runtime counted after ramp.
// It returns the writes fio counted and the time it counted them in.
//
// fio counts its runtime from before it opens the file, and an open for
// writing through cmfs copies the original into cmroot first (seconds for
// 1 GiB): ramp (fio's ramp_time) must outlast the open, so that what is
// counted is writes alone on every column. fio's own invalidation of the
// page cache (invalidate, on by default, and again at every pass over the
// file) is off: through a FUSE mount its fadvise never reaches the backing
// file, so it would slow the native column alone. The caller makes the
// cache cold for every column alike (DropCaches) before the run.
func FioRandWrite(ctx context.Context, path string, size int64, fsyncEvery int, ramp, runtime time.Duration) (Measurement, error) {
	fio, err := exec.LookPath("fio")
	if err != nil {
		return Measurement{}, errors.New("fio is not installed (make bench-deps installs it)")
	}
	fi, err := os.Stat(path)
	if err != nil {
		return Measurement{}, err
	}
	if fi.Size() != size {
		return Measurement{}, fmt.Errorf("%s has %d bytes, not %d", path, fi.Size(), size)
	}
	secs := func(d time.Duration) string { return strconv.Itoa(max(1, int(d.Round(time.Second)/time.Second))) }
	args := []string{
		"--name=randwrite", "--filename=" + path, "--rw=randwrite", "--bs=" + strconv.Itoa(FioBlock),
		"--ioengine=psync", "--numjobs=1", "--size=" + strconv.FormatInt(size, 10), "--overwrite=1",
		"--fsync=" + strconv.Itoa(fsyncEvery), "--invalidate=0",
		"--time_based", "--ramp_time=" + secs(ramp), "--runtime=" + secs(runtime),
		"--output-format=json",
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, fio, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return Measurement{}, fmt.Errorf("fio: %w: %s", err, FirstLines(stderr.String(), 3))
	}
	return parseFio(stdout.Bytes())
}

// parseFio reads the writes and the time fio counted from its JSON report.
func parseFio(out []byte) (Measurement, error) {
	// fio may print notes before the report.
	if i := bytes.IndexByte(out, '{'); i > 0 {
		out = out[i:]
	}
	var rep struct {
		Jobs []struct {
			Error int `json:"error"`
			Write struct {
				TotalIOs int64 `json:"total_ios"`
				Runtime  int64 `json:"runtime"` // ms
			} `json:"write"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		return Measurement{}, fmt.Errorf("fio's JSON report: %w", err)
	}
	if len(rep.Jobs) != 1 {
		return Measurement{}, fmt.Errorf("fio reported %d jobs, want 1", len(rep.Jobs))
	}
	j := rep.Jobs[0]
	if j.Error != 0 {
		return Measurement{}, fmt.Errorf("fio: job error %d", j.Error)
	}
	if j.Write.TotalIOs <= 0 || j.Write.Runtime <= 0 {
		return Measurement{}, fmt.Errorf("fio counted %d writes in %d ms", j.Write.TotalIOs, j.Write.Runtime)
	}
	return Measurement{
		Elapsed: time.Duration(j.Write.Runtime) * time.Millisecond,
		Ops:     int(j.Write.TotalIOs),
		Bytes:   j.Write.TotalIOs * FioBlock,
	}, nil
}

// OpenTime opens the existing path for writing and closes it without
// writing, and says how long that took: what an open for writing costs
// on this column (cmfs copies the original then, and drops the copy at
// the close).
func OpenTime(path string) (time.Duration, error) {
	start := time.Now()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return 0, err
	}
	took := time.Since(start)
	return took, f.Close()
}
