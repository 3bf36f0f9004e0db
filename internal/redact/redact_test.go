package redact_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"html"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/courierkit/courier/internal/redact"
)

// TestConnStringMasksEverySecret: every form of secret in a URL or a
// key=value string is masked, in the string itself and in the errors pgx
// returns for it.
func TestConnStringMasksEverySecret(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ conn, secret, keep string }{
		{"postgres://u:pw1secret@db:5432/app", "pw1secret", "postgres://u:xxxxx@db:5432/app"},
		{"postgresql://u:pw2secret@db/app?sslmode=require", "pw2secret", "sslmode=require"},
		{"postgres://u:p%40w3secret@db/app", "p@w3secret", "postgres://u:xxxxx@db/app"},
		{"postgres://u:pw/4secret@db/app", "pw/4secret", "@db/app"},
		{"postgres://u:pw@5secret@db/app", "pw@5secret", "@db/app"},
		{"postgres://u@db/app?password=pw6secret", "pw6secret", "password=xxxxx"},
		{"postgres://u@db/app?sslmode=verify-full&sslpassword=pw7secret&x=1", "pw7secret", "&x=1"},
		{"postgres://u@db/app?PASSWORD=pw8secret", "pw8secret", "PASSWORD=xxxxx"},
		{"postgres://u@db/app?pass%77ord=pw9secret", "pw9secret", "db/app"},
		{"host=db password=pw10secret user=u", "pw10secret", "user=u"},
		{"host=db password = pw11secret port=notaport", "pw11secret", "port=notaport"},
		{"host=db password='pw 12 secret' user=u", "pw 12 secret", "user=u"},
		{`host=db password='pw\'13secret' user=u`, `pw'13secret`, "user=u"},
		{"host=db password =\t'pw14 secret'", "pw14 secret", "host=db"},
		{"host=db sslpassword=pw15secret", "pw15secret", "host=db"},
		{"user=u password='unterminated pw16secret", "pw16secret", "user=u"},
		{"u:pw17secret@db", "pw17secret", "@db"},
	} {
		got := redact.ConnString(tc.conn)
		if strings.Contains(got, tc.secret) || !strings.Contains(got, tc.keep) {
			t.Errorf("ConnString(%q) = %q: want %q masked and %q kept", tc.conn, got, tc.secret, tc.keep)
		}
		if _, err := pgconn.ParseConfig(tc.conn); err != nil {
			if msg := redact.String(err.Error(), redact.Secrets(tc.conn)); strings.Contains(msg, tc.secret) {
				t.Errorf("pgx's error for %q still holds the secret after String: %s", tc.conn, msg)
			}
		}
	}
}

func TestStringMasksLongestFirst(t *testing.T) {
	t.Parallel()
	got := redact.String("a=abc b=abcdef", []string{"abc", "abcdef", ""})
	if got != "a=xxxxx b=xxxxx" {
		t.Errorf("String = %q", got)
	}
	if err := errors.New(redact.String("x", nil)); err.Error() != "x" {
		t.Errorf("String with no secrets changed the text: %v", err)
	}
}

// TestHeaderSecretsMasksEveryEcho: a header value is masked in each form a
// server may echo it in (as sent, JSON, a Go literal, percent-encoded,
// HTML), and so are its token and, for Basic credentials, the
// user:password they decode to and the password; the scheme, and values
// too short to be credentials, are kept.
func TestHeaderSecretsMasksEveryEcho(t *testing.T) {
	t.Parallel()
	token := `tok"<&>\en/1secret`
	password := `pw"<&>\1secret`
	basic := base64.StdEncoding.EncodeToString([]byte("courier:" + password))
	for _, tc := range []struct {
		value   string
		secrets []string
	}{
		{"Bearer " + token, []string{"Bearer " + token, token}},
		{"Basic " + basic, []string{"Basic " + basic, basic, "courier:" + password, password}},
		{token, []string{token}},
	} {
		secrets := redact.HeaderSecrets(tc.value)
		for _, secret := range tc.secrets {
			for _, echo := range []string{secret, jsonText(secret, true), jsonText(secret, false), unquote(strconv.Quote(secret)),
				url.PathEscape(secret), url.QueryEscape(secret), html.EscapeString(secret)} {
				if got := redact.String("401: "+echo+" refused", secrets); got != "401: "+redact.Mask+" refused" {
					t.Errorf("HeaderSecrets(%q): the echo %q is shown as %q", tc.value, echo, got)
				}
			}
		}
	}
	if got := redact.String("Bearer and Basic stay; so do 1, prod and x-team", redact.HeaderSecrets("Bearer prod")); got != "Bearer and Basic stay; so do 1, prod and x-team" {
		t.Errorf("the scheme and a short value were masked: %q", got)
	}
}

// jsonText is s as the inside of a JSON string, with or without HTML
// escapes.
func jsonText(s string, escapeHTML bool) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(escapeHTML)
	_ = enc.Encode(s)
	return unquote(strings.TrimSuffix(b.String(), "\n"))
}

// unquote is q without its first and last byte, its quotes.
func unquote(q string) string { return q[1 : len(q)-1] }
