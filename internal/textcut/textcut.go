// Package textcut cuts text read from outside (a header, a key, a broker's
// error) to a size that logs, headers and span attributes can hold: valid
// UTF-8, at most a number of bytes, cut on a rune boundary.
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
