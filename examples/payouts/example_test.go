package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/courierkit/courier/consumer"
	"github.com/courierkit/courier/examples/payouts/psp"
)

// The PSP client's errors steer the consumer: a PSP that is down is
// consumer.Unavailable (the breaker counts it and the partition pauses),
// a refused payout is consumer.Permanent (dead-lettered at once).
func Example_pay() {
	stub, err := psp.Start()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stub.Close()
	client := psp.NewClient(stub.URL(), time.Second)
	ctx := context.Background()

	stub.SetMode(psp.ModeFail)
	err = client.Pay(ctx, psp.Payout{ID: "p-1", OrderID: "order-1", AmountCents: 500, Currency: "EUR"})
	fmt.Println("PSP down: unavailable", consumer.IsUnavailable(err))

	stub.SetMode(psp.ModeOK)
	err = client.Pay(ctx, psp.Payout{ID: "p-2", OrderID: "order-2", AmountCents: -5, Currency: "EUR"})
	fmt.Println("bad amount: permanent", errors.As(err, new(*consumer.PermanentError)))

	fmt.Println("paid:", client.Pay(ctx, psp.Payout{ID: "p-3", OrderID: "order-3", AmountCents: 500, Currency: "EUR"}) == nil)
	// Output:
	// PSP down: unavailable true
	// bad amount: permanent true
	// paid: true
}
