package testkit

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/courierkit/courier/migrations"
)

// PG is a test's own PostgreSQL schema.
type PG struct {
	// Pool connects with search_path set to Schema and application_name set
	// to Schema too.
	Pool *pgxpool.Pool
	// Schema is created for the test and dropped, with everything in it,
	// when the test ends.
	Schema string
	// URL is the database URL, without the schema.
	URL string
}

// Postgres creates a schema for the test and a pool whose search_path is it.
func Postgres(t testing.TB) *PG {
	t.Helper()
	pg := &PG{URL: DatabaseURL(), Schema: "t_" + UniqueName(t, 48)}
	admin := pg.connect(t, 2, "")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+pg.Schema); err != nil {
		t.Fatalf("testkit: create schema %s: %v", pg.Schema, err)
	}
	pg.DropSchemaAtCleanup(t, admin, pg.Schema)
	pg.Pool = pg.NewPool(t, 4)
	return pg
}

// NewPool returns another pool on the test's schema, closed at cleanup.
func (pg *PG) NewPool(t testing.TB, maxConns int32) *pgxpool.Pool {
	t.Helper()
	return pg.connect(t, maxConns, pg.Schema)
}

// FreshSchema returns a schema name unique to the test that does not exist
// yet; it is dropped, if something created it, when the test ends.
func (pg *PG) FreshSchema(t testing.TB) string {
	t.Helper()
	name := "t_" + UniqueName(t, 48)
	pg.DropSchemaAtCleanup(t, pg.Pool, name)
	return name
}

// DropSchemaAtCleanup drops schema, cascading, when the test ends.
func (pg *PG) DropSchemaAtCleanup(t testing.TB, pool *pgxpool.Pool, schema string) {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE"); err != nil {
			t.Errorf("testkit: drop schema %s: %v", schema, err)
		}
	})
}

// Migrate applies courier's migrations to the default outbox table in the
// test's schema, and adds the view courier_events (see EventsView).
func (pg *PG) Migrate(t testing.TB) {
	t.Helper()
	m, err := migrations.New(migrations.Config{Schema: pg.Schema})
	if err != nil {
		t.Fatalf("testkit: %v", err)
	}
	if _, err := m.Up(context.Background(), pg.Pool); err != nil {
		t.Fatalf("testkit: migrate %s: %v", pg.Schema, err)
	}
	if _, err := pg.Pool.Exec(context.Background(), EventsView); err != nil {
		t.Fatalf("testkit: the view courier_events in %s: %v", pg.Schema, err)
	}
}

// EventsView creates the view courier_events: every event of the default
// outbox, whichever of its tables holds it, as one row with its status and
// delivery state, so that a test can count events by status ("status =
// 'published'") without knowing the layout.
const EventsView = `
CREATE VIEW courier_events AS
SELECT id, seq, topic, partition_key, event_type, aggregate_type, aggregate_id, tenant_id, correlation_id,
    causation_id, idempotency_key, payload, content_type, COALESCE(headers, '{}') AS headers, 'pending' AS status,
    0 AS retry_count, max_retries, NULL::text AS last_error, NULL::timestamptz AS last_attempt_at,
    NULL::timestamptz AS first_failed_at, COALESCE(not_before, created_at) AS next_attempt_at, created_at,
    NULL::timestamptz AS published_at
FROM courier_outbox
UNION ALL
SELECT id, seq, topic, partition_key, event_type, aggregate_type, aggregate_id, tenant_id, correlation_id,
    causation_id, idempotency_key, payload, content_type, COALESCE(headers, '{}'), status, retry_count, max_retries,
    last_error, last_attempt_at, first_failed_at, next_attempt_at, created_at, NULL
FROM courier_outbox_waiting
UNION ALL
SELECT id, seq, topic, partition_key, event_type, aggregate_type, aggregate_id, tenant_id, correlation_id,
    causation_id, idempotency_key, payload, content_type, COALESCE(headers, '{}'), 'dead_lettered', retry_count,
    max_retries, last_error, last_attempt_at, first_failed_at, dead_lettered_at, created_at, NULL
FROM courier_outbox_dead
UNION ALL
SELECT id, seq, topic, partition_key, event_type, aggregate_type, aggregate_id, tenant_id, correlation_id,
    causation_id, idempotency_key, payload, content_type, COALESCE(headers, '{}'), 'published', retry_count,
    max_retries, last_error, published_at, first_failed_at, created_at, created_at, published_at
FROM courier_outbox_published`

func (pg *PG) connect(t testing.TB, maxConns int32, searchPath string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pg.URL)
	if err != nil {
		t.Fatalf("testkit: %s=%q: %v", EnvDatabaseURL, pg.URL, err)
	}
	cfg.MaxConns = maxConns
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	}
	// Sessions are named after the test's schema, so a test can find its
	// own in pg_stat_activity (e.g. to terminate them).
	cfg.ConnConfig.RuntimeParams["application_name"] = pg.Schema
	if searchPath != "" {
		cfg.ConnConfig.RuntimeParams["search_path"] = searchPath
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		if pool != nil {
			pool.Close()
		}
		unavailable(t, "PostgreSQL", redactURL(pg.URL), err)
	}
	// Cleanups run last-in first-out: anything registered later that uses
	// the pool runs before it closes.
	t.Cleanup(pool.Close)
	return pool
}
