package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/cmfs-project/cmfs/bench"
	"github.com/cmfs-project/cmfs/container"
	"github.com/cmfs-project/cmfs/internal/durable"
)

// --- push against tar and rsync ---

func (r *runner) pushRows(ctx context.Context) []*bench.ReplRow {
	c := r.cfg
	what := fmt.Sprintf("%s container (%d files, incompressible, cold)", bench.Size(c.pushSize), c.pushFiles)
	tarBase := "tar c | loopback TCP | tar x, + syncfs"
	vsTar := &bench.ReplRow{
		Name: "push " + what + ": container replicate A→B (export, gRPC push, import, fsync of every file)", Unit: "MB/s", Higher: true,
		Baseline: tarBase, Target: bench.ReplTarget{MinRatio: 0.8, Text: "≥ 0.8× tar"},
	}
	vsRsync := &bench.ReplRow{Name: "push " + what + ": the same runs", Unit: "MB/s", Higher: true, Baseline: "rsync -a (local), + syncfs"}
	scanned := &bench.ReplRow{Name: "push " + what + ": until CLOSED at B (+ the scan of every block)", Unit: "MB/s", Higher: true, Baseline: tarBase}
	disk := &bench.ReplRow{Name: "push " + what + ": bytes written to the disk per byte of data", Unit: "B/B", Baseline: tarBase}
	rows := []*bench.ReplRow{vsTar, vsRsync, scanned, disk}
	fail := func(err error) []*bench.ReplRow { return bench.FailRows(rows, err) }
	dir := filepath.Join(r.dir, "push")
	src := filepath.Join(dir, "src")
	a, d, err := r.source(ctx, "push", dir, bench.WriteRandomFiles, c.pushFiles, c.pushSize)
	if err != nil {
		return fail(err)
	}
	defer a.stop()
	rsync, rsyncErr := exec.LookPath("rsync")
	if rsyncErr != nil {
		vsRsync.FailBase(errNoRsync)
	}

	for rep := range c.reps {
		for k := range 3 {
			if ctx.Err() != nil {
				return rows
			}
			switch (k + rep) % 3 {
			case 0:
				b, err := r.serve(ctx, fmt.Sprintf("B%d", rep), filepath.Join(dir, fmt.Sprintf("b-%d", rep)))
				if err != nil {
					return fail(err)
				}
				r.cold()
				w := r.diskWritten()
				start := time.Now()
				took, _, err := r.replicate(ctx, a, b, d.ID, "")
				written := w()
				if err == nil {
					err = waitScanned(ctx, b, d.ID, c.pushSize)
				}
				all := time.Since(start)
				b.stop()
				if err != nil {
					return fail(err)
				}
				if written >= 0 {
					disk.Add(float64(written) / float64(c.pushSize))
				}
				vsTar.Add(mbps(c.pushSize, took))
				vsRsync.Add(mbps(c.pushSize, took))
				scanned.Add(mbps(c.pushSize, all))
				r.logf("[push] replicate run %d: %v (%.0f MB/s), %s written to the disk, CLOSED after %v", rep+1, took.Round(time.Millisecond), mbps(c.pushSize, took), mibString(written), all.Round(time.Millisecond))
			case 1:
				took, written, err := r.tarRun(ctx, src, filepath.Join(dir, fmt.Sprintf("tar-%d", rep)), c.pushSize)
				if err != nil {
					vsTar.FailBase(err)
					scanned.FailBase(err)
					disk.FailBase(err)
					break
				}
				vsTar.AddBase(mbps(c.pushSize, took))
				scanned.AddBase(mbps(c.pushSize, took))
				if written >= 0 {
					disk.AddBase(float64(written) / float64(c.pushSize))
				}
				r.logf("[push] tar | TCP | tar run %d: %v (%.0f MB/s), %s written to the disk", rep+1, took.Round(time.Millisecond), mbps(c.pushSize, took), mibString(written))
			case 2:
				if rsyncErr != nil {
					break
				}
				dst := filepath.Join(dir, fmt.Sprintf("rsync-%d", rep))
				r.cold()
				start := time.Now()
				out, err := exec.CommandContext(ctx, rsync, "-a", src+"/", dst+"/").CombinedOutput()
				if err == nil {
					err = durable.SyncFS(dst)
				} else {
					err = fmt.Errorf("rsync -a: %w: %s", err, bench.FirstLines(string(out), 3))
				}
				took := time.Since(start)
				if err != nil {
					vsRsync.FailBase(err)
					break
				}
				vsRsync.AddBase(mbps(c.pushSize, took))
				r.logf("[push] rsync -a run %d: %v (%.0f MB/s)", rep+1, took.Round(time.Millisecond), mbps(c.pushSize, took))
			}
		}
	}
	return rows
}

// source starts node A of a phase: n files of size bytes in all, written
// by write into dir/src, put into one closed container on a node that
// serves dir/a with the extra serve flags.
func (r *runner) source(ctx context.Context, phase, dir string, write func(dir string, n, size int) ([]string, error), n int, size int64, extra ...string) (*node, container.Descriptor, error) {
	r.logf("[%s] writing %s in %d files...", phase, bench.Size(size), n)
	files, err := write(filepath.Join(dir, "src"), n, int(size/int64(n)))
	if err != nil {
		return nil, container.Descriptor{}, err
	}
	a, err := r.serve(ctx, "A", filepath.Join(dir, "a"), extra...)
	if err != nil {
		return nil, container.Descriptor{}, err
	}
	r.logf("[%s] container put + close on A...", phase)
	d, err := r.fill(ctx, a, files, size)
	if err != nil {
		a.stop()
		return nil, container.Descriptor{}, err
	}
	return a, d, nil
}

// tarRun times tarPipe from src into a new directory dst and a syncfs of
// it, cold, and returns how long it took and the bytes written to the disk
// meanwhile (-1: unknown).
func (r *runner) tarRun(ctx context.Context, src, dst string, size int64) (time.Duration, int64, error) {
	if err := os.Mkdir(dst, 0o755); err != nil {
		return 0, -1, err
	}
	r.cold()
	w := r.diskWritten()
	start := time.Now()
	n, err := tarPipe(ctx, src, dst)
	if err == nil {
		err = durable.SyncFS(dst)
	}
	took := time.Since(start)
	if err == nil && n < size {
		err = fmt.Errorf("tar moved %d bytes for %d of data", n, size)
	}
	return took, w(), err
}

// diskWritten starts counting what is written to the work directory's
// disk (by anyone); the function returned tells how much so far, or -1.
func (r *runner) diskWritten() func() int64 {
	before, err := bench.DiskWritten(r.dir)
	if err != nil {
		return func() int64 { return -1 }
	}
	return func() int64 {
		after, err := bench.DiskWritten(r.dir)
		if err != nil {
			return -1
		}
		return after - before
	}
}

// tarPipe runs `tar -C src -cf - .` into `tar -C dst -xf -` through a
// loopback TCP connection and returns the bytes of the tar stream.
func tarPipe(ctx context.Context, src, dst string) (int64, error) {
	create := exec.CommandContext(ctx, "tar", "-C", src, "-cf", "-", ".")
	extract := exec.CommandContext(ctx, "tar", "-C", dst, "-xf", "-")
	var createErr, extractErr strings.Builder
	create.Stderr, extract.Stderr = &createErr, &extractErr
	out, err := create.StdoutPipe()
	if err != nil {
		return 0, err
	}
	in, err := extract.StdinPipe()
	if err != nil {
		return 0, err
	}
	if err := extract.Start(); err != nil {
		return 0, err
	}
	if err := create.Start(); err != nil {
		in.Close()
		extract.Wait()
		return 0, err
	}
	n, pipeErr := bench.LoopbackPipe(ctx, in, out)
	in.Close()
	if pipeErr != nil {
		create.Process.Kill()
		extract.Process.Kill()
	}
	cerr, xerr := create.Wait(), extract.Wait()
	switch {
	case cerr != nil:
		return n, fmt.Errorf("tar c: %w: %s", cerr, bench.FirstLines(createErr.String(), 3))
	case xerr != nil:
		return n, fmt.Errorf("tar x: %w: %s", xerr, bench.FirstLines(extractErr.String(), 3))
	case pipeErr != nil:
		return n, fmt.Errorf("loopback pipe: %w", pipeErr)
	}
	return n, nil
}

// --- compression with the bandwidth limit on ---

func (r *runner) compressionRows(ctx context.Context) []*bench.ReplRow {
	c := r.cfg
	limit := bench.Size(c.bandwidth) + "/s"
	what := fmt.Sprintf("push %s of JSON lines (%d files, cold), source limited to %s", bench.Size(c.compSize), c.compFiles, limit)
	byComp := map[string]*bench.ReplRow{}
	var rows []*bench.ReplRow
	for _, comp := range c.compressions {
		row := &bench.ReplRow{Name: what + ": --compression " + comp, Unit: "MB/s", Higher: true, Baseline: "--compression none"}
		byComp[comp] = row
		rows = append(rows, row)
	}
	fail := func(err error) []*bench.ReplRow { return bench.FailRows(rows, err) }
	dir := filepath.Join(r.dir, "compression")
	a, d, err := r.source(ctx, "compression", dir, bench.WriteJSONFiles, c.compFiles, c.compSize, "--replication-bandwidth", bandwidthArg(c.bandwidth))
	if err != nil {
		return fail(err)
	}
	defer a.stop()
	all := append([]string{"none"}, c.compressions...)
	wire := map[string]int64{} // bytes on the wire per compression
	for rep := range c.reps {
		for k := range all {
			if ctx.Err() != nil {
				return rows
			}
			comp := all[(k+rep)%len(all)]
			b, err := r.serve(ctx, fmt.Sprintf("B%d-%s", rep, comp), filepath.Join(dir, fmt.Sprintf("b-%d-%s", rep, comp)))
			if err != nil {
				return fail(err)
			}
			r.cold()
			took, out, err := r.replicate(ctx, a, b, d.ID, comp)
			if err == nil {
				err = waitScanned(ctx, b, d.ID, c.compSize)
			}
			b.stop()
			v := mbps(c.compSize, took)
			switch {
			case err != nil && comp == "none":
				for _, row := range rows {
					row.FailBase(err)
				}
			case err != nil:
				byComp[comp].Fail(err)
			case comp == "none":
				for _, row := range rows {
					row.AddBase(v)
				}
			default:
				byComp[comp].Add(v)
			}
			if err == nil {
				wire[comp] = wireBytes(out)
				r.logf("[compression] %s run %d: %v (%.0f MB/s of data), %d bytes on the wire", comp, rep+1, took.Round(time.Millisecond), v, wire[comp])
			}
		}
	}
	share := func(comp string) string {
		if n, ok := wire[comp]; ok && n >= 0 {
			return fmt.Sprintf("%.0f%%", 100*float64(n)/float64(c.compSize))
		}
		return "?"
	}
	for comp, row := range byComp {
		row.Name += fmt.Sprintf(" (on the wire: %s of the data; none %s)", share(comp), share("none"))
	}
	return rows
}

// bandwidthArg writes a limit as serve's --replication-bandwidth takes it.
func bandwidthArg(n int64) string { return fmt.Sprint(n) }

// wireRe finds what `replicad container replicate` says went over the
// wire: "...; 12345 bytes (12.1 KiB) on the wire, ...".
var wireRe = regexp.MustCompile(`(\d+) bytes(?: \([^)]*\))? on the wire`)

// wireBytes returns the tarball's bytes on the wire as replicate printed
// them, or -1.
func wireBytes(out string) int64 {
	m := wireRe.FindStringSubmatch(out)
	if m == nil {
		return -1
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// --- peak RSS while pushing a large container ---

func (r *runner) rssRows(ctx context.Context) []*bench.ReplRow {
	c := r.cfg
	const mib = 1 << 20
	what := fmt.Sprintf("while pushing a %s container, until CLOSED at the target", bench.Size(c.rssSize))
	target := bench.ReplTarget{MaxValue: float64(c.rssLimit) / mib, Text: fmt.Sprintf("≤ %s", bench.Size(c.rssLimit))}
	srcRow := &bench.ReplRow{Name: "peak RSS of the source's replicad serve " + what, Unit: "MiB", Target: target}
	dstRow := &bench.ReplRow{Name: "peak RSS of the target's replicad serve " + what, Unit: "MiB", Target: target}
	pushed := fmt.Sprintf("push %s container (%d files, incompressible, cold)", bench.Size(c.rssSize), c.rssFiles)
	tarBase := "tar c | loopback TCP | tar x, + syncfs"
	speed := &bench.ReplRow{Name: pushed + ", as watched", Unit: "MB/s", Higher: true, Baseline: tarBase}
	disk := &bench.ReplRow{Name: pushed + ": bytes written to the disk per byte of data", Unit: "B/B", Baseline: tarBase}
	rows := []*bench.ReplRow{srcRow, dstRow, speed, disk}
	fail := func(err error) []*bench.ReplRow { return bench.FailRows(rows, err) }
	dir := filepath.Join(r.dir, "rss")
	a, d, err := r.source(ctx, "rss", dir, bench.WriteRandomFiles, c.rssFiles, c.rssSize)
	if err != nil {
		return fail(err)
	}
	defer a.stop()
	for rep := range c.reps {
		if ctx.Err() != nil {
			return rows
		}
		// The tar baseline of the speed, before or after, by turns.
		tarRun := func() {
			dst := filepath.Join(dir, fmt.Sprintf("tar-%d", rep))
			took, written, err := r.tarRun(ctx, filepath.Join(dir, "src"), dst, c.rssSize)
			os.RemoveAll(dst)
			if err != nil {
				speed.FailBase(err)
				disk.FailBase(err)
				return
			}
			speed.AddBase(mbps(c.rssSize, took))
			if written >= 0 {
				disk.AddBase(float64(written) / float64(c.rssSize))
			}
			r.logf("[rss] tar | TCP | tar run %d: %v (%.0f MB/s), %s written to the disk", rep+1, took.Round(time.Millisecond), mbps(c.rssSize, took), mibString(written))
		}
		if rep%2 == 1 {
			tarRun()
		}
		b, err := r.serve(ctx, fmt.Sprintf("B%d", rep), filepath.Join(dir, fmt.Sprintf("b-%d", rep)))
		if err != nil {
			return fail(err)
		}
		r.cold()
		idleA, _ := bench.ProcStatus(a.pid(), "VmRSS")
		idleB, _ := bench.ProcStatus(b.pid(), "VmRSS")
		// The source's peak so far is the put's: start afresh.
		hwmOK := bench.ResetPeakRSS(a.pid()) == nil && bench.ResetPeakRSS(b.pid()) == nil
		sampler := bench.SampleRSS([]int{a.pid(), b.pid()}, 50*time.Millisecond)
		w := r.diskWritten()
		took, _, err := r.replicate(ctx, a, b, d.ID, "")
		written := w()
		if err == nil {
			err = waitScanned(ctx, b, d.ID, c.rssSize)
		}
		peaks, serr := sampler.Stop()
		peakA, peakB := peaks[a.pid()], peaks[b.pid()]
		if err == nil && serr != nil {
			err = fmt.Errorf("sampling RSS: %w", serr)
		}
		if err == nil && hwmOK {
			hwmA, errA := bench.ProcStatus(a.pid(), "VmHWM")
			hwmB, errB := bench.ProcStatus(b.pid(), "VmHWM")
			if errA == nil && errB == nil {
				peakA, peakB = max(peakA, hwmA), max(peakB, hwmB)
			}
		}
		b.stop()
		os.RemoveAll(b.volume) // 4 GiB a run; RSS does not mind the discard
		if err != nil {
			return fail(err)
		}
		srcRow.Add(float64(peakA) / mib)
		dstRow.Add(float64(peakB) / mib)
		speed.Add(mbps(c.rssSize, took))
		if written >= 0 {
			disk.Add(float64(written) / float64(c.rssSize))
		}
		if rep == 0 {
			how := "VmHWM reset through clear_refs, and VmRSS every 50 ms"
			if !hwmOK {
				how = "VmRSS every 50 ms (VmHWM could not be reset)"
			}
			r.notes = append(r.notes, fmt.Sprintf("peak RSS: %s; idle before the push: source %.0f MiB, target %.0f MiB", how, float64(idleA)/mib, float64(idleB)/mib))
		}
		r.logf("[rss] replicate run %d: %v (%.0f MB/s), %s written to the disk; peak RSS source %.0f MiB, target %.0f MiB",
			rep+1, took.Round(time.Millisecond), mbps(c.rssSize, took), mibString(written), float64(peakA)/mib, float64(peakB)/mib)
		if rep%2 == 0 {
			tarRun()
		}
	}
	return rows
}

// mibString shows a byte count in MiB; -1 is unknown.
func mibString(n int64) string {
	if n < 0 {
		return "?"
	}
	return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20))
}
