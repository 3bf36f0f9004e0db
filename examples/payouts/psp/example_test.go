package psp_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/courierkit/courier/consumer"
	"github.com/courierkit/courier/examples/payouts/psp"
)

// A PSP that pays each payout once, fails on demand, and whose client's
// errors tell a consumer what to do next.
func Example() {
	stub, err := psp.Start()
	if err != nil {
		log.Fatal(err)
	}
	defer stub.Close()
	client := psp.NewClient(stub.URL(), 2*time.Second)
	defer client.Close()
	ctx := context.Background()

	p := psp.Payout{ID: "evt-1", OrderID: "ord-1", AmountCents: 1250, Currency: "EUR"}
	fmt.Println("pay:", client.Pay(ctx, p))
	fmt.Println("pay again:", client.Pay(ctx, p)) // same ID: accepted, not paid twice

	stub.SetMode(psp.ModeFail)
	fmt.Println("pay while down:", client.Pay(ctx, psp.Payout{ID: "evt-2", OrderID: "ord-2", AmountCents: 990, Currency: "EUR"}))
	stub.SetMode(psp.ModeOK)

	err = client.Pay(ctx, psp.Payout{ID: "evt-3", OrderID: "ord-3", AmountCents: 0, Currency: "EUR"})
	var perm *consumer.PermanentError
	fmt.Println("pay nothing:", err, "| permanent:", errors.As(err, &perm))

	fmt.Printf("paid %d, calls %d, duplicates %d\n", stub.Paid(), stub.Calls(), stub.Duplicates())
	// Output:
	// pay: <nil>
	// pay again: <nil>
	// pay while down: psp: 503 Service Unavailable: the PSP is down (stub in ModeFail)
	// pay nothing: permanent: psp: 422 Unprocessable Entity: amount_cents is 0; it must be above 0 | permanent: true
	// paid 1, calls 4, duplicates 1
}
