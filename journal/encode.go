package journal

import (
	"strconv"
	"time"
	"unicode/utf8"
)

// The payload is the JSON that encoding/json makes of an Event, byte for
// byte (a test holds it to that), written by hand because the writer
// goroutine encodes every event of a commit while callers wait. It is
// built in two parts: the tail (type to files) by the caller of Append,
// outside the writer, and the head (id, time) by the writer once it has
// assigned them.

// appendHead appends `{"id":N,"time":"..."` to buf.
func appendHead(buf []byte, id uint64, t time.Time) ([]byte, error) {
	buf = append(buf, `{"id":`...)
	buf = strconv.AppendUint(buf, id, 10)
	buf = append(buf, `,"time":"`...)
	buf, err := t.AppendText(buf)
	return append(buf, '"'), err
}

// appendTail appends the fields after time, and the closing brace.
func appendTail(buf []byte, e *Event) []byte {
	buf = appendField(buf, `,"type":`, string(e.Type))
	buf = appendField(buf, `,"path":`, e.Path)
	if e.NewPath != "" {
		buf = appendField(buf, `,"new_path":`, e.NewPath)
	}
	buf = appendField(buf, `,"db":`, e.DB)
	buf = appendField(buf, `,"table":`, e.Table)
	buf = appendField(buf, `,"partition":`, e.Partition)
	if e.Target != "" {
		buf = appendField(buf, `,"target":`, e.Target)
	}
	if e.Files == nil {
		return append(buf, `,"files":null}`...)
	}
	buf = append(buf, `,"files":[`...)
	for i := range e.Files {
		f := &e.Files[i]
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = appendField(buf, `{"path":`, f.Path)
		buf = append(buf, `,"size":`...)
		buf = strconv.AppendInt(buf, f.Size, 10)
		buf = appendField(buf, `,"xxh64":`, f.XXH64)
		buf = appendField(buf, `,"cm":`, f.CM)
		buf = append(buf, '}')
	}
	return append(buf, "]}"...)
}

// appendJSON appends the JSON encoding of e to buf.
func appendJSON(buf []byte, e *Event) ([]byte, error) {
	buf, err := appendHead(buf, e.ID, e.Time)
	return appendTail(buf, e), err
}

func appendField(buf []byte, name, s string) []byte {
	return appendString(append(buf, name...), s)
}

const hex = "0123456789abcdef"

// appendString appends s as a JSON string, escaped as encoding/json does
// (HTML-safe; invalid UTF-8 becomes U+FFFD).
func appendString(buf []byte, s string) []byte {
	buf = append(buf, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			buf = append(buf, s[start:i]...)
			switch c {
			case '"', '\\':
				buf = append(buf, '\\', c)
			case '\b':
				buf = append(buf, `\b`...)
			case '\f':
				buf = append(buf, `\f`...)
			case '\n':
				buf = append(buf, `\n`...)
			case '\r':
				buf = append(buf, `\r`...)
			case '\t':
				buf = append(buf, `\t`...)
			default:
				buf = append(buf, `\u00`...)
				buf = append(buf, hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			buf = append(buf, s[start:i]...)
			buf = append(buf, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			buf = append(buf, s[start:i]...)
			buf = append(buf, `\u202`...)
			buf = append(buf, hex[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	buf = append(buf, s[start:]...)
	return append(buf, '"')
}
