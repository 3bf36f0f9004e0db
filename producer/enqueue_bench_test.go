package producer_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/google/uuid"

	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/producer"
)

// BenchmarkEnqueue measures what an enqueue costs the business transaction
// on the test PostgreSQL, one client: each op is a transaction (BEGIN,
// Enqueue or EnqueueBatch, COMMIT). The cases: an event whose id Enqueue
// assigns (the common path), an event with an id of the application's
// own, one with an idempotency key, and batches of 100 of the first two
// (a COPY, resp. an INSERT). Run it with
//
//	go test -run '^$' -bench Enqueue -benchmem ./producer/
//
// beside a baseline run of the same command: the figures move with
// whatever else loads the machine.
func BenchmarkEnqueue(b *testing.B) {
	pg := testkit.Postgres(b)
	pg.Migrate(b)
	out, err := producer.NewOutbox(producer.Config{Schema: pg.Schema})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	n := 0
	event := func(ownID, keyed bool) producer.Event {
		n++
		k := "order-" + strconv.Itoa(n)
		e := producer.Event{Topic: "orders", Key: k, Type: "OrderCreated",
			Payload: []byte(`{"order_id":"` + k + `","status":"created"}`)}
		if ownID {
			e.ID = uuid.New()
		}
		if keyed {
			e.IdempotencyKey = k
		}
		return e
	}
	for _, c := range []struct {
		name         string
		size         int
		ownID, keyed bool
	}{
		{"one/assigned-id", 1, false, false},
		{"one/own-id", 1, true, false},
		{"one/idempotency-key", 1, false, true},
		{"batch100/assigned-id", 100, false, false},
		{"batch100/own-id", 100, true, false},
	} {
		b.Run(c.name, func(b *testing.B) {
			events := make([]producer.Event, c.size)
			for b.Loop() {
				for i := range events {
					events[i] = event(c.ownID, c.keyed)
				}
				tx, err := pg.Pool.Begin(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := out.EnqueueBatch(ctx, tx, events); err != nil {
					b.Fatal(err)
				}
				if err := tx.Commit(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*c.size), "µs/event")
		})
	}
}
