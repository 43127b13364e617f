package repl

import (
	"errors"
	"strings"
	"testing"

	"github.com/cmfs-project/cmfs/journal"
)

func TestFilesRoundTrip(t *testing.T) {
	names := []string{
		"sales.db/orders/dt=2024-01-01/part-0",
		"a#b/c#d",
		"100%/x%41",
		"new\nline/and\rcr",
		"with spaces/ and trailing ",
		"unicode/日本語/ünï©ødé/🎉",
		"tab\there/nul-free\x01\x7f",
		"nbsp\u00a0and\u2028sep",
		"bad-utf8-\xff\xfe",
		"#%#%",
	}
	var buf []byte
	var want []journal.File
	for i, n := range names {
		f := journal.File{Path: n, Size: int64(i * 1000), XXH64: journal.Sum([]byte(n))}
		if i%2 == 1 {
			f.CM = CMName(f)
		}
		want = append(want, f)
		line := AppendFile(nil, f)
		if strings.Count(string(line), "\n") != 1 || strings.Count(string(line), "#") != 3 {
			t.Errorf("%q encodes as %q: want one line, four fields", n, line)
		}
		buf = append(buf, line...)
	}
	got, err := ParseFiles(strings.NewReader(string(buf)))
	if err != nil {
		t.Fatal(err)
	}
	if !sameFiles(got, want) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, want)
	}
	for _, n := range names {
		if got, err := Unescape(Escape(n)); err != nil || got != n {
			t.Errorf("Unescape(Escape(%q)) = %q, %v", n, got, err)
		}
	}
	if got := Escape("plain/ascii name.parquet"); got != "plain/ascii name.parquet" {
		t.Errorf("plain name escaped: %q", got)
	}
}

func TestParseFilesRejects(t *testing.T) {
	good := "a/b#3#0123456789abcdef#"
	if _, err := ParseFiles(strings.NewReader(good + "\n")); err != nil {
		t.Fatalf("good line: %v", err)
	}
	tests := []struct{ name, input, want string }{
		{"three fields", "a/b#3#0123456789abcdef\n", "line 1"},
		{"five fields", "a/b#3#0123456789abcdef##\n", "line 1"},
		{"bad size", "a/b#x#0123456789abcdef#\n", "bad size"},
		{"negative size", "a/b#-3#0123456789abcdef#\n", "bad size"},
		{"leading zero", "a/b#03#0123456789abcdef#\n", "bad size"},
		{"short sum", "a/b#3#0123#\n", "bad xxh64"},
		{"upper sum", "a/b#3#0123456789ABCDEF#\n", "bad xxh64"},
		{"bad escape", "a/%zz#3#0123456789abcdef#\n", "bad escape"},
		{"truncated escape", "a/b%4#3#0123456789abcdef#\n", "escape"},
		{"absolute", "/etc/passwd#3#0123456789abcdef#\n", "absolute"},
		{"dotdot", "a/../../x#3#0123456789abcdef#\n", "clean relative"},
		{"empty path", "#3#0123456789abcdef#\n", "empty path"},
		{"escaped slash dotdot", "a/%2E%2E/x#3#0123456789abcdef#\n", "clean relative"},
		{"unescaped control", "a\tb#3#0123456789abcdef#\n", "unescaped"},
		{"torn last line", good + "\n" + good, "line 2: truncated"},
		{"second line mangled", good + "\nnonsense\n", "line 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseFiles(strings.NewReader(tt.input))
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("got %v, want ErrFormat", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %q, want it to say %q", err, tt.want)
			}
		})
	}
}
