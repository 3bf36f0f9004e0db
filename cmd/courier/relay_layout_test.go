package main

import (
	"context"
	"strings"
	"testing"

	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/migrations"
)

// TestRelayRefusesAnOutboxNotReady: `courier relay` on an outbox of an older
// courier, or one whose table lacks a column the relay reads, exits 1 with
// the migrate command that fixes it, and never starts (the relay checks its
// tables before Run's first batch; the missing table itself is
// TestRelayMissingTableNamesMigrate).
func TestRelayRefusesAnOutboxNotReady(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		prepare func(t *testing.T, pg *testkit.PG, m *migrations.Migrator)
		want    string
	}{
		{"older layout", func(t *testing.T, pg *testkit.PG, m *migrations.Migrator) {
			// Back to version 5, before the relays' activity table.
			if _, err := m.Down(context.Background(), pg.Pool, len(migrations.All())-5); err != nil {
				t.Fatal(err)
			}
		}, "older courier"},
		{"missing column", func(t *testing.T, pg *testkit.PG, _ *migrations.Migrator) {
			if _, err := pg.Pool.Exec(context.Background(), "ALTER TABLE courier_outbox_dead DROP COLUMN dead_lettered_at"); err != nil {
				t.Fatal(err)
			}
		}, "courier_outbox_dead.dead_lettered_at"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			pg := testkit.Postgres(t)
			m, err := migrations.New(migrations.Config{Schema: pg.Schema})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := m.Up(context.Background(), pg.Pool); err != nil {
				t.Fatal(err)
			}
			c.prepare(t, pg, m)
			k := testkit.NewKafka(t)
			code, out, errOut := courier(t, "relay", "--database-url", pg.URL, "--schema", pg.Schema, "--brokers", strings.Join(k.Brokers, ","))
			fix := "courier migrate up --schema " + pg.Schema + " --table courier_outbox"
			if code != exitFailure || !strings.Contains(errOut, c.want) || !strings.Contains(errOut, fix) {
				t.Errorf("relay on an outbox not ready: exit %d, want %d naming %q and %q\n%s%s", code, exitFailure, c.want, fix, out, errOut)
			}
		})
	}
}
