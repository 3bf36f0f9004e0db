// Package recordtrace is the OpenTelemetry side of courier's Kafka records,
// for the packages that make spans around them (consumer, dlq): the W3C
// trace context (traceparent, tracestate) a record's headers carry, the
// "send" span of a record written on, and a failure recorded on a span,
// after the OpenTelemetry messaging semantic conventions.
package recordtrace

import (
	"context"
	"fmt"
	"reflect"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/courierkit/courier/internal/ceheader"
	"github.com/courierkit/courier/internal/textcut"
)

// HeaderState is the W3C trace context header that Stamp drops when a
// span has no trace state.
const HeaderState = ceheader.TraceState

var propagator propagation.TraceContext

// Header is a record header as recordtrace reads and writes it: any type
// of record.Header's shape (this package, low-level, imports none of
// courier's public ones).
type Header interface{ ~struct{ Key, Value []byte } }

// header is the shape every Header converts to and from.
type header = struct{ Key, Value []byte }

// SpanContext is the span context the traceparent (and tracestate) headers
// of a record carry, the last of each name counting; it is invalid when
// there is no traceparent or it is malformed.
func SpanContext[H Header](headers []H) trace.SpanContext {
	ctx := propagator.Extract(context.Background(), &carrier[H]{headers: headers})
	return trace.SpanContextFromContext(ctx)
}

// Stamp returns a copy of headers whose traceparent and tracestate are
// those of the span of ctx: the first header of each name takes the new
// value where it stands, later ones are dropped, and a missing one is
// appended (tracestate only when the span has one, an old one is dropped
// otherwise). Without a valid span context in ctx, headers come back as
// they are. headers itself is not modified.
func Stamp[H Header](ctx context.Context, headers []H) []H {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return headers
	}
	c := &carrier[H]{headers: make([]H, 0, len(headers)+2)}
	c.headers = append(c.headers, headers...)
	propagator.Inject(ctx, c)
	if sc.TraceState().Len() == 0 {
		c.drop(HeaderState, 0)
	}
	return c.headers
}

// carrier reads and writes the trace context headers of a record.
type carrier[H Header] struct{ headers []H }

// Get returns the value of the last header named key.
func (c *carrier[H]) Get(key string) string {
	for i := len(c.headers) - 1; i >= 0; i-- {
		if h := header(c.headers[i]); string(h.Key) == key {
			return string(h.Value)
		}
	}
	return ""
}

// Set gives the first header named key the value and drops the later ones,
// or appends one.
func (c *carrier[H]) Set(key, value string) {
	for i := range c.headers {
		if h := header(c.headers[i]); string(h.Key) == key {
			c.headers[i] = H(header{Key: h.Key, Value: []byte(value)})
			c.drop(key, i+1)
			return
		}
	}
	c.headers = append(c.headers, H(header{Key: []byte(key), Value: []byte(value)}))
}

// drop removes the headers named key from index from on.
func (c *carrier[H]) drop(key string, from int) {
	kept := c.headers[:from]
	for _, h := range c.headers[from:] {
		if string(header(h).Key) != key {
			kept = append(kept, h)
		}
	}
	c.headers = kept
}

func (c *carrier[H]) Keys() []string {
	keys := make([]string, len(c.headers))
	for i, h := range c.headers {
		keys[i] = string(header(h).Key)
	}
	return keys
}

// Send starts the producer span of a record written to topic: "send
// <topic>", with the messaging attributes (system kafka, operation send,
// destination topic, message id id when not empty) and attrs. Its parent
// is the span of ctx; opts add to the span's options (links, say).
func Send(ctx context.Context, tracer trace.Tracer, topic, id string, opts []trace.SpanStartOption, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	base := []attribute.KeyValue{
		semconv.MessagingSystemKafka,
		semconv.MessagingOperationTypeSend,
		semconv.MessagingOperationName("send"),
		semconv.MessagingDestinationName(topic),
	}
	if id != "" {
		base = append(base, semconv.MessagingMessageID(Text(id)))
	}
	opts = append(opts, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(base...), trace.WithAttributes(attrs...))
	return tracer.Start(ctx, "send "+topic, opts...)
}

// Fail records err on span: an error status with its text, an exception
// event (as span.RecordError makes one) and its error.type. The text is
// read through fmt, which survives an error whose Error panics (a typed nil
// pointer, say), where RecordError would panic too, and made valid UTF-8.
func Fail(span trace.Span, err error) {
	text, typ := Text(fmt.Sprint(err)), typeName(err)
	span.SetStatus(codes.Error, text)
	span.SetAttributes(semconv.ErrorTypeKey.String(typ))
	span.AddEvent(semconv.ExceptionEventName, trace.WithAttributes(
		semconv.ExceptionType(typ),
		semconv.ExceptionMessage(text),
	))
}

// typeName names the type of err as span.RecordError does: package path
// and name, or how Go prints it (a pointer, a builtin type).
func typeName(err error) string {
	t := reflect.TypeOf(err)
	if t == nil {
		return "<nil>"
	}
	if t.PkgPath() == "" || t.Name() == "" {
		return t.String()
	}
	return t.PkgPath() + "." + t.Name()
}

// Text is s as an attribute value: invalid UTF-8 (a header or key is any
// bytes) replaced with U+FFFD, which exporters need (protobuf strings are
// UTF-8), and cut to MaxTextBytes, so that a huge key read from Kafka is
// not copied into every span of its message.
func Text(s string) string { return textcut.Cut(s, MaxTextBytes, "") }

// MaxTextBytes bounds an attribute value Text makes: the longest key or id
// an event of courier's outbox can have.
const MaxTextBytes = ceheader.MaxAttributeBytes
