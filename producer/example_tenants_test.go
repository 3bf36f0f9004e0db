package producer_test

import (
	"context"
	"fmt"
	"log"
)

// Find the tenants whose events wait or were dead-lettered, the biggest
// first, with the rest summed.
func ExampleAdmin_CountByTenant() {
	ctx := context.Background()
	pool, admin := exampleConsole(ctx, "courier_example_tenants")
	defer pool.Close()

	counts, err := admin.CountByTenant(ctx, 1)
	if err != nil {
		log.Fatal(err)
	}
	for _, c := range counts.Top {
		fmt.Printf("%s: %d waiting, %d dead-lettered\n", c.TenantID, c.Waiting(), c.DeadLettered)
	}
	fmt.Printf("%d other tenant(s): %d waiting, %d dead-lettered\n", counts.OtherTenants, counts.Others.Waiting(), counts.Others.DeadLettered)
	// Output:
	// acme: 0 waiting, 2 dead-lettered
	// 1 other tenant(s): 0 waiting, 1 dead-lettered
}
