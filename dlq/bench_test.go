package dlq_test

import (
	"strings"
	"testing"
	"time"

	"github.com/courierkit/courier/dlq"
)

// BenchmarkNewRecord measures what a consumer pays per dead letter before
// producing it: dlq.New then Envelope.Record, for a message as the relay
// writes it (~200 bytes of JSON, the CloudEvents headers). Run it with
//
//	go test -run '^$' -bench NewRecord -benchmem ./dlq/
func BenchmarkNewRecord(b *testing.B) {
	h := func(k, v string) dlq.Header { return dlq.Header{Key: []byte(k), Value: []byte(v)} }
	o := dlq.Original{Topic: "orders", Partition: 3, Offset: 1842, Timestamp: time.Now(), Key: []byte("order-42"),
		Value: []byte(`{"order_id":"order-42","n":1,"status":"created","note":"` + strings.Repeat("x", 140) + `"}`),
		Headers: []dlq.Header{h("ce_specversion", "1.0"), h("ce_id", "0195f3c4-0000-7000-8000-000000000001"),
			h("ce_type", "OrderCreated"), h("ce_source", "courier"), h("ce_time", "2026-01-16T09:59:58.12Z"),
			h("content-type", "application/json"), h("ce_correlationid", "corr-order-42")}}
	f := dlq.Failure{Error: "bench: message fails for good", Kind: dlq.KindPermanent, FailedAt: time.Now(),
		CorrelationID: "corr-order-42", ConsumerGroup: "payouts"}
	b.ReportAllocs()
	for b.Loop() {
		env, err := dlq.New(o, f)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := env.Record(); err != nil {
			b.Fatal(err)
		}
	}
}
