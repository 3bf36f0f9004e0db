// Package display renders what courier reads from Kafka and PostgreSQL for
// people, in a terminal or a web page, and parses the times people type.
//
// Every string shown that was read from outside goes through Text (or
// Lines): its output holds no control character (C0, DEL, C1), no other
// rune strconv.IsPrint refuses (such as U+202E, which reverses text) and no
// byte that is not UTF-8, so a record cannot move a terminal's cursor,
// retitle its window or hide text. It is unambiguous: text that needs no
// escape and holds no backslash is shown as is; any other text is shown as
// the inside of a Go string literal (strconv.Quote without its quotes), so
// a backslash always starts an escape and strconv.Unquote gets the exact
// bytes back. A web page escapes the result for HTML on top (html/template
// does). Errors quote what was typed with %q and are escaped once, where
// they are shown.
package display

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

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

// Text returns s safe to show: s itself when it needs no escape, else
// strconv.Quote(s) without its enclosing quotes.
func Text(s string) string {
	if !needsEscape(s) {
		return s
	}
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
}

// Lines returns s safe to show with its line breaks and tabs kept: each
// line is escaped as Text does; lines after the first are indented by
// indent.
func Lines(s, indent string) string {
	lines := strings.Split(s, "\n")
	for i, line := range lines {
		parts := strings.Split(line, "\t")
		for j, p := range parts {
			parts[j] = Text(p)
		}
		lines[i] = strings.Join(parts, "\t")
	}
	return strings.Join(lines, "\n"+indent)
}

// Printable reports whether b can be shown as is, unescaped: UTF-8 with
// only printable runes (and tabs and line feeds when multiline).
func Printable(b []byte, multiline bool) bool {
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

// ParseTime parses an RFC 3339 time or a duration before now (Go syntax,
// plus d for whole days, e.g. 90m, 2h, 7d); empty is the zero time. what
// names the field in the error.
func ParseTime(what, value string, now time.Time) (time.Time, error) {
	if value == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, value); err == nil {
		return t, nil
	}
	if ago, err := ParseDuration(value); err == nil && ago >= 0 {
		return now.Add(-ago), nil
	}
	return time.Time{}, fmt.Errorf("%s %q: use an RFC 3339 time (2026-01-16T09:00:00Z) or a duration ago (90m, 2h, 7d)", what, value)
}

// ParseTimeRange parses since and until (see ParseTime) and refuses a
// range no time falls in. sinceName and untilName name the fields in
// errors.
func ParseTimeRange(sinceName, sinceText, untilName, untilText string, now time.Time) (since, until time.Time, err error) {
	if since, err = ParseTime(sinceName, sinceText, now); err != nil {
		return since, until, err
	}
	if until, err = ParseTime(untilName, untilText, now); err != nil {
		return since, until, err
	}
	if !since.IsZero() && !until.IsZero() && !until.After(since) {
		return since, until, fmt.Errorf("%s %q is not after %s %q, so nothing matches", untilName, untilText, sinceName, sinceText)
	}
	return since, until, nil
}

// ParseDuration is time.ParseDuration that also takes whole days ("7d").
func ParseDuration(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil {
			return 0, err
		}
		if n < 0 || n > 100*365 {
			return 0, fmt.Errorf("%d days is out of range", n)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	return time.ParseDuration(s)
}
