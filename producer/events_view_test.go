package producer_test

import (
	"context"
	"testing"

	"github.com/courierkit/courier/internal/testkit"
)

// eventsView shows every event of a test's outbox, whichever of its tables
// holds it, as one row with its status: the shape assertions count events
// in ("status = 'published'"), whatever the layout.
const eventsView = `
CREATE VIEW courier_events AS
SELECT id, seq, topic, partition_key, event_type, aggregate_type, aggregate_id, tenant_id, correlation_id, causation_id, idempotency_key,
    payload, content_type, COALESCE(headers, '{}') AS headers, 'pending' AS status, 0 AS retry_count, max_retries,
    NULL::text AS last_error, NULL::timestamptz AS last_attempt_at, NULL::timestamptz AS first_failed_at,
    COALESCE(not_before, created_at) AS next_attempt_at, created_at, NULL::timestamptz AS published_at
FROM courier_outbox
UNION ALL
SELECT id, seq, topic, partition_key, event_type, aggregate_type, aggregate_id, tenant_id, correlation_id, causation_id, idempotency_key,
    payload, content_type, COALESCE(headers, '{}'), status, retry_count, max_retries, last_error, last_attempt_at,
    first_failed_at, next_attempt_at, created_at, NULL
FROM courier_outbox_waiting
UNION ALL
SELECT id, seq, topic, partition_key, event_type, aggregate_type, aggregate_id, tenant_id, correlation_id, causation_id, idempotency_key,
    payload, content_type, COALESCE(headers, '{}'), 'dead_lettered', retry_count, max_retries, last_error,
    last_attempt_at, first_failed_at, dead_lettered_at, created_at, NULL
FROM courier_outbox_dead
UNION ALL
SELECT id, seq, topic, partition_key, event_type, aggregate_type, aggregate_id, tenant_id, correlation_id, causation_id, idempotency_key,
    payload, content_type, COALESCE(headers, '{}'), 'published', retry_count, max_retries, last_error,
    published_at, first_failed_at, created_at, created_at, published_at
FROM courier_outbox_published`

// createEventsView adds eventsView to the test's migrated schema.
func createEventsView(t *testing.T, pg *testkit.PG) {
	t.Helper()
	if _, err := pg.Pool.Exec(context.Background(), eventsView); err != nil {
		t.Fatal(err)
	}
}
