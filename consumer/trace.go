package consumer

import (
	"context"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/courierkit/courier/internal/recordtrace"
	"github.com/courierkit/courier/record"
)

// traceContext reads the W3C trace context (traceparent, tracestate) of a
// message, so the handler's context continues the producer's trace. A
// missing or malformed traceparent leaves the context without a remote
// span.
var traceContext propagation.TraceContext

// headerCarrier lets the propagator read a message's headers.
type headerCarrier Headers

func (h headerCarrier) Get(key string) string {
	v, _ := Headers(h).Lookup(key)
	return string(v)
}

// Set is never called: the consumer only extracts.
func (h headerCarrier) Set(string, string) {}

func (h headerCarrier) Keys() []string {
	keys := make([]string, 0, len(h))
	for _, hd := range h {
		if hd != nil {
			keys = append(keys, string(hd.Key))
		}
	}
	return keys
}

// tracerName names the consumer's tracer (Config.TracerProvider): the
// package's import path.
const tracerName = "github.com/courierkit/courier/consumer"

// Span attributes of courier's own, beside the messaging ones: the
// attempt (Message.Attempt) and retry round (Message.RetryRound) of a
// "process" span, and where a "send" span moves a message on to.
const (
	attrAttempt    = attribute.Key("courier.attempt")
	attrRetryRound = attribute.Key("courier.retry_round")
	attrRoute      = attribute.Key("courier.route")
)

// Values of attrRoute: a retry tier, or the dead-letter topic.
const (
	routeRetry      = "retry"
	routeDeadLetter = "dead_letter"
)

// newTracer returns the tracer of tp; nil for no tp: no spans.
func newTracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		return nil
	}
	return tp.Tracer(tracerName, trace.WithSchemaURL(semconv.SchemaURL))
}

// startProcess starts the span of an attempt of m, a child of the span of
// ctx (the one m's traceparent names, if any), and returns ctx with it.
func (p *partition) startProcess(ctx context.Context, m *Message) (context.Context, trace.Span) {
	attrs := make([]attribute.KeyValue, 0, 10)
	attrs = append(attrs,
		semconv.MessagingSystemKafka,
		semconv.MessagingOperationTypeProcess,
		semconv.MessagingOperationName("process"),
		semconv.MessagingDestinationName(m.Topic),
		semconv.MessagingDestinationPartitionID(strconv.Itoa(int(m.Partition))),
		semconv.MessagingKafkaOffset(int(m.Offset)),
		attrAttempt.Int(m.Attempt),
		attrRetryRound.Int(m.RetryRound),
	)
	if m.ID != "" {
		attrs = append(attrs, semconv.MessagingMessageID(recordtrace.Text(m.ID)))
	}
	if m.Key != nil {
		attrs = append(attrs, semconv.MessagingKafkaMessageKey(recordtrace.Text(string(m.Key))))
	}
	return p.c.tracer.Start(ctx, p.processSpan, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...))
}

// endSpan ends span, failed with err unless err is nil.
func endSpan(span trace.Span, err error) {
	if err != nil {
		recordtrace.Fail(span, err)
	}
	span.End()
}

// startSend starts the span of the write of d to r, a child of the span of
// ctx (the same parent as d's attempts), and returns ctx with it.
func (d *delivery) startSend(ctx context.Context, r route) (context.Context, trace.Span) {
	to, route := d.deadLetterTopic(), routeDeadLetter
	if r.tier != nil {
		to, route = r.tier.Topic, routeRetry
	}
	return recordtrace.Send(ctx, d.p.c.tracer, to, d.m.ID, nil, attrRoute.String(route))
}

// sent adds where the record went to the span of ctx, the write's.
func (d *delivery) sent(ctx context.Context, partition int32, offset int64) {
	if d.p.c.tracer == nil {
		return
	}
	trace.SpanFromContext(ctx).SetAttributes(
		semconv.MessagingDestinationPartitionID(strconv.Itoa(int(partition))),
		semconv.MessagingKafkaOffset(int(offset)),
	)
}

// tracedPublisher gives each record it publishes the trace context of the
// span of Publish's context (a dead-letter write's): its traceparent and
// tracestate headers replace those the record had (the original's, in raw
// mode) or are added (an envelope's record has none).
type tracedPublisher struct{ record.Publisher }

func (p tracedPublisher) Publish(ctx context.Context, records []*record.Record) []error {
	for _, r := range records {
		r.Headers = recordtrace.Stamp(ctx, r.Headers)
	}
	return p.Publisher.Publish(ctx, records)
}
