package producer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"log/slog"
	"time"

	"github.com/IBM/sarama"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/courierkit/courier/migrations"
	"github.com/courierkit/courier/producer"
	"github.com/courierkit/courier/record"
)

// Requeue exactly the events an operator confirmed: count them, ask, then
// requeue them in a transaction that records the action in the audit log,
// and roll back if the outbox changed in between.
func ExampleAdmin_CountRequeue() {
	ctx := context.Background()
	pool, admin := exampleConsole(ctx, "courier_example_requeue")
	defer pool.Close()

	f := producer.Filter{TenantID: "acme"} // failed and dead-lettered, by default
	confirmed, err := admin.CountRequeue(ctx, f)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("to requeue:", confirmed) // the operator says yes to this number

	tx, err := pool.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback(ctx) // a no-op after Commit
	inTx, err := producer.NewAdmin(tx, producer.AdminConfig{Schema: "courier_example_requeue"})
	if err != nil {
		log.Fatal(err)
	}
	n, err := inTx.Requeue(ctx, f)
	if err != nil {
		log.Fatal(err)
	}
	if n != confirmed {
		fmt.Println("the outbox changed since the count: nothing requeued")
		return
	}
	filter, err := json.Marshal(f)
	if err != nil {
		log.Fatal(err)
	}
	if err := inTx.Audit(ctx, producer.AuditEntry{Actor: "alice", Remote: "10.0.0.7", Action: "requeue", Filter: filter, Count: n}); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err)
	}

	entries, err := admin.AuditLog(ctx, 0, 10) // newest first
	if err != nil {
		log.Fatal(err)
	}
	for _, e := range entries {
		fmt.Printf("%s from %s: %s of %d events\n", e.Actor, e.Remote, e.Action, e.Count) // e.Filter holds f as JSON
	}
	// Output:
	// to requeue: 2
	// alice from 10.0.0.7: requeue of 2 events
}

// Count what a page of the console lists, page by page.
func ExampleAdmin_Count() {
	ctx := context.Background()
	pool, admin := exampleConsole(ctx, "courier_example_count")
	defer pool.Close()

	f := producer.Filter{Statuses: []string{producer.StatusDeadLettered}, Limit: 2}
	n, err := admin.Count(ctx, f) // at most producer.CountLimit
	if err != nil {
		log.Fatal(err)
	}
	page, err := admin.List(ctx, f)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d of %d:", len(page), n)
	for _, r := range page {
		fmt.Printf(" %s/%s", *r.TenantID, *r.AggregateID)
	}
	fmt.Println()
	f.AfterSeq = page[len(page)-1].Seq
	if page, err = admin.List(ctx, f); err != nil {
		log.Fatal(err)
	}
	fmt.Println("next page:", len(page))
	// Output:
	// 2 of 3: acme/order-1 globex/order-2
	// next page: 1
}

// Group the dead letters by topic and error, the largest group first.
func ExampleAdmin_DeadLetterGroups() {
	ctx := context.Background()
	pool, admin := exampleConsole(ctx, "courier_example_groups")
	defer pool.Close()

	groups, err := admin.DeadLetterGroups(ctx, 10)
	if err != nil {
		log.Fatal(err)
	}
	for _, g := range groups {
		fmt.Printf("%d on %s: %s\n", g.Count, g.Topic, g.Error)
	}
	// Output:
	// 3 on payments: kafka server: Message was too large, server rejected it to avoid allocation error
}

// Chart what the relays published over the last hour, minute by minute.
func ExampleAdmin_Activity() {
	ctx := context.Background()
	pool, admin := exampleConsole(ctx, "courier_example_activity")
	defer pool.Close()

	points, err := admin.Activity(ctx, time.Hour, time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	var published int64
	for _, p := range points { // p.At, p.Published, p.MeanLag, p.MaxLag
		published += p.Published
	}
	fmt.Printf("%d points, %d events published\n", len(points), published)
	// Output:
	// 60 points, 1 events published
}

// A console checks that the outbox has its audit log (migration 7), which
// a relay does not need, before it offers to change anything.
func ExampleAuditReady() {
	ctx := context.Background()
	pool, _ := exampleConsole(ctx, "courier_example_audit_ready")
	defer pool.Close()

	ok, err := producer.AuditReady(ctx, pool, "courier_example_audit_ready", "")
	if err != nil {
		log.Fatal(err)
	}
	if !ok {
		fmt.Println("no audit log: run `courier migrate up`")
		return
	}
	fmt.Println("audit log ready")
	// Output:
	// audit log ready
}

// exampleConsole migrates an outbox into a fresh schema and runs a relay
// once over four events: one of topic orders is published, three of topic
// payments are dead-lettered, the broker refusing them as too large.
func exampleConsole(ctx context.Context, schema string) (*pgxpool.Pool, *producer.Admin) {
	pool := exampleDB(ctx, schema)
	migrator, err := migrations.New(migrations.Config{Schema: schema})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := migrator.Up(ctx, pool); err != nil {
		log.Fatal(err)
	}
	outbox, err := producer.NewOutbox(producer.Config{Schema: schema})
	if err != nil {
		log.Fatal(err)
	}
	events := []producer.Event{{Topic: "orders", Key: "order-1", Type: "OrderCreated", Payload: []byte(`{}`)}}
	for i, tenant := range []string{"acme", "globex", "acme"} {
		id := fmt.Sprintf("order-%d", i+1)
		events = append(events, producer.Event{Topic: "payments", Key: id, Type: "PaymentTaken", Payload: []byte(`{}`),
			TenantID: tenant, AggregateType: "Order", AggregateID: id})
	}
	if _, err := outbox.EnqueueBatch(ctx, pool, events); err != nil {
		log.Fatal(err)
	}
	relay, err := producer.NewRelay(pool, producer.RelayConfig{Schema: schema, Publisher: refusingPayments{},
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := relay.RunOnce(ctx); err != nil {
		log.Fatal(err)
	}
	admin, err := producer.NewAdmin(pool, producer.AdminConfig{Schema: schema})
	if err != nil {
		log.Fatal(err)
	}
	return pool, admin
}

// refusingPayments stands in for a broker that takes the records of every
// topic but payments, which it refuses as too large.
type refusingPayments struct{}

func (refusingPayments) Publish(_ context.Context, records []*record.Record) []error {
	errs := make([]error, len(records))
	for i, r := range records {
		if r.Topic == "payments" {
			errs[i] = sarama.ErrMessageSizeTooLarge
		}
	}
	return errs
}

func (refusingPayments) Close() error { return nil }
