package redact_test

import (
	"errors"
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
