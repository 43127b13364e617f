package bench

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestRatioOrientation(t *testing.T) {
	tests := []struct {
		name       string
		unit       Unit
		cmfs, base float64
		want       float64
	}{
		{"throughput faster", MBps, 200, 100, 2},
		{"throughput slower", OpsPerSec, 50, 100, 0.5},
		{"time faster", Seconds, 1, 2, 2},
		{"time slower", Millis, 0.004, 0.001, 0.25},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &Row{Unit: tt.unit}
			r.Add(CmfsName, tt.cmfs)
			r.Add(NativeName, tt.base)
			got, ok := r.Ratio(CmfsName, NativeName)
			if !ok || got != tt.want {
				t.Errorf("Ratio = %v, %v; want %v", got, ok, tt.want)
			}
		})
	}
}

func TestTargets(t *testing.T) {
	r := &Row{Unit: Seconds, Targets: []Target{{Base: NativeName, Min: 1 / 1.1}}}
	r.Add(NativeName, 1.0)
	r.Add(CmfsName, 1.05) // 1.05× native time: within 1.1×
	if met, ok := r.Met(CmfsName, r.Targets[0]); !met || !ok {
		t.Errorf("Met(1.05× native time, ≤ 1.1×) = %v, %v; want true, true", met, ok)
	}
	r.Fail(LoopbackName, os.ErrNotExist)
	if _, ok := r.Met(CmfsName, Target{Base: LoopbackName, Min: 1}); ok {
		t.Error("Met against a failed baseline: ok = true, want false")
	}
	abs := &Row{Unit: EventsPerSec, Only: CmfsName}
	abs.Add(CmfsName, 60000)
	if met, ok := abs.Met(CmfsName, Target{Min: 50000}); !met || !ok {
		t.Errorf("Met(60k ≥ 50k) = %v, %v; want true, true", met, ok)
	}
}

func TestMedian(t *testing.T) {
	r := &Row{Unit: MBps}
	for _, v := range []float64{5, 1, 3, 100, 4} {
		r.Add(NativeName, v)
	}
	if got := r.Values[NativeName]; got != 4 {
		t.Errorf("median = %v, want 4", got)
	}
}

func TestTableCells(t *testing.T) {
	r := &Row{Name: "w", Unit: MBps, Targets: []Target{{Base: NativeName, Min: 0.9}}}
	r.Add(NativeName, 100)
	r.Fail(CmfsName, os.ErrClosed)
	tab := &Table{Impls: []string{NativeName, CmfsName}, Subject: CmfsName, Rows: []*Row{r}}
	var b strings.Builder
	if err := tab.WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSpace(b.String()), "\n")[2]
	want := "| w | MB/s | 100 | n/a | — | ≥ 0.90× native n/a |"
	if got != want {
		t.Errorf("row = %q, want %q", got, want)
	}
}

func TestFileSet(t *testing.T) {
	for _, workers := range []int{1, 3} {
		s := FileSet{Dir: filepath.Join(t.TempDir(), "set"), N: 10, Workers: workers, Size: 4096}
		for _, op := range []struct {
			name string
			fn   func() (Measurement, error)
		}{{"create", s.Create}, {"stat", s.Stat}, {"overwrite", s.Overwrite}, {"stat", s.Stat}, {"unlink", s.Unlink}} {
			m, err := op.fn()
			if err != nil {
				t.Fatalf("%d workers: %s: %v", workers, op.name, err)
			}
			if m.Ops != s.N || m.Elapsed <= 0 {
				t.Errorf("%d workers: %s: %+v, want %d ops", workers, op.name, m, s.N)
			}
		}
		if _, err := os.Lstat(s.Path(0)); !os.IsNotExist(err) {
			t.Errorf("after unlink: lstat: %v, want not exist", err)
		}
		if _, err := s.Overwrite(); err == nil {
			t.Error("overwrite of unlinked files: nil error, want ENOENT (it must not create them)")
		}
		if _, err := os.Lstat(s.Path(0)); !os.IsNotExist(err) {
			t.Errorf("after unlink: lstat: %v, want not exist", err)
		}
		if _, err := s.Stat(); err == nil {
			t.Error("stat of unlinked files: nil error")
		}
	}
}

func TestLargeFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "big")
	const size = 3*Chunk + 123
	steps := []struct {
		name string
		fn   func() (Measurement, error)
	}{
		{"write", func() (Measurement, error) { return SeqWrite(p, size, 1) }},
		{"read", func() (Measurement, error) { return SeqRead(p) }},
		{"overwrite", func() (Measurement, error) { return Overwrite(p, size, 2) }},
		{"write at", func() (Measurement, error) { return WriteAt(p, size/2, 4096, 3) }},
	}
	for _, s := range steps {
		if _, err := s.fn(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
	}
	m, err := SeqRead(p)
	if err != nil || m.Bytes != size {
		t.Errorf("read back %d bytes, %v; want %d", m.Bytes, err, size)
	}
	if _, err := SeqWrite(p, size, 4); err == nil {
		t.Error("SeqWrite over an existing file: nil error, want EEXIST")
	}
}

func TestRunTimedNoTimeout(t *testing.T) {
	m, err := runTimed(time.Minute, &Mount{}, func() (Measurement, error) {
		return Measurement{Ops: 1, Elapsed: time.Millisecond}, nil
	})
	if err != nil || m.Ops != 1 {
		t.Errorf("runTimed = %+v, %v", m, err)
	}
}

func TestSizeAndCount(t *testing.T) {
	tests := []struct{ got, want string }{
		{Size(1 << 30), "1 GiB"},
		{Size(64 << 20), "64 MiB"},
		{Size(4096), "4 KiB"},
		{Size(1000), "1000 B"},
		{Count(10000), "10k"},
		{Count(1000), "1000"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}

func TestTableBefore(t *testing.T) {
	before := RevisionName("c975bd5")
	meta := []Target{{Base: LoopbackName, Min: 0.9}}
	rows := []*Row{
		{Name: "ops", Unit: OpsPerSec, Targets: meta},
		{Name: "time", Unit: Seconds},
		{Name: "no before", Unit: OpsPerSec, Targets: meta},
	}
	rows[0].Add(LoopbackName, 1000)
	rows[0].Add(before, 800)
	rows[0].Add(CmfsName, 400) // half as fast as before
	rows[1].Add(LoopbackName, 1)
	rows[1].Add(before, 1)
	rows[1].Add(CmfsName, 4) // four times as long as before
	rows[2].Add(LoopbackName, 1000)
	rows[2].Fail(before, os.ErrNotExist)
	rows[2].Add(CmfsName, 950)
	tab := &Table{Impls: []string{LoopbackName, before, CmfsName}, Subject: CmfsName, Rows: rows, Before: before}
	var b strings.Builder
	if err := tab.WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSpace(b.String()), "\n")
	want := []string{
		"| workload | unit | loopback | cmfs@c975bd5 | cmfs | cmfs/loopback | cmfs/cmfs@c975bd5 | target (cmfs) |",
		"|---|---:|---:|---:|---:|---:|---:|---|",
		"| ops | ops/s | 1000 | 800 | 400 | 0.40 | 0.50 | ≥ 0.90× loopback MISS |",
		"| time | s | 1.00 | 1.00 | 4.00 | 0.25 | 0.25 | — |",
		"| no before | ops/s | 1000 | n/a | 950 | 0.95 | — | ≥ 0.90× loopback ok |",
	}
	if len(got) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%s", len(got), len(want), b.String())
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d = %q, want %q", i, got[i], want[i])
		}
	}
	if l := tab.Legend(); !strings.Contains(l, "cmfs/cmfs@c975bd5") || !strings.Contains(l, "no target") {
		t.Errorf("legend does not explain the cmfs/cmfs@c975bd5 column: %q", l)
	}
	tab.Before = ""
	if l := tab.Legend(); strings.Contains(l, "earlier revision") {
		t.Errorf("legend without Before mentions a revision: %q", l)
	}
}

func TestOverwriteNewContent(t *testing.T) {
	s := FileSet{Dir: filepath.Join(t.TempDir(), "set"), N: 4, Workers: 2, Size: 4096}
	if _, err := s.Create(); err != nil {
		t.Fatal(err)
	}
	read := func() []string {
		t.Helper()
		var c []string
		for i := range s.N {
			b, err := os.ReadFile(s.Path(i))
			if err != nil {
				t.Fatal(err)
			}
			c = append(c, string(b))
		}
		return c
	}
	created := read()
	if _, err := s.Overwrite(); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, c := range created {
		seen[c] = true
	}
	for i, c := range read() {
		if len(c) != s.Size {
			t.Errorf("file %d: %d bytes after overwrite, want %d", i, len(c), s.Size)
		}
		if seen[c] {
			t.Errorf("file %d: overwrite wrote content already in the set", i)
		}
		seen[c] = true
	}
}

func TestTableInterval(t *testing.T) {
	r := &Row{Name: "create", Unit: OpsPerSec, Targets: []Target{
		{Base: LoopbackName, Min: 0.65},
		{Subject: IntervalName, Base: LoopbackName, Min: 0.95},
	}}
	r.Add(LoopbackName, 1000)
	r.Add(CmfsName, 700)
	r.Add(IntervalName, 900)
	missing := &Row{Name: "unlink", Unit: OpsPerSec, Targets: r.Targets}
	missing.Add(LoopbackName, 1000)
	missing.Add(CmfsName, 500)
	missing.Fail(IntervalName, os.ErrNotExist)
	tab := &Table{Impls: []string{LoopbackName, CmfsName, IntervalName}, Subject: CmfsName, Rows: []*Row{r, missing},
		Extra: []RatioColumn{{Subject: IntervalName, Base: LoopbackName}}}
	var b strings.Builder
	if err := tab.WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSpace(b.String()), "\n")
	want := []string{
		"| workload | unit | loopback | cmfs | cmfs interval | cmfs/loopback | cmfs interval/loopback | target (cmfs) |",
		"|---|---:|---:|---:|---:|---:|---:|---|",
		"| create | ops/s | 1000 | 700 | 900 | 0.70 | 0.90 | ≥ 0.65× loopback ok; cmfs interval ≥ 0.95× loopback MISS |",
		"| unlink | ops/s | 1000 | 500 | n/a | 0.50 | — | ≥ 0.65× loopback MISS; cmfs interval ≥ 0.95× loopback n/a |",
	}
	if len(got) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%s", len(got), len(want), b.String())
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d = %q, want %q", i, got[i], want[i])
		}
	}
	if l := tab.Legend(); !strings.Contains(l, "cmfs interval/loopback") {
		t.Errorf("legend does not explain the cmfs interval/loopback column: %q", l)
	}
}

func TestParseCommit(t *testing.T) {
	c, err := ParseCommit([]byte(`{"mounted":true,"commit":{"sync":"always","groups":3,"events":10,"flushes":7,"flush_p50_us":90,"flush_p99_us":400}}`))
	if err != nil || c == nil || c.Sync != "always" || c.Groups != 3 || c.Events != 10 || c.Flushes != 7 || c.FlushP99us != 400 {
		t.Errorf("ParseCommit = %+v, %v", c, err)
	}
	if c, err := ParseCommit([]byte(`{"mounted":true,"last_event_id":5}`)); c != nil || err != nil {
		t.Errorf("without a commit object: %+v, %v; want nil, nil", c, err)
	}
	if _, err := ParseCommit([]byte(`mounted: yes`)); err == nil {
		t.Error("ParseCommit of text: nil error")
	}
}

func TestOpTable(t *testing.T) {
	r := &Row{Name: "unlink", Unit: OpsPerSec}
	for _, impl := range []string{LoopbackName, CmfsName} {
		var l Latencies
		for i := 1; i <= 100; i++ {
			l.Record(time.Duration(i) * 10 * time.Microsecond)
		}
		r.Add(impl, 1000)
		r.AddLatencies(impl, &l)
	}
	r.AddCommit(CmfsName, &Commit{Flushes: 10}, &Commit{Flushes: 40}, nil, 20)
	r.AddCommit(CmfsName, &Commit{Flushes: 40}, &Commit{Flushes: 50}, nil, 20)
	r.AddCommit(IntervalName, nil, nil, nil, 20)
	r.AddCPU(CmfsName, 3*time.Millisecond, 20)
	r.AddCPU(CmfsName, 5*time.Millisecond, 20)
	r.Fail(IntervalName, os.ErrNotExist)
	untimed := &Row{Name: "seq write", Unit: MBps}
	untimed.Add(CmfsName, 100)
	tab := &OpTable{Impls: []string{LoopbackName, CmfsName, IntervalName}, Flushes: []string{CmfsName, IntervalName},
		CPU: []string{LoopbackName, CmfsName}, Rows: []*Row{untimed, r}}
	var b strings.Builder
	if err := tab.WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSpace(b.String()), "\n")
	want := []string{
		"| workload | loopback p50/p99 µs | cmfs p50/p99 µs | cmfs interval p50/p99 µs | cmfs flushes/op | cmfs interval flushes/op | loopback CPU µs/op | cmfs CPU µs/op |",
		"|---|---:|---:|---:|---:|---:|---:|---:|",
		"| unlink | 510 / 1000 | 510 / 1000 | n/a | 1.00 | — | — | 200 |",
	}
	if len(got) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%s", len(got), len(want), b.String())
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d = %q, want %q", i, got[i], want[i])
		}
	}
	notes := tab.Notes()
	if len(notes) != 1 || !strings.Contains(notes[0], IntervalName) || !strings.Contains(notes[0], `no "commit" object`) {
		t.Errorf("notes = %q, want one saying the interval column's status has no commit object", notes)
	}
}

// TestOpTableCeiling: a one-thread row gets the ops/s that loopback's
// operation followed by one flush, or by one commit, allows, and cmfs's
// share of each; rows of more threads, and rows without loopback, get
// none.
func TestOpTableCeiling(t *testing.T) {
	one := &Row{Name: "create, 1 thread", Unit: OpsPerSec, Threads: 1}
	one.Add(LoopbackName, 4000) // 250 µs an operation
	one.Add(CmfsName, 500)
	many := &Row{Name: "create, 8 threads", Unit: OpsPerSec, Threads: 8}
	many.Add(LoopbackName, 8000)
	many.Add(CmfsName, 900)
	noBase := &Row{Name: "unlink, 1 thread", Unit: OpsPerSec, Threads: 1}
	noBase.Add(CmfsName, 700)
	noBase.Fail(LoopbackName, os.ErrNotExist)
	for _, r := range []*Row{one, many, noBase} {
		var l Latencies
		l.Record(time.Millisecond)
		r.AddLatencies(CmfsName, &l)
	}
	tab := &OpTable{Impls: []string{CmfsName}, Rows: []*Row{one, many, noBase},
		Costs: &FlushCosts{Flush: 750 * time.Microsecond, Commit: 1750 * time.Microsecond}, Ceiling: CmfsName, CeilingBase: LoopbackName}
	var b strings.Builder
	if err := tab.WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSpace(b.String()), "\n")
	want := []string{
		"| workload | cmfs p50/p99 µs | ceiling ops/s (loopback + 1 flush/op) | cmfs ÷ it | ceiling ops/s (loopback + 1 commit/op) | cmfs ÷ it |",
		"|---|---:|---:|---:|---:|---:|",
		"| create, 1 thread | 1000 / 1000 | 1000 | 0.50 | 500 | 1.00 |", // 1 ÷ (250 µs + 750 µs), 1 ÷ (250 µs + 1750 µs)
		"| create, 8 threads | 1000 / 1000 | — | — | — | — |",
		"| unlink, 1 thread | 1000 / 1000 | — | — | — | — |",
	}
	if len(got) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%s", len(got), len(want), b.String())
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d = %q, want %q", i, got[i], want[i])
		}
	}
	if l := tab.Legend(); !strings.Contains(l, "750 µs") || !strings.Contains(l, "1750 µs") {
		t.Errorf("legend does not give the flush and commit measured: %q", l)
	}
	// Without costs measured, no ceiling columns.
	tab.Costs = nil
	b.Reset()
	if err := tab.WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "ceiling") {
		t.Errorf("ceiling shown without costs measured:\n%s", b.String())
	}
}

// TestFlushCost measures in a temporary directory: durations above zero,
// nothing left behind, and a refusal of no rounds.
func TestFlushCost(t *testing.T) {
	dir := t.TempDir()
	c, err := FlushCost(dir, 5)
	if err != nil || c.Flush <= 0 || c.Commit <= 0 {
		t.Fatalf("FlushCost = %+v, %v; want positive durations", c, err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("FlushCost left %d entries", len(ents))
	}
	if _, err := FlushCost(dir, 0); err == nil {
		t.Error("FlushCost of 0 rounds: no error")
	}
}

// TestProcessCPU reads this process's CPU time, which grows while it
// works.
func TestProcessCPU(t *testing.T) {
	before, err := ProcessCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for {
		after, err := ProcessCPU(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if after < before {
			t.Fatalf("CPU time went back: %v, then %v", before, after)
		}
		if after > before {
			break
		}
		for i := range 1 << 20 {
			_ = fmt.Sprint(i) // work
		}
	}
	if _, err := ProcessCPU(1 << 30); err == nil {
		t.Error("ProcessCPU of a pid that cannot exist: nil error")
	}
}

func TestFileSetLatencies(t *testing.T) {
	s := FileSet{Dir: filepath.Join(t.TempDir(), "set"), N: 12, Workers: 3, Size: 4096}
	m, err := s.Create()
	if err != nil {
		t.Fatal(err)
	}
	if m.Latencies.Count() != uint64(s.N) {
		t.Errorf("%d op times recorded, want %d", m.Latencies.Count(), s.N)
	}
	if p99 := m.Latencies.Quantile(0.99); p99 <= 0 || p99 > m.Elapsed {
		t.Errorf("p99 %v outside (0, %v]", p99, m.Elapsed)
	}
}

func TestParseFio(t *testing.T) {
	report := `note: both iodepth >= 1 and synchronous I/O engine are selected, queue depth will be capped at 1
{
  "fio version" : "fio-3.33",
  "jobs" : [
    {
      "jobname" : "randwrite",
      "error" : 0,
      "write" : { "io_bytes" : 8192000, "total_ios" : 2000, "runtime" : 500, "iops" : 4000.0 }
    }
  ]
}`
	m, err := parseFio([]byte(report))
	if err != nil {
		t.Fatal(err)
	}
	if got := OpsPerSec.Value(m); m.Ops != 2000 || got != 4000 {
		t.Errorf("parseFio: %d writes, %v ops/s; want 2000, 4000", m.Ops, got)
	}
	if _, err := parseFio([]byte(`{"jobs": [{"error": 5, "write": {"total_ios": 1, "runtime": 1}}]}`)); err == nil {
		t.Error("a job that failed parsed without error")
	}
}

// TestFioRandWrite runs fio, where it is installed, for a second on a
// small file: the count is writes, the time is what fio counted.
func TestFioRandWrite(t *testing.T) {
	if _, err := exec.LookPath("fio"); err != nil {
		t.Skip("fio is not installed")
	}
	p := filepath.Join(t.TempDir(), "f")
	const size = 8 << 20
	if _, err := SeqWrite(p, size, 1); err != nil {
		t.Fatal(err)
	}
	m, err := FioRandWrite(t.Context(), p, size, 64, time.Second, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if m.Ops < 100 || m.Elapsed < 900*time.Millisecond || m.Elapsed > 2*time.Second {
		t.Errorf("fio: %d writes in %v", m.Ops, m.Elapsed)
	}
	if fi, err := os.Stat(p); err != nil || fi.Size() != size {
		t.Errorf("after fio the file has %v bytes (%v), want %d", fi.Size(), err, size)
	}
}
