package producer_test

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/courierkit/courier/producer"
	"github.com/courierkit/courier/record"
)

// TestRelaySpansContinueTheEnqueuesTrace: with a TracerProvider, the relay
// makes a "send" span per batch and a "create <topic>" span per event. An
// event enqueued in a span gets a create span that is that span's child,
// one enqueued outside any span a child of its batch's; the batch's span
// links to each; each record carries its own create span's traceparent;
// a failed publish marks its span with an error.
func TestRelaySpansContinueTheEnqueuesTrace(t *testing.T) {
	t.Parallel()
	pg, out := setup(t)
	exporter := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	ctx, enqueueSpan := tp.Tracer("app").Start(context.Background(), "place order")
	traced, err := out.Enqueue(ctx, pg.Pool, orderCreated("o-1"))
	if err != nil {
		t.Fatal(err)
	}
	enqueueSpan.End()
	untraced := enqueue(t, pg, out, orderCreated("o-2"))
	failing := enqueue(t, pg, out, orderCreated("o-3"))
	pub := &fakePublisher{}
	pub.setFail(failID(failing, errors.New("broker says no")))
	relay := newRelay(t, pg, nil, producer.RelayConfig{Publisher: pub, TracerProvider: tp})
	runOnce(t, relay)

	var batch tracetest.SpanStub
	creates := map[string]tracetest.SpanStub{} // by messaging.message.id
	for _, s := range exporter.GetSpans() {
		switch s.Name {
		case "send":
			batch = s
		case "create orders":
			creates[attr(s, "messaging.message.id")] = s
		}
	}
	if batch.Name == "" || len(creates) != 3 {
		t.Fatalf("spans %v, want a send span and 3 create spans", names(exporter.GetSpans()))
	}
	if batch.SpanKind != trace.SpanKindClient || len(batch.Links) != 3 || batch.Status.Code != codes.Error {
		t.Errorf("batch span: kind %v, %d links, status %v; want client, 3 links, an error (one event failed)", batch.SpanKind, len(batch.Links), batch.Status)
	}
	linked := map[trace.SpanID]bool{}
	for _, l := range batch.Links {
		linked[l.SpanContext.SpanID()] = true
	}
	want := map[string]trace.SpanContext{ // the parent each create span must have
		traced.ID.String(): enqueueSpan.SpanContext(), untraced.String(): batch.SpanContext, failing.String(): batch.SpanContext,
	}
	for id, parent := range want {
		s := creates[id]
		if s.Parent.SpanID() != parent.SpanID() || s.SpanContext.TraceID() != parent.TraceID() {
			t.Errorf("create span of %s: parent %v in trace %v, want %v in trace %v", id, s.Parent.SpanID(), s.SpanContext.TraceID(), parent.SpanID(), parent.TraceID())
		}
		if s.SpanKind != trace.SpanKindProducer || !linked[s.SpanContext.SpanID()] {
			t.Errorf("create span of %s: kind %v, linked from the batch %v; want producer, linked", id, s.SpanKind, linked[s.SpanContext.SpanID()])
		}
		if attr(s, "messaging.destination.name") != "orders" || attr(s, "messaging.system") != "kafka" ||
			attr(s, "messaging.kafka.message.key") == "" || attr(s, "courier.outbox.wait_seconds") == "" || attr(s, "courier.attempt") != "1" {
			t.Errorf("create span of %s: attributes %v", id, s.Attributes)
		}
	}
	if s := creates[failing.String()]; s.Status.Code != codes.Error || attr(s, "error.type") != "refused" {
		t.Errorf("the failed event's span: status %v, error.type %q; want an error, refused", s.Status, attr(s, "error.type"))
	}
	for _, r := range pub.ackedOn("orders") {
		id := recordHeader(r, producer.HeaderID)
		if got, want := recordHeader(r, producer.HeaderTraceParent), traceParent(creates[id].SpanContext); got != want {
			t.Errorf("record %s carries traceparent %q, want its create span's %q", id, got, want)
		}
	}
	if n := len(pub.ackedOn("orders")); n != 2 {
		t.Errorf("%d records acknowledged, want 2", n)
	}
}

// TestRelayWithoutTracerPublishesTheStoredTraceparent: without a
// TracerProvider the relay makes no span and publishes the traceparent
// Enqueue stored, and none for an event enqueued outside a span.
func TestRelayWithoutTracerPublishesTheStoredTraceparent(t *testing.T) {
	t.Parallel()
	pg, out := setup(t)
	exporter := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ctx, span := tp.Tracer("app").Start(context.Background(), "place order")
	traced, err := out.Enqueue(ctx, pg.Pool, orderCreated("o-1"))
	if err != nil {
		t.Fatal(err)
	}
	span.End()
	untraced := enqueue(t, pg, out, orderCreated("o-2"))
	pub := &fakePublisher{}
	runOnce(t, newRelay(t, pg, nil, producer.RelayConfig{Publisher: pub}))
	got := map[string]string{}
	for _, r := range pub.ackedOn("orders") {
		got[recordHeader(r, producer.HeaderID)] = recordHeader(r, producer.HeaderTraceParent)
	}
	if got[traced.ID.String()] != traceParent(span.SpanContext()) || got[untraced.String()] != "" {
		t.Errorf("traceparents %v, want the enqueue's for %s and none for %s", got, traced.ID, untraced)
	}
	if spans := exporter.GetSpans(); len(spans) != 1 {
		t.Errorf("spans %v, want only the application's", names(spans))
	}
}

func attr(s tracetest.SpanStub, key string) string {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value.Emit()
		}
	}
	return ""
}

func names(spans tracetest.SpanStubs) []string {
	out := make([]string, len(spans))
	for i, s := range spans {
		out[i] = s.Name
	}
	return out
}

// traceParent is sc as a W3C traceparent header.
func traceParent(sc trace.SpanContext) string {
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-" + sc.TraceFlags().String()
}

var _ record.Publisher = (*fakePublisher)(nil)

// TestRelaySpansReplaceAMalformedTraceContext: an event stored with a
// malformed traceparent and a tracestate is published with its create
// span's traceparent (a child of its batch's span) and without the stored
// tracestate, which belonged to no trace it is in.
func TestRelaySpansReplaceAMalformedTraceContext(t *testing.T) {
	t.Parallel()
	pg, out := setup(t)
	exporter := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ev := orderCreated("o-1")
	ev.Headers = map[string]string{producer.HeaderTraceParent: "00-not-a-trace-01", producer.HeaderTraceState: "vendor=1"}
	id := enqueue(t, pg, out, ev)
	pub := &fakePublisher{}
	runOnce(t, newRelay(t, pg, nil, producer.RelayConfig{Publisher: pub, TracerProvider: tp}))

	var batch, create tracetest.SpanStub
	for _, s := range exporter.GetSpans() {
		switch s.Name {
		case "send":
			batch = s
		case "create orders":
			create = s
		}
	}
	if create.Parent.SpanID() != batch.SpanContext.SpanID() {
		t.Errorf("create span's parent %s, want its batch's %s", create.Parent.SpanID(), batch.SpanContext.SpanID())
	}
	acked := pub.ackedOn("orders")
	if len(acked) != 1 || recordHeader(acked[0], producer.HeaderID) != id.String() {
		t.Fatalf("acknowledged %d records, want the event", len(acked))
	}
	if got := recordHeader(acked[0], producer.HeaderTraceParent); got != traceParent(create.SpanContext) {
		t.Errorf("traceparent %q, want the create span's %q", got, traceParent(create.SpanContext))
	}
	for _, h := range acked[0].Headers {
		if string(h.Key) == producer.HeaderTraceState {
			t.Errorf("the record keeps the stored tracestate %q", h.Value)
		}
	}
}
