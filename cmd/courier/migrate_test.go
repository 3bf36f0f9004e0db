package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/migrations"
)

// courier runs the command line in-process and returns exit code and output.
func courier(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestMigrateUpStatusDown(t *testing.T) {
	t.Parallel()
	pg := testkit.Postgres(t)
	schema := pg.FreshSchema(t)
	db := []string{"--database-url", pg.URL, "--schema", schema}

	all := len(migrations.All())
	code, out, errOut := courier(t, append([]string{"migrate", "up"}, db...)...)
	if code != exitOK || !strings.Contains(out, fmt.Sprintf("applied %d migration(s)", all)) || !strings.Contains(errOut, "migration applied") {
		t.Fatalf("migrate up: exit %d\n%s\n%s", code, out, errOut)
	}
	if code, out, _ = courier(t, append([]string{"migrate"}, db...)...); code != exitOK || !strings.Contains(out, "up to date") {
		t.Fatalf("second migrate: exit %d\n%s", code, out)
	}

	code, out, _ = courier(t, append([]string{"migrate", "status", "--output", "json"}, db...)...)
	var status struct {
		Action     string
		Migrations []struct {
			Version int
			Name    string
			Applied bool
		}
	}
	if err := json.Unmarshal([]byte(out), &status); err != nil || code != exitOK {
		t.Fatalf("migrate status --output json: exit %d, %v\n%s", code, err, out)
	}
	if status.Action != "status" || len(status.Migrations) == 0 || !status.Migrations[0].Applied || status.Migrations[0].Name != "create_outbox" {
		t.Fatalf("status = %+v, want create_outbox applied", status)
	}

	code, out, _ = courier(t, append([]string{"migrate", "down", "--steps", strconv.Itoa(all)}, db...)...)
	if code != exitOK || !strings.Contains(out, fmt.Sprintf("reverted %d migration(s)", all)) || strings.Contains(out, "Z\n") {
		t.Fatalf("migrate down: exit %d\n%s", code, out)
	}
	var exists bool
	if err := pg.Pool.QueryRow(context.Background(), "SELECT to_regclass($1) IS NOT NULL", schema+".courier_outbox").Scan(&exists); err != nil || exists {
		t.Fatalf("outbox table still exists after migrate down (%v)", err)
	}
}

func TestMigrateInbox(t *testing.T) {
	t.Parallel()
	pg := testkit.Postgres(t)
	schema := pg.FreshSchema(t)
	db := []string{"--database-url", pg.URL, "--schema", schema, "--inbox"}
	exists := func(table string) bool {
		t.Helper()
		var ok bool
		if err := pg.Pool.QueryRow(context.Background(), "SELECT to_regclass($1) IS NOT NULL", schema+"."+table).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}

	all := len(migrations.AllInbox())
	code, out, errOut := courier(t, append([]string{"migrate", "up"}, db...)...)
	if code != exitOK || !strings.Contains(out, fmt.Sprintf("applied %d migration(s)", all)) || !strings.Contains(out, "create_inbox") {
		t.Fatalf("migrate up --inbox: exit %d\n%s\n%s", code, out, errOut)
	}
	if !exists("courier_inbox") || !exists("courier_inbox_migrations") || exists("courier_outbox") {
		t.Fatal("migrate up --inbox did not create courier_inbox alone")
	}
	code, out, _ = courier(t, append([]string{"migrate", "status", "--output", "json"}, db...)...)
	if code != exitOK || !strings.Contains(out, `"name": "create_inbox"`) || strings.Contains(out, "create_outbox") {
		t.Fatalf("migrate status --inbox: exit %d\n%s", code, out)
	}

	// --table still names the table; COURIER_TABLE names the outbox's only.
	custom := append(db, "--table", "billing_inbox")
	if code, out, errOut = courier(t, append([]string{"migrate", "up"}, custom...)...); code != exitOK || !exists("billing_inbox") {
		t.Fatalf("migrate up --inbox --table billing_inbox: exit %d\n%s%s", code, out, errOut)
	}
	code, out, _ = courier(t, append([]string{"migrate", "down", "--steps", strconv.Itoa(all)}, db...)...)
	if code != exitOK || !strings.Contains(out, fmt.Sprintf("reverted %d migration(s)", all)) {
		t.Fatalf("migrate down --inbox: exit %d\n%s", code, out)
	}
	if exists("courier_inbox") || !exists("billing_inbox") {
		t.Fatal("migrate down --inbox did not drop courier_inbox alone")
	}
}

func TestMigrateInboxIgnoresOutboxTableVariable(t *testing.T) {
	pg := testkit.Postgres(t)
	schema := pg.FreshSchema(t)
	t.Setenv("COURIER_TABLE", "env_outbox")
	if code, out, errOut := courier(t, "migrate", "up", "--inbox", "--database-url", pg.URL, "--schema", schema); code != exitOK {
		t.Fatalf("migrate up --inbox: exit %d\n%s%s", code, out, errOut)
	}
	var exists bool
	if err := pg.Pool.QueryRow(context.Background(), "SELECT to_regclass($1) IS NOT NULL", schema+".courier_inbox").Scan(&exists); err != nil || !exists {
		t.Fatalf("migrate up --inbox with COURIER_TABLE set: %s.courier_inbox missing (%v)", schema, err)
	}
}

func TestMigrateEnvironmentVariables(t *testing.T) {
	pg := testkit.Postgres(t)
	schema := pg.FreshSchema(t)
	t.Setenv("COURIER_DATABASE_URL", pg.URL)
	t.Setenv("COURIER_SCHEMA", schema)
	t.Setenv("COURIER_TABLE", "env_outbox")
	if code, out, errOut := courier(t, "migrate", "up"); code != exitOK {
		t.Fatalf("migrate up from env: exit %d\n%s%s", code, out, errOut)
	}
	var exists bool
	if err := pg.Pool.QueryRow(context.Background(), "SELECT to_regclass($1) IS NOT NULL", schema+".env_outbox").Scan(&exists); err != nil || !exists {
		t.Fatalf("COURIER_SCHEMA/COURIER_TABLE ignored: %s.env_outbox missing (%v)", schema, err)
	}
}

func TestMigrateUsageErrorsExitTwo(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"migrate", "sideways"},
		{"migrate", "up", "down"},
		{"migrate", "--output", "yaml"},
		{"migrate", "--schema", "Bad-Schema"},
		{"migrate", "down", "--steps", "0"},
		{"migrate", "--no-such-flag"},
		{"no-such-command"},
		{"migrate", "--database-url", "postgres://%zz"},
		{"migrate", "--inbox", "--table", "Bad-Table"},
	} {
		if code, _, errOut := courier(t, args...); code != exitUsage || !strings.Contains(errOut, "courier --help") {
			t.Errorf("courier %v: exit %d, want %d with a pointer to --help\n%s", args, code, exitUsage, errOut)
		}
	}
}

func TestMigrateUnreachableDatabaseHidesPassword(t *testing.T) {
	t.Parallel()
	code, out, errOut := courier(t, "migrate", "--database-url", "postgres://app:s3cr3t@127.0.0.1:1/shop?connect_timeout=2")
	if code != exitFailure {
		t.Fatalf("exit %d, want %d\n%s", code, exitFailure, errOut)
	}
	if !strings.Contains(errOut, "is it running") || !strings.Contains(errOut, "127.0.0.1:1") {
		t.Errorf("error does not say what to check:\n%s", errOut)
	}
	if strings.Contains(out+errOut, "s3cr3t") {
		t.Errorf("the password was printed:\n%s%s", out, errOut)
	}
}

func TestMigrateUnparsableDatabaseURLHidesPassword(t *testing.T) {
	t.Parallel()
	for _, url := range []string{
		"postgres://app:s3cr3t@127.0.0.1:notaport/shop",
		"postgres://app@127.0.0.1:notaport/shop?password=s3cr3t",
		"host=127.0.0.1 port=notaport password=s3cr3t",
	} {
		code, out, errOut := courier(t, "migrate", "--database-url", url)
		if code != exitUsage || !strings.Contains(errOut, "--database-url") {
			t.Errorf("%s: exit %d, want %d naming --database-url\n%s", url, code, exitUsage, errOut)
		}
		if strings.Contains(out+errOut, "s3cr3t") {
			t.Errorf("the password was printed:\n%s%s", out, errOut)
		}
	}
}
