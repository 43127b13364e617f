package cli

import "testing"

func TestParseBytes(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0", 0, true},
		{"1048576", 1 << 20, true},
		{"64MiB", 64 << 20, true},
		{"64M", 64 << 20, true},
		{"5GiB", 5 << 30, true},
		{"5G", 5 << 30, true},
		{"512K", 512 << 10, true},
		{"512k", 512 << 10, true},
		{"2TiB", 2 << 40, true},
		{"100MB", 100_000_000, true},
		{"1kB", 1000, true},
		{"1.5G", 3 << 29, true},
		{"10B", 10, true},
		{" 8 MiB ", 8 << 20, true},
		{"9223372036854775807", 1<<63 - 1, false}, // float64 rounds it up to 2^63
		{"", 0, false},
		{"MiB", 0, false},
		{"lots", 0, false},
		{"-1", 0, false},
		{"-1MiB", 0, false},
		{"1PiB", 0, false},
		{"NaN", 0, false},
		{"Inf", 0, false},
		{"99999999TiB", 0, false},
		{"5 GiB/s", 0, false},
	} {
		got, err := ParseBytes(tc.in)
		if tc.ok && (err != nil || got != tc.want) {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
		if !tc.ok && err == nil {
			t.Errorf("ParseBytes(%q) = %d, want an error", tc.in, got)
		}
	}
}

func TestByteRate(t *testing.T) {
	for in, want := range map[string]int64{"1048576": 1 << 20, "64MiB/s": 64 << 20, "64MiB": 64 << 20, "10MB/s": 10_000_000} {
		var r ByteRate
		if err := r.Set(in); err != nil || int64(r) != want {
			t.Errorf("Set(%q): %d, %v; want %d", in, r, err, want)
		}
	}
	var r ByteRate
	if err := r.Set("fast"); err == nil {
		t.Error("Set(fast): no error")
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 1000: "1000", 1024: "1KiB", 1536 << 10: "1536KiB", 5 << 30: "5GiB", 3 << 40: "3TiB", 64<<20 + 1: "67108865"} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
		if back, err := ParseBytes(FormatBytes(n)); err != nil || back != n {
			t.Errorf("ParseBytes(FormatBytes(%d)) = %d, %v", n, back, err)
		}
	}
}

func TestBytes(t *testing.T) {
	tests := []struct {
		n            int64
		short, exact string
	}{
		{0, "0 B", "0 bytes"},
		{1023, "1023 B", "1023 bytes"},
		{1024, "1.0 KiB", "1024 bytes (1.0 KiB)"},
		{1536 << 10, "1.5 MiB", "1572864 bytes (1.5 MiB)"},
		{5 << 30, "5.0 GiB", "5368709120 bytes (5.0 GiB)"},
	}
	for _, tt := range tests {
		if got := ShortBytes(tt.n); got != tt.short {
			t.Errorf("ShortBytes(%d) = %q, want %q", tt.n, got, tt.short)
		}
		if got := Bytes(tt.n); got != tt.exact {
			t.Errorf("Bytes(%d) = %q, want %q", tt.n, got, tt.exact)
		}
	}
}
