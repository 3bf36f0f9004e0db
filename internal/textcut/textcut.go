// Package textcut cuts text read from outside (a header, a key, a broker's
// error) to a size that logs, headers and span attributes can hold: valid
// UTF-8, at most a number of bytes, cut on a rune boundary; Line also puts
// it on one line.
package textcut

import (
	"strings"
	"unicode/utf8"
)

// Cut returns s with its invalid UTF-8 replaced by U+FFFD and, when that is
// longer than limit bytes, cut on a rune boundary so that it and marker
// (which ends it, to say it was cut) fit in limit; a marker longer than
// limit is left out.
func Cut(s string, limit int, marker string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= limit {
		return s
	}
	if len(marker) > limit {
		marker = ""
	}
	cut := limit - len(marker)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + marker
}

// Line returns s on one line, cut as Cut cuts it with the marker "…": its
// tabs and line breaks as spaces, and each other rune unsafe reports (a
// control character, say) as U+FFFD, as is invalid UTF-8.
func Line(s string, limit int, unsafe func(rune) bool) string {
	s = strings.Map(func(r rune) rune {
		switch {
		case r == '\t' || r == '\n' || r == '\r':
			return ' '
		case unsafe(r):
			return '\uFFFD'
		}
		return r
	}, s) // invalid UTF-8 becomes U+FFFD too
	return Cut(s, limit, "…")
}
