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
