package cli

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// sizeUnits are the suffixes ParseBytes knows, longest first so that
// "MiB" is not read as "B" after a bad number. K, M, G, T and their -iB
// forms are binary (1024); kB, MB, GB, TB decimal (1000).
var sizeUnits = []struct {
	suffix string
	mult   float64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"kB", 1e3}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"K", 1 << 10}, {"k", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40},
	{"B", 1},
}

// ParseBytes reads a byte count: a number ("1048576") or a number with a
// unit: "64MiB", "5GiB", "1.5G", "512K" (binary: K, M, G, T, KiB ... TiB)
// or "100MB" (decimal: kB, MB, GB, TB). A fraction is rounded down to
// whole bytes.
func ParseBytes(s string) (int64, error) {
	n, err := parseBytes(s)
	if err != nil {
		return 0, fmt.Errorf("size %q: %w", s, err)
	}
	return n, nil
}

func parseBytes(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := 1.0
	for _, u := range sizeUnits {
		if num, ok := strings.CutSuffix(t, u.suffix); ok {
			t, mult = strings.TrimSpace(num), u.mult
			break
		}
	}
	f, err := strconv.ParseFloat(t, 64)
	switch {
	case err != nil || math.IsNaN(f) || math.IsInf(f, 0):
		return 0, errors.New("want a number of bytes, or one with a unit such as 64MiB, 5GiB or 100MB")
	case f < 0:
		return 0, errors.New("negative")
	case f*mult >= math.MaxInt64:
		return 0, errors.New("too large")
	}
	if n, err := strconv.ParseInt(t, 10, 64); err == nil {
		return n * int64(mult), nil // exact, beyond float64's 53 bits
	}
	return int64(f * mult), nil
}

// ByteSize is a flag value (pflag.Value) of a byte count in ParseBytes's
// notation; it prints in the largest binary unit that holds it exactly
// ("5GiB", "1536KiB", "1000").
type ByteSize int64

func (b *ByteSize) String() string { return FormatBytes(int64(*b)) }

// FormatBytes writes n as ParseBytes reads it, in the largest binary unit
// that holds it exactly.
func FormatBytes(n int64) string {
	if n == 0 {
		return "0"
	}
	for _, u := range []struct {
		suffix string
		size   int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

func (b *ByteSize) Set(s string) error {
	n, err := parseBytes(s)
	*b = ByteSize(n)
	return err
}

func (b *ByteSize) Type() string { return "size" }

// ByteRate is a flag value of a rate in bytes per second: a ParseBytes
// size, optionally followed by "/s" ("64MiB/s").
type ByteRate int64

func (r *ByteRate) String() string {
	if *r == 0 {
		return "0"
	}
	return FormatBytes(int64(*r)) + "/s"
}

func (r *ByteRate) Set(s string) error {
	n, err := parseBytes(strings.TrimSuffix(strings.TrimSpace(s), "/s"))
	if err != nil && !strings.HasPrefix(err.Error(), "want") {
		return err // negative, too large
	}
	if err != nil {
		return errors.New("want bytes per second, such as 100MiB/s or 1048576")
	}
	*r = ByteRate(n)
	return nil
}

func (r *ByteRate) Type() string { return "rate" }

// ShortBytes prints a byte count in binary units ("1.5 MiB"), below 1 KiB
// in bytes ("512 B"): for progress lines, where Bytes is too long.
func ShortBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
