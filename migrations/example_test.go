package migrations_test

import (
	"context"
	"fmt"
	"log"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/migrations"
)

// Apply the outbox migrations at service start-up. Up is idempotent and safe
// to call from every replica at once.
func ExampleMigrator_Up() {
	ctx := context.Background()
	pool := exampleDB(ctx, "courier_example_billing")
	defer pool.Close()

	migrator, err := migrations.New(migrations.Config{Schema: "courier_example_billing", Table: "billing_outbox"})
	if err != nil {
		log.Fatal(err)
	}
	applied, err := migrator.Up(ctx, pool)
	if err != nil {
		log.Fatal(err)
	}
	for _, m := range applied {
		fmt.Printf("applied %04d_%s\n", m.Version, m.Name)
	}
	applied, err = migrator.Up(ctx, pool)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("second run applied", len(applied))
	// Output:
	// applied 0001_create_outbox
	// applied 0002_notify_trigger
	// applied 0003_drop_key_order
	// applied 0004_split_outbox
	// applied 0005_index_key_hash
	// applied 0006_activity
	// applied 0007_audit
	// applied 0008_held_partition
	// second run applied 0
}

// Create the inbox table that dedupe.Inbox records processed message ids in.
// Its versions are kept apart from the outbox's, in courier_inbox_migrations.
func ExampleNewInbox() {
	ctx := context.Background()
	pool := exampleDB(ctx, "courier_example_inbox")
	defer pool.Close()

	migrator, err := migrations.NewInbox(migrations.Config{Schema: "courier_example_inbox"})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := migrator.Up(ctx, pool); err != nil {
		log.Fatal(err)
	}
	states, err := migrator.Status(ctx, pool)
	if err != nil {
		log.Fatal(err)
	}
	for _, s := range states {
		fmt.Printf("%04d_%s applied: %t\n", s.Version, s.Name, s.Applied)
	}
	// Output:
	// 0001_create_inbox applied: true
}

// exampleDB connects to the test database, where schema does not exist
// (any left from an earlier run is dropped).
func exampleDB(ctx context.Context, schema string) *pgxpool.Pool {
	pool, err := pgxpool.New(ctx, testkit.DatabaseURL())
	if err != nil {
		log.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE"); err != nil {
		log.Fatalf("%v (is PostgreSQL running? try `make services`)", err)
	}
	return pool
}
