package console

import (
	"bytes"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html/template"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/courierkit/courier/cmd/courier/internal/display"
)

// funcs are the templates' helpers. Every string from Kafka or the
// database is shown through text (or body), which makes control
// characters visible; html/template then escapes it for HTML.
var funcs = template.FuncMap{
	"text":  display.Text,
	"ptext": func(s *string) string { return ptext(s) },
	"ts":    timestamp,
	"ago":   ago,
	"age":   func(d time.Duration) string { return roundDuration(d) },
	"count": thousands,
	"body":  body,
	"args":  func(a ...any) []any { return a },
	// errorPrefix is the start of an error, short enough for a filter
	// link: "error contains" matches it.
	"errorPrefix": func(s string) string { return cut(s, 200) },
	"movedTitle": func(dryRun bool) string {
		if dryRun {
			return "would move"
		}
		return "moved"
	},
}

// ptext is display.Text of *s, "" for nil.
func ptext(s *string) string {
	if s == nil {
		return ""
	}
	return display.Text(*s)
}

// timestamp formats t in UTC to the second; "" for the zero time or nil.
func timestamp(t any) string {
	switch v := t.(type) {
	case time.Time:
		if v.IsZero() {
			return ""
		}
		return v.UTC().Format("2006-01-02 15:04:05Z")
	case *time.Time:
		if v == nil {
			return ""
		}
		return timestamp(*v)
	}
	return ""
}

// ago says how long before now t was: "3m ago"; "" for the zero time.
func ago(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return roundDuration(time.Since(t)) + " ago"
}

// roundDuration shortens d for people: 950ms, 42s, 3m12s, 5h3m, 2d4h.
func roundDuration(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(time.Second).String()
	case d < time.Hour:
		return strings.TrimSuffix(d.Round(time.Second).String(), "0s")
	case d < 48*time.Hour:
		return strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
	}
	days := d / (24 * time.Hour)
	return fmt.Sprintf("%dd%dh", days, (d-days*24*time.Hour)/time.Hour)
}

// thousands writes n with thin commas: 1,234,567.
func thousands(n any) string {
	var v int64
	switch x := n.(type) {
	case int:
		v = int64(x)
	case int64:
		v = x
	case int32:
		v = int64(x)
	}
	s := strconv.FormatInt(v, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// shownBody is a payload, key or header value as a page shows it.
type shownBody struct {
	// Kind is "json" (pretty-printed), "text", "hex" (a dump of bytes
	// that are not printable UTF-8), "empty" or "null".
	Kind string
	Text string
	Size int
}

// maxShown caps the bytes of a body a page shows.
const maxShown = 256 << 10

// body renders b for a page: JSON pretty-printed, printable UTF-8 as
// text, other bytes as a hex dump; nil as null.
func body(b []byte) shownBody {
	switch {
	case b == nil:
		return shownBody{Kind: "null"}
	case len(b) == 0:
		return shownBody{Kind: "empty"}
	}
	s := shownBody{Size: len(b)}
	if len(b) > maxShown {
		b = []byte(cut(string(b), maxShown))
	}
	var pretty bytes.Buffer
	if json.Indent(&pretty, b, "", "  ") == nil && display.Printable(pretty.Bytes(), true) {
		s.Kind, s.Text = "json", pretty.String()
		return s
	}
	if display.Printable(b, true) {
		s.Kind, s.Text = "text", string(b)
		return s
	}
	if utf8.Valid(b) {
		s.Kind, s.Text = "text", display.Lines(string(b), "")
		return s
	}
	s.Kind, s.Text = "hex", hex.Dump(b)
	return s
}

// equalToken compares an anti-forgery token in constant time.
func equalToken(got, want string) bool {
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// cut returns s cut to at most n bytes, at the start of a rune when s is
// UTF-8, so that a long text stays text.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && i > n-utf8.UTFMax && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i]
}
