package main

import (
	"context"
	"os"

	"github.com/courierkit/courier/internal/testkit"
)

// courier migrate status reports which migrations a schema has; this one has
// none yet.
func Example_migrateStatus() {
	run(context.Background(), []string{"migrate", "status", "--database-url", testkit.DatabaseURL(), "--schema", "courier_example_never_migrated"}, os.Stdout, os.Stderr)
	// Output:
	// VERSION  NAME            APPLIED AT
	// 0001     create_outbox   not applied
	// 0002     notify_trigger  not applied
	// 0003     drop_key_order  not applied
	// 0004     split_outbox    not applied
	// 0005     index_key_hash  not applied
	// 0006     activity        not applied
	// 0007     audit           not applied
	// 0008     held_partition  not applied
}
