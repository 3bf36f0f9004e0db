package producer_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/producer"
)

func TestRelayPublishesBinaryCloudEvents(t *testing.T) {
	t.Parallel()
	pg, out := setup(t)
	k := testkit.NewKafka(t)
	topic := k.Topic(t, 3)
	ctx := context.Background()

	traceID, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	spanID, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	spanCtx := trace.ContextWithSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: traceID, SpanID: spanID, TraceFlags: trace.FlagsSampled}))
	ev := producer.Event{
		Topic: topic, Key: "order-7", Type: "OrderCreated", Payload: []byte(`{"order_id":"order-7"}`),
		Headers:       map[string]string{"x-region": "eu"},
		AggregateType: "Order", AggregateID: "order-7", TenantID: "t-1", CorrelationID: "corr-7", CausationID: "cmd-7",
	}
	res, err := out.Enqueue(spanCtx, pg.Pool, ev)
	if err != nil {
		t.Fatal(err)
	}
	relay := newRelay(t, pg, k, producer.RelayConfig{Source: "orders-service"})
	batch, err := relay.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if batch.Claimed != 1 || batch.Published != 1 {
		t.Fatalf("RunOnce = %+v, want 1 claimed and published", batch)
	}
	msg := consume(t, k, topic).waitDistinct(1, 10*time.Second)[0]
	if string(msg.Key) != "order-7" || string(msg.Value) != `{"order_id":"order-7"}` {
		t.Fatalf("record key %q value %q", msg.Key, msg.Value)
	}
	want := map[string]string{
		"ce_specversion": "1.0", "ce_id": res.ID.String(), "ce_type": "OrderCreated", "ce_source": "orders-service",
		"content-type": "application/json", "ce_correlationid": "corr-7", "ce_causationid": "cmd-7",
		"ce_tenantid": "t-1", "ce_aggregatetype": "Order", "ce_aggregateid": "order-7", "x-region": "eu",
		"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	}
	for name, value := range want {
		if got := headerValue(msg, name); got != value {
			t.Errorf("header %s = %q, want %q", name, got, value)
		}
	}
	if tm, err := time.Parse(time.RFC3339Nano, headerValue(msg, "ce_time")); err != nil || time.Since(tm) > time.Minute {
		t.Errorf("ce_time %q: %v", headerValue(msg, "ce_time"), err)
	}
	if len(msg.Headers) != len(want)+1 {
		t.Errorf("%d headers, want %d: %v", len(msg.Headers), len(want)+1, msg.Headers)
	}
	if n := countRows(t, pg.Pool, "status = 'published' AND published_at IS NOT NULL AND retry_count = 0"); n != 1 {
		t.Fatalf("the event is not marked published")
	}
}
