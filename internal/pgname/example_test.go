package pgname_test

import (
	"fmt"

	"github.com/courierkit/courier/internal/pgname"
)

func ExampleNewTable() {
	table, err := pgname.NewTable("", "")
	fmt.Println(table, err)
	table, err = pgname.NewTable("billing", "billing_outbox")
	fmt.Println(table, table.Derived("migrations"), err)
	_, err = pgname.NewTable("billing", "outbox; DROP TABLE orders")
	fmt.Println(err)
	// Output:
	// public.courier_outbox <nil>
	// billing.billing_outbox billing.billing_outbox_migrations <nil>
	// invalid PostgreSQL identifier: Table "outbox; DROP TABLE orders" must be a lower-case identifier (letters a-z, digits, underscores; not starting with a digit)
}
