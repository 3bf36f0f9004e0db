package textcut_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/courierkit/courier/internal/textcut"
)

// TestCut: the result is valid UTF-8 of at most limit bytes, ends in the
// marker only when cut, and keeps as much of s as fits.
func TestCut(t *testing.T) {
	for _, tc := range []struct {
		s, marker string
		limit     int
		want      string
	}{
		{"short", "…", 10, "short"},
		{strings.Repeat("é", 10), "…", 10, "ééé…"},
		{strings.Repeat("a", 20), "", 5, "aaaaa"},
		{"a\xffb", "…", 10, "a\uFFFDb"},
		{"abcdef", "… (truncated)", 4, "abcd"},
	} {
		got := textcut.Cut(tc.s, tc.limit, tc.marker)
		if got != tc.want || len(got) > tc.limit || !utf8.ValidString(got) {
			t.Errorf("Cut(%q, %d, %q) = %q, want %q", tc.s, tc.limit, tc.marker, got, tc.want)
		}
	}
}

// TestLine: tabs and line breaks become spaces, the runes unsafe names
// and invalid UTF-8 become U+FFFD, the rest stays, cut to the limit.
func TestLine(t *testing.T) {
	control := func(r rune) bool { return r < ' ' || r == 0x7f }
	for _, tc := range []struct {
		s     string
		limit int
		want  string
	}{
		{"a\tb\r\nc", 20, "a b  c"},
		{"red \x1b[31m\xff", 20, "red \uFFFD[31m\uFFFD"},
		{"bidi \u202e stays", 20, "bidi \u202e stays"},
		{strings.Repeat("x", 30), 10, strings.Repeat("x", 7) + "…"},
	} {
		if got := textcut.Line(tc.s, tc.limit, control); got != tc.want {
			t.Errorf("Line(%q, %d) = %q, want %q", tc.s, tc.limit, got, tc.want)
		}
	}
}
