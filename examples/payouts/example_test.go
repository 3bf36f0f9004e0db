package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/courierkit/courier/consumer"
)

// The PSP client's errors steer the consumer: a PSP that is down is
// consumer.Unavailable (the breaker counts it and the partition pauses),
// a refused payout is consumer.Permanent (dead-lettered at once).
func ExampleClient_Pay() {
	psp, err := Start()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer psp.Close()
	client := NewClient(psp.URL(), time.Second)
	ctx := context.Background()

	psp.SetMode(ModeFail)
	err = client.Pay(ctx, Payout{ID: "p-1", OrderID: "order-1", AmountCents: 500, Currency: "EUR"})
	fmt.Println("PSP down: unavailable", consumer.IsUnavailable(err))

	psp.SetMode(ModeOK)
	err = client.Pay(ctx, Payout{ID: "p-2", OrderID: "order-2", AmountCents: -5, Currency: "EUR"})
	fmt.Println("bad amount: permanent", errors.As(err, new(*consumer.PermanentError)))

	fmt.Println("paid:", client.Pay(ctx, Payout{ID: "p-3", OrderID: "order-3", AmountCents: 500, Currency: "EUR"}) == nil)
	// Output:
	// PSP down: unavailable true
	// bad amount: permanent true
	// paid: true
}
