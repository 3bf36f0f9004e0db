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

// space is what libpq (isspace) and pgx take for a space in a key=value
// string.
const space = " \t\n\v\f\r"

// secretKey matches a key whose value is a secret, in a key=value string
// or a URL's query, with the spaces libpq allows around its '=': libpq's
// secret keys (password, sslpassword, oauth_client_secret), of which pgx
// reads the first two, and spellings other programs use.
var secretKey = regexp.MustCompile(`(?i)(?:(?:ssl|sslkey)?pass(?:word|phrase|wd)?|oauth_client_secret)[` + space + `]*=[` + space + `]*`)

// secretKeys are the query keys, percent-decoded and in lower case, whose
// values are secrets.
var secretKeys = []string{"password", "sslpassword", "oauth_client_secret", "passwd", "pass", "passphrase", "sslkeypassword"}

// scheme is the start of a URL: pgx reads a string that starts
// postgres:// or postgresql:// as a URL, and every other one as key=value
// pairs.
var scheme = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*://`)

// Secrets returns the secret values conn may hold: the password of a
// URL's userinfo, the values of password-like query parameters and of
// password-like keys of a key=value string. A key=value value is read as
// libpq and pgx read it (see readValue); so is each word after it that is
// no key=value pair, which a space the writer forgot to escape pushes out
// of the value, and which pgx's error then quotes. A query value runs to
// the next '&', with the pieces after it that hold no '=' (an unencoded
// '&'). Each value is listed as written, unescaped and percent-decoded,
// Go-quoted (%q), and word by word. The list is longest first and may
// hold more than the real secret.
func Secrets(conn string) []string {
	var out []string
	put := func(s string) {
		if s != "" && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	add := func(values ...string) {
		for _, v := range values {
			for _, s := range []string{v, decode(v)} {
				for _, form := range append(strings.Fields(s), s) {
					put(form)
					q := strconv.Quote(form)
					put(q[1 : len(q)-1])
				}
			}
		}
	}
	isURL := scheme.MatchString(conn)
	for _, at := range secretKey.FindAllStringIndex(conn, -1) {
		rest := conn[at[1]:]
		if isURL {
			for i, piece := range strings.Split(rest, "&") {
				if i > 0 && strings.Contains(piece, "=") {
					break
				}
				add(piece)
			}
			continue
		}
		if inner, ok := strings.CutPrefix(rest, `"`); ok { // other parsers' double quotes
			inner, _, _ = strings.Cut(inner, `"`)
			add(inner)
		}
		for i := 0; rest != ""; i++ {
			var raw, value string
			raw, value, rest = readValue(rest)
			if i > 0 && strings.Contains(raw, "=") {
				break
			}
			add(raw, value)
			rest = strings.TrimLeft(rest, space)
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

// readValue reads the key=value value s starts with as pgx
// (parseKeywordValueSettings) and libpq (conninfo_parse) read it, and
// returns its raw text, the value and what follows: a quoted value
// ('...') runs to the closing quote (to the end of s in broken input,
// which pgx refuses), an unquoted one to the first space; in both a
// backslash is dropped and the byte after it taken as it is (a space or
// a quote too), and a trailing backslash is dropped.
func readValue(s string) (raw, value, rest string) {
	var b strings.Builder
	quoted := strings.HasPrefix(s, "'")
	i := 0
	if quoted {
		i = 1
	}
	for ; i < len(s); i++ {
		c := s[i]
		if quoted && c == '\'' {
			i++ // the closing quote
			break
		}
		if !quoted && strings.IndexByte(space, c) >= 0 {
			break
		}
		if c == '\\' {
			if i++; i == len(s) {
				break
			}
			c = s[i]
		}
		b.WriteByte(c)
	}
	return s[:i], b.String(), s[i:]
}

// decode percent-decodes s, without the spaces around it, as pgx decodes
// a URL's parts (uriDecode); s is returned as it is when it does not
// decode.
func decode(s string) string {
	if d, err := url.PathUnescape(strings.Trim(s, " ")); err == nil {
		return d
	}
	return s
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
