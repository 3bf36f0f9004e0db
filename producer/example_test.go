package producer_test

import (
	"context"
	"fmt"
	"log"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/migrations"
	"github.com/courierkit/courier/producer"
)

// Write an order and its OrderCreated event in one transaction: the event is
// published if and only if the order commits.
func ExampleOutbox_Enqueue() {
	ctx := context.Background()
	pool := exampleDB(ctx, "courier_example_shop")

	// Once, at start-up: create the outbox table.
	migrator, err := migrations.New(migrations.Config{Schema: "courier_example_shop"})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := migrator.Up(ctx, pool); err != nil {
		log.Fatal(err)
	}
	outbox, err := producer.NewOutbox(producer.Config{Schema: "courier_example_shop"})
	if err != nil {
		log.Fatal(err)
	}

	created := producer.Event{
		Topic:          "orders",
		Key:            "order-42", // events of one key are published in order
		Type:           "OrderCreated",
		Payload:        []byte(`{"order_id":"order-42","amount_cents":1999}`),
		AggregateType:  "Order",
		AggregateID:    "order-42",
		IdempotencyKey: "order-42-created",
	}

	tx, err := pool.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback(ctx) // a no-op after Commit
	if _, err := tx.Exec(ctx, `INSERT INTO courier_example_shop.orders (id, amount_cents) VALUES ('order-42', 1999)`); err != nil {
		log.Fatal(err)
	}
	first, err := outbox.Enqueue(ctx, tx, created)
	if err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil { // commit publishes; rollback would remove the event
		log.Fatal(err)
	}
	fmt.Println("new event:", !first.Duplicate)

	// The same topic and idempotency key again: nothing is written.
	again, err := outbox.Enqueue(ctx, pool, created)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("duplicate of the first:", again.Duplicate && again.ID == first.ID)
	// Output:
	// new event: true
	// duplicate of the first: true
}

// exampleDB connects to the test database and gives the example a fresh
// schema with an orders table. The schema stays after the run for inspection
// with psql and is recreated by the next run.
func exampleDB(ctx context.Context, schema string) *pgxpool.Pool {
	pool, err := pgxpool.New(ctx, testkit.DatabaseURL())
	if err != nil {
		log.Fatal(err)
	}
	_, err = pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE; CREATE SCHEMA "+schema+
		"; CREATE TABLE "+schema+".orders (id text PRIMARY KEY, amount_cents int NOT NULL)")
	if err != nil {
		log.Fatalf("%v (is PostgreSQL running? try `make services`)", err)
	}
	return pool
}

// The largest payload an event can carry under the default limits: a
// minimal event's, and that of one with a key, a longer type and a header.
func ExampleConfig_MaxPayload() {
	minimal := producer.Event{Topic: "orders", Type: "X"}
	created := producer.Event{Topic: "orders", Key: "order-42", Type: "OrderCreated", Headers: map[string]string{"x-request-id": "r-1"}}
	fmt.Println(producer.Config{}.MaxPayload(minimal))
	fmt.Println(producer.Config{}.MaxPayload(created))
	// Output:
	// 1047947
	// 1047903
}
