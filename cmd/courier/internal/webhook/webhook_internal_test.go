package webhook

import (
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// TestRetryAfterIsHonouredWithinBounds: seconds and HTTP dates are read,
// capped at MaxRetryAfter; a past, missing or unreadable one is 0 (the
// backoff then decides).
func TestRetryAfterIsHonouredWithinBounds(t *testing.T) {
	now := time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)
	for v, want := range map[string]time.Duration{
		"":      0,
		"2":     2 * time.Second,
		" 7 ":   7 * time.Second,
		"0":     0,
		"-5":    0,
		"86400": MaxRetryAfter,
		"soon":  0,
		now.Add(30 * time.Second).Format(http.TimeFormat): 30 * time.Second,
		now.Add(time.Hour).Format(http.TimeFormat):        MaxRetryAfter,
		now.Add(-time.Hour).Format(http.TimeFormat):       0,
	} {
		if got := parseRetryAfter(v, now); got != want {
			t.Errorf("Retry-After %q: %v, want %v", v, got, want)
		}
	}
}

// TestCleanReplacesControlsAndCutsOnARune: the result is valid UTF-8
// without control characters and within the limit, cut between runes.
func TestCleanReplacesControlsAndCutsOnARune(t *testing.T) {
	if got := clean("a\tb\nc\x1bd\x7fe\u009bf\xffg", 100); got != "a b c\uFFFDd\uFFFDe\uFFFDf\uFFFDg" {
		t.Errorf("clean: %q", got)
	}
	for limit := 4; limit < 20; limit++ {
		got := clean(strings.Repeat("日本", 10), limit)
		if len(got) > limit || !utf8.ValidString(got) || !strings.HasSuffix(got, "…") {
			t.Errorf("clean to %d bytes: %q (%d bytes)", limit, got, len(got))
		}
	}
	if got := clean("short", 5); got != "short" {
		t.Errorf("clean at the limit: %q", got)
	}
}
