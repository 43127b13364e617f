package main

import (
	"slices"
	"strings"
	"testing"
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
