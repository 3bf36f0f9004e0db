package integration_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/courierkit/courier/consumer"
	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/producer"
	"github.com/courierkit/courier/retrytopics"
)

// TestOneTraceFromEnqueueToReplay follows one event with OpenTelemetry's
// in-memory exporter: enqueued in a request's span, published by the
// relay, failed on its topic, moved to a retry tier, failed there,
// dead-lettered, replayed and handled. Every span from the request to the
// dead-letter write is in the request's trace, each the child of the one
// before; the replay starts a trace of its own, linked to the dead
// letter's span, and the handling of the replayed message is its child.
func TestOneTraceFromEnqueueToReplay(t *testing.T) {
	t.Parallel()
	s := newStack(t, 1)
	pg, out := outbox(t)
	exporter := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	ctx, request := tp.Tracer("orders-service").Start(context.Background(), "POST /orders")
	if _, err := out.Enqueue(ctx, pg.Pool, producer.Event{Topic: s.topic, Key: "order-1", Type: "OrderPaid", Payload: []byte(`{"order":1}`)}); err != nil {
		t.Fatal(err)
	}
	request.End()
	start(t, s.relay(t, pg, producer.RelayConfig{TracerProvider: tp}).Run)

	var fixed, handled, dead atomic.Int64
	cfg := s.consumerConfig(t, consumer.HandlerFunc(func(context.Context, *consumer.Message) error {
		if fixed.Load() == 0 {
			return errors.New("psp timeout")
		}
		handled.Add(1)
		return nil
	}))
	tier := retrytopics.TopicName(s.topic, "", 10*time.Millisecond)
	s.retryTiers(t, &cfg, 10*time.Millisecond)
	cfg.MaxAttempts, cfg.TracerProvider = 1, tp
	cfg.OnDeadLetter = func(context.Context, consumer.DeadLetter) { dead.Add(1) }
	runConsumer(t, cfg)
	testkit.WaitFor(t, 20*time.Second, "the event dead-lettered", func() bool { return dead.Load() == 1 })

	fixed.Store(1)
	report, err := dlq.Replay(context.Background(), dlq.ReplayConfig{Brokers: s.k.Brokers, Sarama: s.k.Config(),
		Topic: s.deadLetter, Group: "r." + testkit.UniqueName(t, 100), TracerProvider: tp})
	if err != nil || report.Moved != 1 {
		t.Fatalf("dlq.Replay = %+v, %v; want 1 moved", report, err)
	}
	// The attempt's span ends after the handler returns: wait for it.
	testkit.WaitFor(t, 20*time.Second, "the replayed event handled, its span ended", func() bool {
		n := 0
		for _, sp := range exporter.GetSpans() {
			if sp.Name == "process "+s.topic {
				n++
			}
		}
		return handled.Load() == 1 && n == 2
	})

	spans := exporter.GetSpans()
	byName := map[string][]tracetest.SpanStub{}
	for _, sp := range spans {
		byName[sp.Name] = append(byName[sp.Name], sp)
	}
	one := func(name string, kind trace.SpanKind) tracetest.SpanStub {
		t.Helper()
		if len(byName[name]) != 1 || byName[name][0].SpanKind != kind {
			t.Fatalf("want one %v span %q; the spans: %v", kind, name, spanNames(spans))
		}
		return byName[name][0]
	}
	create := one("create "+s.topic, trace.SpanKindProducer)
	move := one("send "+tier, trace.SpanKindProducer)
	inTier := one("process "+tier, trace.SpanKindConsumer)
	deadLetter := one("send "+s.deadLetter, trace.SpanKindProducer)
	processed := byName["process "+s.topic] // the first try, then the replayed message's
	replays := byName["send "+s.topic]
	if len(processed) != 2 || len(replays) != 1 {
		t.Fatalf("want 2 process %s spans and 1 replay span; the spans: %v", s.topic, spanNames(spans))
	}
	first, again := processed[0], processed[1]
	if first.StartTime.After(again.StartTime) {
		first, again = again, first
	}
	replay := replays[0]

	chain := []struct {
		what   string
		span   tracetest.SpanStub
		parent trace.SpanContext // in the same trace
	}{
		{"the relay's create span", create, request.SpanContext()},
		{"the first attempt", first, create.SpanContext},
		{"the move to the retry tier", move, create.SpanContext},
		{"the attempt in the tier", inTier, move.SpanContext},
		{"the dead-letter write", deadLetter, move.SpanContext},
		{"the replayed message's attempt", again, replay.SpanContext},
	}
	for _, c := range chain {
		if c.span.Parent.SpanID() != c.parent.SpanID() || c.span.SpanContext.TraceID() != c.parent.TraceID() {
			t.Errorf("%s (%s): parent %s in trace %s, want %s in trace %s", c.what, c.span.Name,
				c.span.Parent.SpanID(), c.span.SpanContext.TraceID(), c.parent.SpanID(), c.parent.TraceID())
		}
	}
	if replay.SpanContext.TraceID() == request.SpanContext().TraceID() {
		t.Errorf("the replay continues the request's trace; want a trace of its own, linked")
	}
	linked := false
	for _, l := range replay.Links {
		linked = linked || l.SpanContext.SpanID() == deadLetter.SpanContext.SpanID() && l.SpanContext.TraceID() == deadLetter.SpanContext.TraceID()
	}
	if !linked {
		t.Errorf("the replay's links %v lack the dead-letter write's span %s", replay.Links, deadLetter.SpanContext.SpanID())
	}
}

func spanNames(spans tracetest.SpanStubs) []string {
	out := make([]string, len(spans))
	for i, s := range spans {
		out[i] = s.Name + " (" + s.SpanKind.String() + ")"
	}
	return out
}
