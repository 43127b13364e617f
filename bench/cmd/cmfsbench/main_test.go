package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/cmfs-project/cmfs/bench"
)

func TestWithColumn(t *testing.T) {
	const before = "cmfs@c975bd5"
	tests := []struct {
		name  string
		impls []string
		want  []string
	}{
		{"before cmfs", []string{"native", "loopback", "passthrough_ll", "cmfs"}, []string{"native", "loopback", "passthrough_ll", before, "cmfs"}},
		{"cmfs first", []string{"cmfs", "native"}, []string{before, "cmfs", "native"}},
		{"no cmfs", []string{"native"}, []string{"native", before}},
		{"already there", []string{"native", before, "cmfs"}, []string{"native", before, "cmfs"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := slices.Clone(tt.impls)
			got := withColumn(in, before)
			if !slices.Equal(got, tt.want) {
				t.Errorf("withColumn(%v) = %v, want %v", tt.impls, got, tt.want)
			}
			if !slices.Equal(in, tt.impls) {
				t.Errorf("withColumn changed its argument to %v", in)
			}
		})
	}
}

func TestParseBase(t *testing.T) {
	opts, err := parseFlags([]string{"-quick", "-impls", "native,cmfs", "-base", "c975bd5"})
	if err != nil {
		t.Fatal(err)
	}
	if opts.base != "c975bd5" || !slices.Equal(opts.impls, []string{"native", "cmfs"}) {
		t.Errorf("base %q, impls %v; want c975bd5, [native cmfs] (the column is added once the revision resolves)", opts.base, opts.impls)
	}
	if _, err := parseFlags([]string{"-impls", "native,cmfs@c975bd5"}); err == nil {
		t.Error("-impls cmfs@REV: nil error, want unknown implementation (-base adds that column)")
	}
}

// TestParseSmallFS: the small-file rows run on fresh ext4s unless -small-fs
// dir says otherwise; anything else is refused.
func TestParseSmallFS(t *testing.T) {
	for _, tt := range []struct {
		args   []string
		onDir  bool
		refuse bool
	}{
		{nil, false, false},
		{[]string{"-small-fs", "ext4"}, false, false},
		{[]string{"-small-fs", "dir"}, true, false},
		{[]string{"-small-fs", "xfs"}, false, true},
	} {
		opts, err := parseFlags(tt.args)
		if tt.refuse {
			if err == nil || !strings.Contains(err.Error(), "-small-fs") {
				t.Errorf("%v: error %v, want one naming -small-fs", tt.args, err)
			}
			continue
		}
		if err != nil || opts.smallOnDir != tt.onDir {
			t.Errorf("%v: smallOnDir %v, error %v; want %v, nil", tt.args, opts.smallOnDir, err, tt.onDir)
		}
	}
}

// TestFitRoom: a run that would fill the disk is refused before it starts,
// unless fewer large-file runs (down to minDataReps, when -data-reps was
// not given) make it fit; then the report says so.
func TestFitRoom(t *testing.T) {
	const gib = 1 << 30
	opts := func(args ...string) options {
		t.Helper()
		o, err := parseFlags(append([]string{"-impls", "native,cmfs"}, args...))
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	// 1 GiB files, 7 data runs and 3 others: native 7 files, cmfs 7 files
	// and 2*7 + 2*3 originals (34 GiB); the small rows 2 × 1.03 GiB; the
	// XFS image 5 GiB.
	o := opts()
	if note, err := o.fitRoom(1000 * gib); note != "" || err != nil || o.cfg.DataReps != 7 {
		t.Errorf("plenty of room: note %q, err %v, %d data runs; want none, nil, 7", note, err, o.cfg.DataReps)
	}
	o = opts()
	note, err := o.fitRoom(36 * gib)
	if err != nil || o.cfg.DataReps != 5 || !strings.Contains(note, "5 times, not 7") {
		t.Errorf("room for 5 runs: note %q, err %v, %d data runs; want a note, nil, 5", note, err, o.cfg.DataReps)
	}
	o = opts()
	if _, err := o.fitRoom(10 * gib); err == nil || !strings.Contains(err.Error(), "need about") || strings.Contains(err.Error(), "\n") {
		t.Errorf("no room even for %d runs: err %v, want one line saying what is needed", minDataReps, err)
	}
	o = opts("-data-reps", "7")
	if _, err := o.fitRoom(36 * gib); err == nil || o.cfg.DataReps != 7 {
		t.Errorf("-data-reps 7 given, room for 5: err %v, %d runs; want a refusal, 7 untouched", err, o.cfg.DataReps)
	}
	o = opts("-only", "unlink")
	if note, err := o.fitRoom(10 * gib); note != "" || err != nil {
		t.Errorf("small rows only, 10 GiB free: note %q, err %v; want neither", note, err)
	}
}

// TestPickNeeds: a row picked alone that uses an earlier row's files
// brings that row along, and nothing else.
func TestPickNeeds(t *testing.T) {
	names := func(only string) []string {
		t.Helper()
		o, err := parseFlags([]string{"-impls", "native,cmfs", "-only", only})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, w := range o.pick(bench.SmallWorkloads(o.cfg)) {
			got = append(got, w.Name)
		}
		return got
	}
	for _, c := range []struct{ only, want string }{
		{"overwrite with > .*, 1 thread", "create+write+close 10k × 4 KiB, 1 thread|overwrite with > 10k × 4 KiB, 1 thread"},
		{"unlink 10k, 8 threads", "create+write+close 10k × 4 KiB, 8 threads|unlink 10k, 8 threads"},
		{"64 threads", "create+write+close 10k × 4 KiB, 64 threads"},
		{"lstat 10k", "create+write+close 10k × 4 KiB, 1 thread|lstat 10k (cold)"},
	} {
		if got := strings.Join(names(c.only), "|"); got != c.want {
			t.Errorf("-only %q runs %q, want %q", c.only, got, c.want)
		}
	}
}
