// Package redact masks the secrets of PostgreSQL connection strings (URLs
// and key=value strings, well-formed or not) and of other credentials in
// text that is about to be printed.
//
// It finds the secrets first (Secrets), under every reading of the string
// a parser might take, and then masks every occurrence of them (String),
// so a secret is masked wherever an error message quotes it: in the
// string itself, in pgx's own parse errors, or in a value pgx echoes.
// Over-masking is preferred to a leak.
package redact

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"html"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Mask replaces every secret.
const Mask = "xxxxx"

// keyValue matches a password-like key of a key=value string or of a URL
// query, spaces around '=' allowed, and its value: single- or
// double-quoted (backslash escapes inside, the closing quote optional in
// broken input) or bare up to a space, '&' or ';'.
var keyValue = regexp.MustCompile(`(?i)(?:ssl|sslkey)?pass(?:word|phrase|wd)?\s*=\s*('(?:[^'\\]|\\.)*'?|"(?:[^"\\]|\\.)*"?|[^\s&;]*)`)

// secretKeys are the query keys, percent-decoded and in lower case, whose
// values are secrets.
var secretKeys = []string{"password", "sslpassword", "passwd", "pass", "passphrase", "sslkeypassword"}

// Secrets returns the secret values conn may hold: the password of a
// URL's userinfo, the values of password-like query parameters and of
// password-like keys of a key=value string (spaces around '=', quotes and
// escapes allowed), each also percent-decoded and unquoted. The list is
// longest first and may hold more than the real secret.
func Secrets(conn string) []string {
	var out []string
	add := func(v string) {
		for _, s := range []string{v, unescapeQuoted(v), decode(v)} {
			if s != "" && !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
	}
	for _, m := range keyValue.FindAllStringSubmatch(conn, -1) {
		v := m[1]
		add(v)
		if len(v) >= 1 && (v[0] == '\'' || v[0] == '"') {
			inner := strings.TrimSuffix(v[1:], v[:1])
			add(inner)
			// A parser that splits on spaces (as pgx's masking does for an
			// unterminated quote) quotes the words alone.
			for _, word := range strings.Fields(inner) {
				add(word)
			}
		}
	}
	// Userinfo: between the scheme (or the start) and an '@', after the
	// first ':'. Both the first and the last '@' are tried, since a
	// password may hold an unencoded '@' or '/'.
	rest := conn
	if i := strings.Index(rest, "://"); i >= 0 {
		rest = rest[i+3:]
	}
	for _, at := range []int{strings.Index(rest, "@"), strings.LastIndex(rest, "@")} {
		if at < 0 {
			continue
		}
		if _, pw, ok := strings.Cut(rest[:at], ":"); ok {
			add(pw)
		}
	}
	// Query parameters whose name is percent-encoded (pass%77ord).
	if _, query, ok := strings.Cut(conn, "?"); ok {
		for pair := range strings.SplitSeq(query, "&") {
			k, v, _ := strings.Cut(pair, "=")
			if slices.Contains(secretKeys, strings.ToLower(strings.TrimSpace(decode(k)))) {
				add(v)
			}
		}
	}
	slices.SortFunc(out, func(a, b string) int { return len(b) - len(a) })
	return out
}

func decode(s string) string {
	if d, err := url.PathUnescape(s); err == nil {
		return d
	}
	return s
}

// unescapeQuoted removes the backslash escapes of a quoted key=value
// value.
func unescapeQuoted(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	escaped := false
	for _, r := range s {
		if !escaped && r == '\\' {
			escaped = true
			continue
		}
		escaped = false
		b.WriteRune(r)
	}
	return b.String()
}

// String returns s with every occurrence of each secret replaced by Mask,
// longest first. Empty secrets are ignored.
func String(s string, secrets []string) string {
	list := slices.Clone(secrets)
	slices.SortFunc(list, func(a, b string) int { return len(b) - len(a) })
	for _, secret := range list {
		if secret != "" {
			s = strings.ReplaceAll(s, secret, Mask)
		}
	}
	return s
}

// minHeaderSecret is the shortest header value, or word of one, that
// HeaderSecrets counts as a secret: a shorter one ("prod", "1") is too
// common to mask wherever it appears, and too short to be a credential.
// minPassword is the shortest password of Basic credentials it counts.
const (
	minHeaderSecret = 6
	minPassword     = 3
)

// HeaderSecrets returns the forms in which a server sent a header may echo
// its value (a collector that answers 401 quoting the request, say), for
// String: the value, each of its words (the token of "Bearer <token>",
// but not the scheme Bearer or Basic), for Basic credentials the
// user:password their base64 decodes to and the password, and each of
// these as JSON (with and without HTML escapes), a Go string literal,
// percent-encoding (path and query) and HTML would write it. Values and
// words shorter than 6 bytes are left out, but a password of 3 or more.
// An echo in another encoding is not masked.
func HeaderSecrets(value string) []string {
	var plain []string
	add := func(min int, s string) {
		if len(s) >= min && !slices.Contains(plain, s) {
			plain = append(plain, s)
		}
	}
	value = strings.TrimSpace(value)
	add(minHeaderSecret, value)
	words := strings.Fields(value)
	for i, w := range words {
		if i > 0 || len(words) == 1 || !strings.EqualFold(w, "Bearer") && !strings.EqualFold(w, "Basic") {
			add(minHeaderSecret, w)
		}
	}
	if len(words) == 2 && strings.EqualFold(words[0], "Basic") {
		if cred, err := base64.StdEncoding.DecodeString(words[1]); err == nil {
			add(minPassword, string(cred))
			if _, pw, ok := strings.Cut(string(cred), ":"); ok {
				add(minPassword, pw)
			}
		}
	}
	out := slices.Clone(plain)
	for _, s := range plain {
		for _, form := range echoForms(s) {
			if !slices.Contains(out, form) {
				out = append(out, form)
			}
		}
	}
	slices.SortFunc(out, func(a, b string) int { return len(b) - len(a) })
	return out
}

// echoForms returns s as JSON strings (HTML-escaped or not), a Go string
// literal, percent-encoding and HTML hold it, without the quotes.
func echoForms(s string) []string {
	unquote := func(q string) string { return q[1 : len(q)-1] }
	forms := []string{url.PathEscape(s), url.QueryEscape(s), html.EscapeString(s), unquote(strconv.Quote(s))}
	for _, escapeHTML := range []bool{true, false} {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(escapeHTML)
		_ = enc.Encode(s) // a string always encodes
		forms = append(forms, unquote(strings.TrimSuffix(b.String(), "\n")))
	}
	return forms
}

// ConnString returns conn with its secrets masked, for messages that name
// the connection string.
func ConnString(conn string) string { return String(conn, Secrets(conn)) }
