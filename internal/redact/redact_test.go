package redact_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

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

// TestSecretsReadValuesAsPgxDoes: a key=value value is read as libpq and
// pgx read it (quoted, with \' and \\; unquoted, a backslash escaping the
// next character, a space too; a trailing backslash dropped), a URL's as
// pgx decodes it, and the secret is masked in every form a message may
// print it: as written, as read, Go-quoted (%q), and each word alone. A
// word a password's unescaped space or unencoded '&' pushes out of the
// value, which pgx's errors then quote, is masked too. password is the
// value pgx reads (checked against pgx), or, where pgx refuses the
// string, the one its writer meant; no run of its letters and digits may
// be left in anything printed.
func TestSecretsReadValuesAsPgxDoes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, conn, password, keep string }{
		{"escaped space", `host=db password=AAA\ BBB user=u`, "AAA BBB", "user=u"},
		{"escaped space, last", `host=127.0.0.1 port=notaport password=AAA\ BBB`, "AAA BBB", "port=notaport"},
		{"escaped backslash", `host=db password=AAA\\BBB user=u`, `AAA\BBB`, "user=u"},
		{"escaped backslash before a space", `host=db password=AAA\\ user=u`, `AAA\`, "user=u"},
		{"escaped quote", `host=db password=AAA\'BBB user=u`, "AAA'BBB", "user=u"},
		{"escaped quote and space", `host=db password=AAA\'\ BBB user=u`, "AAA' BBB", "user=u"},
		{"escaped leading quote", `host=db password=\'AAA\ BBB user=u`, "'AAA BBB", "user=u"},
		{"spaces around =", "host=db password =\tAAA\\ BBB user=u", "AAA BBB", "user=u"},
		{"vertical tabs around =", "host=db password\v=\vAAA\\ BBB\vuser=u", "AAA BBB", "user=u"},
		{"quoted with escapes", `host=db password='AAA\' BBB\\ CCC' user=u`, `AAA' BBB\ CCC`, "user=u"},
		{"trailing backslash", `host=db user=u password=AAA\`, "AAA", "user=u"},
		{"escaped space and trailing backslash", `host=db user=u password=AAA\ BBB\`, "AAA BBB", "user=u"},
		{"sslpassword with an escaped space", `host=db sslpassword=AAA\ BBB user=u`, "AAA BBB", "user=u"},
		{"oauth_client_secret with an escaped space", `host=db oauth_client_secret=AAA\ BBB user=u`, "AAA BBB", "user=u"},
		{"unescaped space", `host=db password=AAA BBB user=u`, "AAA BBB", "user=u"},
		{"double quotes", `host=db password="AAA BBB" user=u`, `"AAA BBB"`, "user=u"},
		{"URL userinfo with an encoded space", "postgres://u:AAA%20BBB@db/app", "AAA BBB", "@db/app"},
		{"URL query with an encoded backslash and space", "postgres://u@db/app?password=AAA%5C%20BBB&sslmode=disable", `AAA\ BBB`, "&sslmode=disable"},
		{"URL query with an unencoded space", "postgres://u@db/app?password=AAA BBB&sslmode=disable", "AAA BBB", "&sslmode=disable"},
		{"URL query with an unencoded &", "postgres://u@db/app?password=AAA&BBB&sslmode=disable", "AAA&BBB", "&sslmode=disable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := pgconn.ParseConfig(tc.conn)
			if err == nil && cfg.Password != "" && cfg.Password != tc.password {
				t.Fatalf("pgx reads the password %q, the test says %q", cfg.Password, tc.password)
			}
			secrets := redact.Secrets(tc.conn)
			printed := map[string]string{"ConnString": redact.ConnString(tc.conn)}
			for _, form := range append(strings.Fields(tc.password), tc.password) {
				printed[fmt.Sprintf("String of %q", form)] = redact.String(form, secrets)
				printed[fmt.Sprintf("String of %%q of %q", form)] = redact.String(fmt.Sprintf("%q", form), secrets)
			}
			if err != nil {
				printed["pgx's error"] = redact.String(err.Error(), secrets)
			}
			if !strings.Contains(printed["ConnString"], tc.keep) {
				t.Errorf("ConnString(%q) = %q: want %q kept", tc.conn, printed["ConnString"], tc.keep)
			}
			runs := strings.FieldsFunc(tc.password, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
			for what, out := range printed {
				for _, run := range runs {
					if strings.Contains(out, run) {
						t.Errorf("%s of %q prints %q: %q", what, tc.conn, run, out)
					}
				}
			}
		})
	}
}

// FuzzSecretsHoldThePasswordPgxReads: whatever value follows password=,
// in a key=value string or a URL, the password pgx reads from it is among
// Secrets, so it is masked wherever it is printed.
func FuzzSecretsHoldThePasswordPgxReads(f *testing.F) {
	for _, seed := range []string{`AAA\ BBB`, `AAA\\`, `AAA\`, `'AAA\' BBB'`, `\'AAA`, "\vAAA", `AAA%20BBB`, ` AAA `, `a&b`} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, value string) {
		for _, conn := range []string{
			"host=db password=" + value + " user=u",
			"host=db password =" + value,
			"postgres://u@db/app?password=" + value + "&sslmode=disable",
			"postgres://u:" + value + "@db/app",
		} {
			cfg, err := pgconn.ParseConfig(conn)
			if err == nil && cfg.Password != "" && !slices.Contains(redact.Secrets(conn), cfg.Password) {
				t.Errorf("pgx reads the password %q from %q; Secrets = %q", cfg.Password, conn, redact.Secrets(conn))
			}
		}
	})
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
