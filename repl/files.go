package repl

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/cmfs-project/cmfs/internal/checksum"
	"github.com/cmfs-project/cmfs/journal"
)

// Escape percent-encodes the bytes of name that would break a line of a
// _files or _dirs listing: '%', '#', every byte of a rune that is not
// printable (newlines, controls, separators other than ' ') and every byte
// that is not valid UTF-8. Escapes are '%' and two uppercase hex digits.
func Escape(name string) string {
	i := 0
	for i < len(name) {
		r, n := utf8.DecodeRuneInString(name[i:])
		if needsEscape(r, n) {
			break
		}
		i += n
	}
	if i == len(name) {
		return name
	}
	var b strings.Builder
	b.Grow(len(name) + 8)
	b.WriteString(name[:i])
	for i < len(name) {
		r, n := utf8.DecodeRuneInString(name[i:])
		if needsEscape(r, n) {
			for j := 0; j < n; j++ {
				c := name[i+j]
				b.WriteByte('%')
				b.WriteByte(upperHex[c>>4])
				b.WriteByte(upperHex[c&15])
			}
		} else {
			b.WriteString(name[i : i+n])
		}
		i += n
	}
	return b.String()
}

const upperHex = "0123456789ABCDEF"

func needsEscape(r rune, n int) bool {
	if r == utf8.RuneError && n == 1 {
		return true
	}
	return r == '%' || r == '#' || !unicode.IsPrint(r)
}

// Unescape reverses Escape. It accepts only what Escape could have
// written: a '%' must be followed by two hex digits, and '#' and
// non-printable runes must not appear unescaped.
func Unescape(s string) (string, error) {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r != '%' && needsEscape(r, n) {
			return "", fmt.Errorf("unescaped %q at byte %d", s[i:i+n], i)
		}
		i += n
	}
	if !strings.Contains(s, "%") {
		return s, nil
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b = append(b, s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", fmt.Errorf("truncated escape at byte %d", i)
		}
		hi, ok1 := unhex(s[i+1])
		lo, ok2 := unhex(s[i+2])
		if !ok1 || !ok2 {
			return "", fmt.Errorf("bad escape %q at byte %d", s[i:i+3], i)
		}
		b = append(b, hi<<4|lo)
		i += 2
	}
	return string(b), nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// AppendFile appends f as one _files line, newline included.
func AppendFile(buf []byte, f journal.File) []byte {
	buf = append(buf, Escape(f.Path)...)
	buf = append(buf, '#')
	buf = strconv.AppendInt(buf, f.Size, 10)
	buf = append(buf, '#')
	buf = append(buf, f.XXH64...)
	buf = append(buf, '#')
	buf = append(buf, Escape(f.CM)...)
	return append(buf, '\n')
}

// ParseFile parses one _files line (without its newline).
func ParseFile(line string) (journal.File, error) {
	fields := strings.Split(line, "#")
	if len(fields) != 4 {
		return journal.File{}, fmt.Errorf("%d fields, want 4 (path#size#xxh64#cm)", len(fields))
	}
	p, err := Unescape(fields[0])
	if err != nil {
		return journal.File{}, fmt.Errorf("path: %w", err)
	}
	if err := checkRel(p); err != nil {
		return journal.File{}, err
	}
	size, err := parseSize(fields[1])
	if err != nil {
		return journal.File{}, err
	}
	if !checksum.Valid(fields[2]) {
		return journal.File{}, fmt.Errorf("bad xxh64 %q: want 16 lowercase hex digits", fields[2])
	}
	cm, err := Unescape(fields[3])
	if err != nil {
		return journal.File{}, fmt.Errorf("cm: %w", err)
	}
	return journal.File{Path: p, Size: size, XXH64: fields[2], CM: cm}, nil
}

func parseSize(s string) (int64, error) {
	if s == "" || len(s) > 19 || (len(s) > 1 && s[0] == '0') || strings.TrimLeft(s, "0123456789") != "" {
		return 0, fmt.Errorf("bad size %q", s)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("bad size %q", s)
	}
	return n, nil
}

// checkRel refuses a path that is empty, absolute, or not in clean,
// slash-separated form: no "", "." or ".." component.
func checkRel(p string) error {
	if p == "" {
		return fmt.Errorf("empty path: %w", ErrUnsafePath)
	}
	if p[0] == '/' {
		return fmt.Errorf("%q is absolute: %w", p, ErrUnsafePath)
	}
	for _, c := range strings.Split(p, "/") {
		if c == "" || c == "." || c == ".." {
			return fmt.Errorf("%q is not a clean relative path: %w", p, ErrUnsafePath)
		}
	}
	return nil
}

// scanLines calls fn for every line of r with its 1-based number. A last
// line without its newline is a torn write and an error.
func scanLines(r io.Reader, fn func(n int, line string) error) error {
	br := bufio.NewReaderSize(r, 64<<10)
	for n := 1; ; n++ {
		line, err := br.ReadString('\n')
		if err == io.EOF {
			if line != "" {
				return fmt.Errorf("line %d: truncated (no newline): %w", n, ErrFormat)
			}
			return nil
		}
		if err != nil {
			return err
		}
		if err := fn(n, line[:len(line)-1]); err != nil {
			return err
		}
	}
}

// ParseFiles reads a _files listing. An error names the line and wraps
// ErrFormat.
func ParseFiles(r io.Reader) ([]journal.File, error) {
	var out []journal.File
	err := scanLines(r, func(n int, line string) error {
		f, err := ParseFile(line)
		if err != nil {
			return fmt.Errorf("line %d %q: %v: %w", n, clip(line), err, ErrFormat)
		}
		out = append(out, f)
		return nil
	})
	return out, err
}

// ParseDirs reads a _dirs listing: one escaped path per line.
func ParseDirs(r io.Reader) ([]string, error) {
	var out []string
	err := scanLines(r, func(n int, line string) error {
		p, err := Unescape(line)
		if err == nil {
			err = checkRel(p)
		}
		if err != nil {
			return fmt.Errorf("line %d %q: %v: %w", n, clip(line), err, ErrFormat)
		}
		out = append(out, p)
		return nil
	})
	return out, err
}

// ReadFiles reads the _files listing at path; errors name the file.
func ReadFiles(path string) ([]journal.File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	files, err := ParseFiles(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return files, nil
}

// readDirs reads the _dirs listing at path; errors name the file.
func readDirs(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dirs, err := ParseDirs(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return dirs, nil
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// symlinksFile lists a BOOTSTRAP unit's symlinks.
const symlinksFile = "_symlinks"

// AppendSymlink appends one _symlinks line, newline included: the
// symlink's path and its target, both escaped, separated by '#'.
func AppendSymlink(buf []byte, p, target string) []byte {
	buf = append(buf, Escape(p)...)
	buf = append(buf, '#')
	buf = append(buf, Escape(target)...)
	return append(buf, '\n')
}

// ParseSymlinks reads a _symlinks listing into entries of kind
// EntrySymlink. An error names the line and wraps ErrFormat.
func ParseSymlinks(r io.Reader) ([]Entry, error) {
	var out []Entry
	err := scanLines(r, func(n int, line string) error {
		e, err := parseSymlink(line)
		if err != nil {
			return fmt.Errorf("line %d %q: %v: %w", n, clip(line), err, ErrFormat)
		}
		out = append(out, e)
		return nil
	})
	return out, err
}

func parseSymlink(line string) (Entry, error) {
	fields := strings.Split(line, "#")
	if len(fields) != 2 {
		return Entry{}, fmt.Errorf("%d fields, want 2 (path#target)", len(fields))
	}
	p, err := Unescape(fields[0])
	if err != nil {
		return Entry{}, fmt.Errorf("path: %w", err)
	}
	if err := checkRel(p); err != nil {
		return Entry{}, err
	}
	target, err := Unescape(fields[1])
	if err != nil {
		return Entry{}, fmt.Errorf("target: %w", err)
	}
	if target == "" || strings.IndexByte(target, 0) >= 0 {
		return Entry{}, fmt.Errorf("bad symlink target %q", target)
	}
	return Entry{Path: p, Kind: EntrySymlink, Target: target}, nil
}

// readSymlinks reads the _symlinks listing at path; errors name the file.
func readSymlinks(path string) ([]Entry, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	links, err := ParseSymlinks(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return links, nil
}
