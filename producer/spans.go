package producer

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"
)

// tracerName names the relay's tracer (RelayConfig.TracerProvider).
const tracerName = "github.com/courierkit/courier/producer"

// AttrOutboxWait is the attribute of an event's "create" span that says
// how long the event waited in the outbox, from its enqueue to the start
// of its publish, in seconds.
const AttrOutboxWait = attribute.Key("courier.outbox.wait_seconds")

// AttrAttempt is the attribute of an event's "create" span that numbers
// the relay's publish attempts of the event, from 1.
const AttrAttempt = attribute.Key("courier.attempt")

// relaySpans are the spans of one publish: the batch's and one per event,
// in the order of the events; nil without a tracer.
type relaySpans struct {
	batch  trace.Span
	events []trace.Span
}

// startSpans starts the spans of publishing events, and sets each event's
// traceparent and tracestate to its own span's, for its record. The batch's
// span links to each event's, as many as the SDK keeps (128 by default). It returns nil, and does
// nothing else, when the relay has no tracer.
func (r *Relay) startSpans(ctx context.Context, events []*claimedEvent) *relaySpans {
	if r.tracer == nil {
		return nil
	}
	kafka := semconv.MessagingSystemKafka
	batchCtx, batch := r.tracer.Start(ctx, "send", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(kafka, semconv.MessagingOperationTypeSend, semconv.MessagingOperationName("send"),
			semconv.MessagingBatchMessageCount(len(events))))
	now := time.Now()
	s := &relaySpans{batch: batch, events: make([]trace.Span, len(events))}
	for i, e := range events {
		// The enqueue's span is the parent; an event enqueued outside any
		// span is a child of its batch's.
		parent := traceContext.Extract(batchCtx, propagation.MapCarrier(e.Headers))
		attrs := []attribute.KeyValue{kafka, semconv.MessagingOperationTypeCreate, semconv.MessagingOperationName("create"),
			semconv.MessagingDestinationName(e.Topic), semconv.MessagingMessageID(e.ID.String()),
			AttrOutboxWait.Float64(max(now.Sub(e.CreatedAt), 0).Seconds()), AttrAttempt.Int(e.Attempts + 1)}
		if e.Key != nil {
			attrs = append(attrs, semconv.MessagingKafkaMessageKey(*e.Key))
		}
		spanCtx, span := r.tracer.Start(parent, "create "+e.Topic, trace.WithSpanKind(trace.SpanKindProducer),
			trace.WithTimestamp(now), trace.WithAttributes(attrs...))
		s.events[i] = span
		batch.AddLink(trace.Link{SpanContext: span.SpanContext()})
		carrier := propagation.MapCarrier{}
		traceContext.Inject(spanCtx, carrier)
		e.traceParent, e.traceState = carrier[HeaderTraceParent], carrier[HeaderTraceState]
	}
	return s
}

// end ends the spans, each event's with its publish error, if any.
func (s *relaySpans) end(events []*claimedEvent, errs []error) {
	if s == nil {
		return
	}
	failed := 0
	for i, span := range s.events {
		if err := errs[i]; err != nil {
			failed++
			span.SetAttributes(semconv.ErrorTypeKey.String(failureType(err)))
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
	if failed > 0 {
		s.batch.SetStatus(codes.Error, "events failed to publish")
	}
	s.batch.End()
}

// failureType is the error.type of a failed publish: the failure's class
// (see classify), or "held_back" for an event held behind its key.
func failureType(err error) string {
	if errors.Is(err, errHeldBack) {
		return "held_back"
	}
	return classify(err).String()
}
