package main

import (
	"context"
	"os"
)

// courier migrate status reports which migrations a schema has; this one has
// none yet.
func Example_migrateStatus() {
	url := os.Getenv("COURIER_TEST_DATABASE_URL")
	if url == "" {
		url = "postgres://postgres@127.0.0.1:5432/test"
	}
	run(context.Background(), []string{"migrate", "status", "--database-url", url, "--schema", "courier_example_never_migrated"}, os.Stdout, os.Stderr)
	// Output:
	// VERSION  NAME           APPLIED AT
	// 0001     create_outbox  not applied
}
