package producer

import (
	"context"
	"strconv"
	"testing"
)

// BenchmarkEnqueueBatchColumns measures what EnqueueBatch does in Go for a
// batch of 100 JSON events before PostgreSQL sees it: validation, ids,
// trace context, and the rows of its COPY.
func BenchmarkEnqueueBatchColumns(b *testing.B) {
	o := &Outbox{maxPayload: DefaultMaxPayloadBytes}
	events := make([]Event, 100)
	for i := range events {
		k := "order-" + strconv.Itoa(i)
		events[i] = Event{Topic: "orders", Key: k, Type: "OrderCreated",
			Payload: []byte(`{"order_id":"` + k + `","status":"created","note":"` + strconv.Itoa(i*7919) + `"}`)}
	}
	for b.Loop() {
		c, err := o.columns(context.Background(), events)
		if err != nil {
			b.Fatal(err)
		}
		rows := newCopyRows(c)
		for rows.Next() {
			if _, err := rows.Values(); err != nil {
				b.Fatal(err)
			}
		}
	}
}
