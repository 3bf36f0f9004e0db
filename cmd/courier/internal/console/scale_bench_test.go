package console_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/jackc/pgx/v5"

	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/producer"
)

// The outbox and dead-letter topic BenchmarkPagesAtScale serves: events
// enqueued through Outbox.EnqueueBatch and published by a relay into the
// in-process broker (scalePublished), dead-lettered by the relay
// (scaleDead), left pending (the rest); and scaleDeadLetters envelopes on
// a dead-letter topic.
const (
	scaleEvents      = 1_000_000
	scaleDead        = 10_000
	scalePending     = 40_000
	scalePublished   = scaleEvents - scaleDead - scalePending
	scaleDeadLetters = 100_000
	scaleBatch       = 10_000
	scaleRuns        = 7
)

// scaleTopics are the topics of the seeded events, each of 3 partitions.
var scaleTopics = []string{"orders", "payments", "invoices", "shipments", "refunds", "customers"}

// scaleEvent is event i of the seed: 6 topics, 100,000 keys, 300,000
// aggregate ids, 50 tenants, a JSON payload of about 300 bytes.
func scaleEvent(prefix string, i int) producer.Event {
	return producer.Event{Topic: prefix + scaleTopics[i%len(scaleTopics)], Key: fmt.Sprintf("key-%d", i*7919%100_000), Type: "Changed",
		AggregateType: []string{"Order", "Payment", "Invoice", "Shipment", "Refund", "Customer"}[i%6],
		AggregateID:   fmt.Sprintf("agg-%d", i*104729%300_000), TenantID: fmt.Sprintf("tenant-%d", i*31%50),
		Payload: fmt.Appendf(nil, `{"id":%d,"status":"created","note":"%s"}`, i, strings.Repeat("x", 250))}
}

// BenchmarkPagesAtScale times every list and count page of the console,
// over HTTP on the loopback, against an outbox of 1,000,000 events and a
// dead-letter topic of 100,000 records: each the median of 7 requests
// after one to warm up, reported as ms/<page> and logged as a table. The
// seed goes through courier's own write path (about a minute):
//
//	go test -run '^$' -bench PagesAtScale -benchtime 1x -timeout 30m ./cmd/courier/internal/console/
func BenchmarkPagesAtScale(b *testing.B) {
	r := newRig(b, nil)
	ctx := context.Background()
	prefix := "t.scale-" + testkit.UniqueName(b, 40) + "."
	for _, topic := range scaleTopics {
		r.kafka.CreateTopic(b, prefix+topic, 3)
	}
	start := time.Now()
	seedEvents(b, r, prefix, 0, scalePublished)
	stop := r.relay(b, func(c *producer.RelayConfig) { c.Workers, c.BatchSize = 2, 5000 })
	waitDrained(b, r)
	dead := make([]producer.Event, scaleDead)
	for i := range dead {
		dead[i] = scaleEvent(prefix+"missing-", scalePublished+i)
		dead[i].MaxAttempts = 1
	}
	for i := 0; i < scaleDead; i += scaleBatch {
		r.enqueue(b, dead[i:min(i+scaleBatch, scaleDead)]...)
	}
	waitDrained(b, r)
	stop()
	seedEvents(b, r, prefix, scalePublished+scaleDead, scaleEvents)
	for i := range 1000 {
		if err := r.admin.Audit(ctx, producer.AuditEntry{Actor: "ana", Action: "outbox.requeue", Target: "shop.courier_outbox",
			Count: int64(i), Detail: "after the broker incident"}); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := r.pg.Pool.Exec(ctx, "VACUUM ANALYZE"); err != nil {
		b.Fatal(err)
	}
	b.Logf("seeded %d events in %v", scaleEvents, time.Since(start).Round(time.Second))
	dlqTopic := prefix + "orders" + dlq.DefaultSuffix
	start = time.Now()
	seedDeadLetters(b, r, prefix+"orders", dlqTopic)
	b.Logf("seeded %d dead letters in %v", scaleDeadLetters, time.Since(start).Round(time.Second))

	c := newClient(b, r.url)
	get := c.get
	// The first visit of the dead-letter topic waits for its index's
	// first read, whose time is reported apart.
	start = time.Now()
	testkit.WaitFor(b, 2*time.Minute, "the dead-letter index to read the topic", func() bool {
		_, body := get("/dlq/" + dlqTopic)
		return strings.Contains(body, fmt.Sprintf("of %s record(s) match", thousandsOf(scaleDeadLetters)))
	})
	b.Logf("first read of the dead-letter topic (100,000 records) by its index: %v", time.Since(start).Round(10*time.Millisecond))

	var rec producer.Record
	if records, err := r.admin.List(ctx, producer.Filter{Statuses: []string{producer.StatusPublished}, Limit: 1, AfterSeq: 500_000}); err != nil || len(records) != 1 {
		b.Fatalf("an event to show: %v", err)
	} else {
		rec = records[0]
	}
	pages := []struct{ name, path string }{
		{"overview", "/"},
		{"events", "/outbox/events"},
		{"events-page-2", fmt.Sprintf("/outbox/events?after=%d", scalePublished+100)},
		{"events-published", "/outbox/events?status=published"},
		{"events-published-key", "/outbox/events?status=published&key=key-4242"},
		{"events-published-tenant", "/outbox/events?status=published&tenant=tenant-7"},
		{"events-published-aggregate", "/outbox/events?status=published&aggregate_type=Order&aggregate_id=agg-1234"},
		{"events-published-10m", "/outbox/events?status=published&since=10m"},
		{"events-error", "/outbox/events?error=does+not+exist"},
		{"events-all-statuses-topic", "/outbox/events?status=pending&status=failed&status=published&status=dead_lettered&topic=" + prefix + "payments"},
		{"event", "/outbox/events/" + rec.ID.String()},
		{"confirm-requeue", "/outbox/requeue?status=dead_lettered"},
		{"confirm-purge-published-tenant", "/outbox/purge?status=published&tenant=tenant-7"},
		{"dlq-topics", "/dlq"},
		{"dlq-topic", "/dlq/" + dlqTopic},
		{"dlq-topic-error", "/dlq/" + dlqTopic + "?error=timeout"},
		{"dlq-topic-kind-group", "/dlq/" + dlqTopic + "?kind=permanent&group=payouts"},
		{"dlq-topic-key", "/dlq/" + dlqTopic + "?key=key-4242"},
		{"dlq-record", "/dlq/" + dlqTopic + "/1/20000"},
		{"health", "/health"},
		{"audit", "/audit"},
	}
	var table strings.Builder
	table.WriteString("| page | request | median | slowest of 7 |\n| --- | --- | ---: | ---: |\n")
	for _, p := range pages {
		if status, body := get(p.path); status != http.StatusOK {
			b.Fatalf("%s: %d\n%.2000s", p.path, status, body)
		}
		times := make([]time.Duration, scaleRuns)
		for i := range times {
			t0 := time.Now()
			get(p.path)
			times[i] = time.Since(t0)
		}
		slices.Sort(times)
		median := times[scaleRuns/2]
		b.ReportMetric(float64(median.Microseconds())/1000, "ms/"+p.name)
		fmt.Fprintf(&table, "| %s | `%s` | %.1f ms | %.1f ms |\n", p.name, strings.ReplaceAll(p.path, prefix, "<t>."), float64(median.Microseconds())/1000,
			float64(times[scaleRuns-1].Microseconds())/1000)
	}
	b.Logf("\n%s", table.String())
}

// seedEvents enqueues events from to until, in transactions of
// scaleBatch.
func seedEvents(b *testing.B, r *rig, prefix string, from, until int) {
	b.Helper()
	for i := from; i < until; i += scaleBatch {
		batch := make([]producer.Event, 0, scaleBatch)
		for j := i; j < min(i+scaleBatch, until); j++ {
			batch = append(batch, scaleEvent(prefix, j))
		}
		err := pgx.BeginFunc(context.Background(), r.pg.Pool, func(tx pgx.Tx) error {
			_, err := r.out.EnqueueBatch(context.Background(), tx, batch)
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}

// waitDrained waits until the relay published or dead-lettered every
// event: none is pending or failed. (Stats counts those exactly; the
// published ones it estimates past producer.ExactPublishedLimit.)
func waitDrained(b *testing.B, r *rig) {
	b.Helper()
	testkit.WaitFor(b, 10*time.Minute, "the relay to drain the outbox", func() bool {
		stats, err := r.admin.Stats(context.Background())
		return err == nil && stats.Counts[producer.StatusPending] == 0 && stats.Counts[producer.StatusFailed] == 0
	})
}

// seedDeadLetters writes scaleDeadLetters envelopes to dlqTopic (3
// partitions): 30 error texts, both kinds, 3 groups, 100,000 keys.
func seedDeadLetters(b *testing.B, r *rig, original, dlqTopic string) {
	b.Helper()
	r.kafka.CreateTopic(b, dlqTopic, 3)
	p := r.kafka.Producer(b)
	now := time.Now()
	batch := make([]*sarama.ProducerMessage, 0, 1000)
	for i := range scaleDeadLetters {
		kind := dlq.KindRetriesExhausted
		if i%4 == 0 {
			kind = dlq.KindPermanent
		}
		key := fmt.Appendf(nil, "key-%d", i*7919%100_000)
		env, err := dlq.New(dlq.Original{Topic: original, Partition: int32(i % 3), Offset: int64(i / 3), Key: key,
			Value: fmt.Appendf(nil, `{"id":%d,"note":"%s"}`, i, strings.Repeat("x", 250))},
			dlq.Failure{Error: fmt.Sprintf("psp: %s (code %d)", []string{"timeout after 5s", "422 amount must be above 0", "account closed"}[i%3], i%10),
				Kind: kind, Attempts: 5, FailedAt: now.Add(-time.Duration(scaleDeadLetters-i) * time.Second),
				ConsumerGroup: []string{"payouts", "ledger", "notifications"}[i%3]})
		if err != nil {
			b.Fatal(err)
		}
		value, err := dlq.Encode(env)
		if err != nil {
			b.Fatal(err)
		}
		batch = append(batch, &sarama.ProducerMessage{Topic: dlqTopic, Partition: int32(i % 3), Key: sarama.ByteEncoder(key), Value: sarama.ByteEncoder(value)})
		if len(batch) == cap(batch) || i == scaleDeadLetters-1 {
			if err := p.SendMessages(batch); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
}

// thousandsOf writes n as the pages do: 100,000.
func thousandsOf(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
