package producer_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/producer"
)

// The outbox BenchmarkAdminAtOneMillion measures: scaleEvents events, of which
// scalePending pending (most in the queue, the rest waiting), scaleFailed
// failed, scaleDead dead-lettered and the rest published over the last
// hour, with scaleAudit entries in the audit log.
const (
	scaleEvents  = 1_000_000
	scalePending = 50_000
	scaleFailed  = 20_000
	scaleDead    = 10_000
	scaleAudit   = 10_000
	// scalePublished events come first, then the dead-lettered, failed and
	// pending ones; the pending ones from scaleQueued on are in the queue.
	scalePublished = scaleEvents - scalePending - scaleFailed - scaleDead
	scaleQueued    = scaleEvents - scalePending*9/10 + 1
	// The published events of the last minute came after the relays last
	// summarized the history's block ranges.
	scaleSummarized = scalePublished - scalePublished/60
	scaleRuns       = 7
)

// scaleEvent is the SELECT list of event g of the seeded outbox: 6 topics
// (and as many event and aggregate types), 100,000 keys, 300,000 aggregate
// ids, 50 tenants, a correlation id on every other event, headers on every
// third, a JSON payload of 300 bytes, and an id that grows with g, as the
// UUIDv7s Enqueue assigns do.
const scaleEvent = `g AS seq, lpad(to_hex(g), 32, '0')::uuid AS id,
    (ARRAY['orders', 'payments', 'invoices', 'shipments', 'refunds', 'customers'])[1 + g % 6] AS topic,
    'key-' || (g * 7919) % 100000 AS partition_key,
    (ARRAY['OrderCreated', 'PaymentCaptured', 'InvoiceIssued', 'ShipmentSent', 'RefundIssued', 'CustomerUpdated'])[1 + g % 6] AS event_type,
    (ARRAY['Order', 'Payment', 'Invoice', 'Shipment', 'Refund', 'Customer'])[1 + g % 6] AS aggregate_type,
    'agg-' || (g * 104729) % 300000 AS aggregate_id,
    'tenant-' || (g * 31) % 50 AS tenant_id,
    CASE WHEN g % 2 = 0 THEN md5(g::text) END AS correlation_id,
    convert_to(rpad(format('{"id":"%s","n":%s,"status":"created","note":"', g, g), 298, 'x') || '"}', 'UTF8') AS payload,
    'application/json' AS content_type,
    CASE WHEN g % 3 = 0 THEN '{"x-origin":"checkout"}'::jsonb END AS headers,
    (ARRAY['kafka server: Not enough in-sync replicas',
        'kafka server: Request exceeded the user-specified time limit in the request',
        'a record of 1200263 bytes is larger than Producer.MaxMessageBytes (1048588): kafka server: Message was too large, server rejected it to avoid allocation error',
        'kafka server: The request attempted to perform an operation on an invalid topic',
        'kafka server: Broker: Unknown topic or partition'])[1 + g % 5] AS error`

// scaleColumns are the event columns scaleEvent names, as the tables have
// them.
const scaleColumns = `seq, id, topic, partition_key, event_type, aggregate_type, aggregate_id, tenant_id, correlation_id,
    payload, content_type, headers`

// scaleSeed fills an outbox with the events of scaleEvent, a statement
// or two per table, in seq order: the published first (see scalePublish),
// then the dead-lettered, failed and pending ones, enqueued in the last
// minutes; then the relays' tally of the published ones (two relay
// workers), and the audit log.
var scaleSeed = []struct {
	sql  string
	args []any
}{
	{scalePublish, []any{1, scaleSummarized, scalePublished}},
	// The relays summarize the block ranges of the history's BRIN indexes
	// every CleanupInterval (a minute): the events of the last minute are
	// not summarized yet, and read whole.
	{"VACUUM ANALYZE courier_outbox_published", nil},
	{scalePublish, []any{scaleSummarized + 1, scalePublished, scalePublished}},
	{`INSERT INTO courier_outbox_dead (` + scaleColumns + `, created_at, retry_count, last_error, last_attempt_at,
    first_failed_at, dead_lettered_at)
SELECT ` + scaleColumns + `, at, 5, error, at + interval '30 seconds', at + interval '1 second', at + interval '30 seconds'
FROM (SELECT ` + scaleEvent + `, now() - ($1 - g) * interval '10 milliseconds' AS at FROM generate_series($2::bigint, $3) AS g) e`,
		[]any{scaleEvents, scalePublished + 1, scalePublished + scaleDead}},
	{`INSERT INTO courier_outbox_waiting (` + scaleColumns + `, created_at, status, retry_count, last_error, last_attempt_at,
    first_failed_at, next_attempt_at)
SELECT ` + scaleColumns + `, at, CASE WHEN failed THEN 'failed' ELSE 'pending' END, CASE WHEN failed THEN 1 + seq % 4 ELSE 0 END,
    CASE WHEN failed THEN error END, CASE WHEN failed THEN at + interval '5 seconds' END,
    CASE WHEN failed THEN at + interval '1 second' END, now() + seq % 60 * interval '1 second'
FROM (SELECT ` + scaleEvent + `, now() - ($1 - g) * interval '10 milliseconds' AS at, g < $3 AS failed
    FROM generate_series($2::bigint, $4) AS g) e`,
		[]any{scaleEvents, scalePublished + scaleDead + 1, scalePublished + scaleDead + scaleFailed + 1, scaleQueued - 1}},
	{`INSERT INTO courier_outbox (` + scaleColumns + `, created_at)
OVERRIDING SYSTEM VALUE
SELECT ` + scaleColumns + `, now() - ($1 - seq) * interval '10 milliseconds'
FROM (SELECT ` + scaleEvent + ` FROM generate_series($2::bigint, $1) AS g) e`, []any{scaleEvents, scaleQueued}},
	{"SELECT setval('courier_outbox_seq', $1)", []any{scaleEvents}},
	{`INSERT INTO courier_outbox_activity (minute, shard, published, lag_sum_seconds, lag_max_seconds)
SELECT date_trunc('minute', published_at), seq % 2, count(*), sum(date_part('epoch', published_at - created_at)),
    max(date_part('epoch', published_at - created_at))
FROM courier_outbox_published GROUP BY 1, 2`, nil},
	{`INSERT INTO courier_outbox_audit (at, actor, remote, action, target, filter, count, detail)
SELECT now() - ($1 - g) * interval '1 minute', 'operator-' || g % 7, '10.0.0.' || g % 250, 'requeue', '',
    jsonb_build_object('Topic', 'orders', 'ErrorContains', 'replicas'), g % 500, 'after the broker incident'
FROM generate_series(1, $1) AS g`, []any{scaleAudit}},
	{"VACUUM courier_outbox, courier_outbox_waiting, courier_outbox_dead, courier_outbox_activity, courier_outbox_audit", nil},
	{"ANALYZE", nil},
}

// scalePublish writes the published events $1 to $2 of $3, over the last
// hour (each published 5 ms to 2 s after its enqueue, one in a thousand
// after a failed attempt).
const scalePublish = `INSERT INTO courier_outbox_published (` + scaleColumns + `, created_at, retry_count, last_error,
    first_failed_at, published_at)
SELECT ` + scaleColumns + `, at - lag, CASE WHEN seq % 1000 = 0 THEN 1 ELSE 0 END, CASE WHEN seq % 1000 = 0 THEN error END,
    CASE WHEN seq % 1000 = 0 THEN at - lag END, at
FROM (SELECT ` + scaleEvent + `, now() - interval '1 hour' + g * (interval '1 hour' / $3) AS at,
    interval '5 milliseconds' + (g * 7) % 400 * interval '5 milliseconds' AS lag
    FROM generate_series($1::bigint, $2) AS g) e`

// BenchmarkAdminAtOneMillion times the queries of Admin a console runs, on
// an outbox of 1,000,000 events (see scaleSeed), each the median of
// scaleRuns runs after one to warm up, and logs them as a table (the goal:
// every median under 200 ms). It takes about 20 seconds and half a
// gigabyte of disk, dropped at the end:
//
//	go test -run '^$' -bench AdminAtOneMillion -benchtime 1x -v ./producer/
func BenchmarkAdminAtOneMillion(b *testing.B) {
	t := b
	ctx := context.Background()
	pg := testkit.Postgres(t)
	pg.Migrate(t)
	start := time.Now()
	for _, s := range scaleSeed {
		if _, err := pg.Pool.Exec(ctx, s.sql, s.args...); err != nil {
			t.Fatalf("seed: %v\n%s", err, s.sql)
		}
	}
	t.Logf("seeded %d events in %v", scaleEvents, time.Since(start).Round(time.Millisecond))
	admin := newAdmin(t, pg)
	// Values of a published event in the middle of the history.
	var mid producer.Record
	if err := pg.Pool.QueryRow(ctx, "SELECT id, partition_key, aggregate_type, aggregate_id FROM courier_outbox_published WHERE seq = 460000").
		Scan(&mid.ID, &mid.Key, &mid.AggregateType, &mid.AggregateID); err != nil {
		t.Fatal(err)
	}
	pub := []string{producer.StatusPublished}
	firstPage, err := admin.List(ctx, producer.Filter{Statuses: pub})
	if err != nil || len(firstPage) != 100 {
		t.Fatalf("first page of published events: %d, %v", len(firstPage), err)
	}
	filters := []struct {
		name string
		f    producer.Filter
	}{
		{"", producer.Filter{}},
		{", topic", producer.Filter{Topic: "payments"}},
		{", key", producer.Filter{Key: *mid.Key}},
		{", tenant (2% of events)", producer.Filter{TenantID: "tenant-7"}},
		{", tenant without events", producer.Filter{TenantID: "tenant-none"}},
		{", aggregate type and id", producer.Filter{AggregateType: *mid.AggregateType, AggregateID: *mid.AggregateID}},
		{", error text", producer.Filter{ErrorContains: "REPLICAS"}},
		{", last 10 minutes", producer.Filter{Since: time.Now().Add(-10 * time.Minute)}},
	}
	type query struct {
		name string
		run  func() (int, error)
	}
	list := func(f producer.Filter) func() (int, error) {
		return func() (int, error) { r, err := admin.List(ctx, f); return len(r), err }
	}
	count := func(fn func(context.Context, producer.Filter) (int64, error), f producer.Filter) func() (int, error) {
		return func() (int, error) { n, err := fn(ctx, f); return int(n), err }
	}
	queries := []query{{"Stats", func() (int, error) {
		s, err := admin.Stats(ctx)
		return int(s.Counts[producer.StatusPublished]), err
	}}}
	for _, fl := range filters {
		f := fl.f
		queries = append(queries, query{"List" + fl.name, list(f)}, query{"Count" + fl.name, count(admin.Count, f)})
		f.Statuses = pub
		queries = append(queries, query{"List published" + fl.name, list(f)}, query{"Count published" + fl.name, count(admin.Count, f)})
	}
	queries = append(queries,
		query{"List published, second page (AfterSeq)", list(producer.Filter{Statuses: pub, AfterSeq: firstPage[len(firstPage)-1].Seq})},
		query{"List published, page in the middle (AfterSeq 460000)", list(producer.Filter{Statuses: pub, AfterSeq: 460000})},
		query{"List all statuses", list(producer.Filter{Statuses: []string{"pending", "failed", "dead_lettered", "published"}})},
		query{"Get (published, in the middle)", func() (int, error) { _, err := admin.Get(ctx, mid.ID); return 1, err }},
		query{"Get (unknown id)", func() (int, error) {
			_, err := admin.Get(ctx, uuid.New())
			if err == nil {
				return 1, nil
			}
			return 0, nil
		}},
		query{"CountRequeue", count(admin.CountRequeue, producer.Filter{})},
		query{"CountRequeue, topic", count(admin.CountRequeue, producer.Filter{Topic: "payments"})},
		query{"CountPurge", count(admin.CountPurge, producer.Filter{})},
		query{"CountPurge published, tenant (2% of events)", count(admin.CountPurge, producer.Filter{Statuses: pub, TenantID: "tenant-7"})},
		query{"CountPurge published, aggregate type and id", count(admin.CountPurge,
			producer.Filter{Statuses: pub, AggregateType: *mid.AggregateType, AggregateID: *mid.AggregateID})},
		query{"Activity(1h, 1m)", func() (int, error) { p, err := admin.Activity(ctx, time.Hour, time.Minute); return len(p), err }},
		query{"DeadLetterGroups(50)", func() (int, error) { g, err := admin.DeadLetterGroups(ctx, 50); return len(g), err }},
		query{"AuditLog(0, 100)", func() (int, error) { e, err := admin.AuditLog(ctx, 0, 100); return len(e), err }},
	)
	var report strings.Builder
	report.WriteString("| query | rows | median | slowest |\n| --- | ---: | ---: | ---: |\n")
	for _, q := range queries {
		n, err := q.run() // warm-up
		if err != nil {
			t.Fatalf("%s: %v", q.name, err)
		}
		var took []time.Duration
		for range scaleRuns {
			start := time.Now()
			if _, err := q.run(); err != nil {
				t.Fatalf("%s: %v", q.name, err)
			}
			took = append(took, time.Since(start))
		}
		slices.Sort(took)
		median := took[len(took)/2]
		fmt.Fprintf(&report, "| %s | %d | %.1f ms | %.1f ms |\n", q.name, n, ms(median), ms(took[len(took)-1]))
	}
	t.Logf("median of %d runs of each query on %d events:\n%s", scaleRuns, scaleEvents, report.String())
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
