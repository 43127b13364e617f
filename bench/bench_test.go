package bench

import (
	"os"
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
		}{{"create", s.Create}, {"stat", s.Stat}, {"unlink", s.Unlink}} {
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

func TestUnescapeMountinfo(t *testing.T) {
	if got := unescapeMountinfo(`/tmp/a\040b`); got != "/tmp/a b" {
		t.Errorf("got %q, want %q", got, "/tmp/a b")
	}
	line := `36 35 0:42 / /mnt/x\040y rw,nosuid - fuse.loopbackfs /src rw`
	point, fstype, ok := parseMountinfo(line)
	if !ok || point != "/mnt/x y" || fstype != "fuse.loopbackfs" {
		t.Errorf("parseMountinfo = %q, %q, %v", point, fstype, ok)
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
