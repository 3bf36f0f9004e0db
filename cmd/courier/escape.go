package main

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// Every string the CLI prints that it read from Kafka or PostgreSQL (or
// that an error quotes from them) goes through termText, termLines or
// writeJSON, so that a record cannot move the cursor, retitle the window
// or hide text behind escape sequences.
//
// termText's output holds no control character (C0, DEL, C1), no other
// rune strconv.IsPrint refuses (such as U+202E, which reverses text) and
// no byte that is not UTF-8. It is unambiguous: text that needs no escape
// and holds no backslash is printed as is; any other text is printed as
// the inside of a Go string literal (strconv.Quote without its quotes), so
// a backslash in the output always starts an escape and strconv.Unquote gets
// the exact bytes back.

// needsEscape reports whether s must be quoted to be shown as is: it holds
// a byte that is not UTF-8, a rune strconv.IsPrint refuses (ASCII space
// aside), or a backslash (which would read as the start of an escape).
func needsEscape(s string) bool {
	for _, r := range s {
		if r == utf8.RuneError || r == '\\' || !strconv.IsPrint(r) {
			// RuneError is also a genuine U+FFFD, which strconv.Quote keeps;
			// escaping it costs nothing and keeps the rule simple.
			return true
		}
	}
	return false
}

// termText returns s safe for a terminal: s itself when needsEscape is
// false, else strconv.Quote(s) without its enclosing quotes.
func termText(s string) string {
	if !needsEscape(s) {
		return s
	}
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
}

// termLines returns s safe for a terminal with its line breaks and tabs
// kept: each line is escaped as termText does; lines after the first are
// indented by indent.
func termLines(s, indent string) string {
	lines := strings.Split(s, "\n")
	for i, line := range lines {
		parts := strings.Split(line, "\t")
		for j, p := range parts {
			parts[j] = termText(p)
		}
		lines[i] = strings.Join(parts, "\t")
	}
	return strings.Join(lines, "\n"+indent)
}

// printable reports whether b can be shown as is, unescaped: UTF-8 with
// only printable runes (and tabs and line feeds when multiline). Callers
// show other bytes in base64.
func printable(b []byte, multiline bool) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, r := range string(b) {
		if multiline && (r == '\n' || r == '\t') {
			continue
		}
		if !strconv.IsPrint(r) {
			return false
		}
	}
	return true
}

// escapeJSONText rewrites, in JSON that encoding/json wrote, every rune
// it leaves raw that a terminal may act on (DEL, the C1 controls and the
// other runes strconv.IsPrint refuses) as a \uXXXX escape: the JSON
// decodes to the same value. encoding/json escapes the C0 controls itself
// and replaces bytes that are not UTF-8 with U+FFFD.
func escapeJSONText(b []byte) []byte {
	clean := true
	for _, c := range b {
		if c >= 0x7f {
			clean = false
			break
		}
	}
	if clean {
		return b
	}
	var out bytes.Buffer
	out.Grow(len(b) + 16)
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		switch {
		case r == 0x7f || r >= 0x80 && r != utf8.RuneError && !strconv.IsPrint(r) && r != ' ':
			if r > 0xffff {
				r1, r2 := utf16.EncodeRune(r)
				fmt.Fprintf(&out, `\u%04x\u%04x`, r1, r2)
			} else {
				fmt.Fprintf(&out, `\u%04x`, r)
			}
		default:
			out.Write(b[:size])
		}
		b = b[size:]
	}
	return out.Bytes()
}

// jsonTextWriter passes each write, one JSON document or more (a slog
// JSON record), through escapeJSONText.
type jsonTextWriter struct{ w io.Writer }

func (j jsonTextWriter) Write(p []byte) (int, error) {
	if _, err := j.w.Write(escapeJSONText(p)); err != nil {
		return 0, err
	}
	return len(p), nil
}
