package dlq

import (
	"context"
	"errors"
	"strconv"

	"github.com/IBM/sarama"
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/courierkit/courier/internal/ceheader"
	"github.com/courierkit/courier/internal/recordtrace"
)

// tracerName names Replay's tracer (ReplayConfig.TracerProvider): the
// package's import path.
const tracerName = "github.com/courierkit/courier/dlq"

// attrOperation is the courier operation of a span: "replay" on Replay's.
const attrOperation = attribute.Key("courier.operation")

// newTracer returns the tracer of tp; nil for no tp: no spans.
func newTracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		return nil
	}
	return tp.Tracer(tracerName, trace.WithSchemaURL(semconv.SchemaURL))
}

// startReplay starts the span of the replay of the dead letter m as msg, a
// child of the span of ctx linked to the dead letter's span, and gives msg
// its trace context (replacing the original's traceparent and tracestate).
// The dead letter's span is the one its record's traceparent names (the
// consumer's dead-letter write stamps it); without one, the one the
// original's traceparent names. A missing or malformed traceparent makes no
// link.
func (r *replayer) startReplay(ctx context.Context, m *sarama.ConsumerMessage, msg *sarama.ProducerMessage) trace.Span {
	var opts []trace.SpanStartOption
	link := recordtrace.SpanContext(recordHeaders(m))
	if !link.IsValid() {
		link = recordtrace.SpanContext(msg.Headers)
	}
	if link.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: link}))
	}
	id := ""
	for _, h := range msg.Headers {
		if string(h.Key) == ceheader.ID {
			id = string(h.Value)
		}
	}
	sctx, span := recordtrace.Send(ctx, r.tracer, msg.Topic, id, opts, attrOperation.String("replay"))
	msg.Headers = recordtrace.Stamp(sctx, msg.Headers)
	return span
}

// endSpans ends the spans of batch, once its write is known: failed
// names the records that failed, with their errors (see failedRecords);
// with failed nil, every record failed with sendErr, or none when sendErr
// is nil. Without a tracer (the batch's records have no span), it does
// nothing.
func endSpans(batch []pending, sendErr error, failed map[*sarama.ProducerMessage]error) {
	if len(batch) == 0 || batch[0].span == nil {
		return
	}
	for _, p := range batch {
		err := failed[p.msg]
		if failed == nil {
			err = sendErr
		}
		if err != nil {
			recordtrace.Fail(p.span, err)
		} else {
			p.span.SetAttributes(
				semconv.MessagingDestinationPartitionID(strconv.Itoa(int(p.msg.Partition))),
				semconv.MessagingKafkaOffset(int(p.msg.Offset)),
			)
		}
		p.span.End()
	}
}

// failedRecords returns the records the error of a batch's write names
// as failed, with their errors, and whether it names them: nil names none
// (an empty map), a sarama.ProducerErrors names some, and any other error
// says none of the batch was written (a nil map, false).
func failedRecords(sendErr error) (failed map[*sarama.ProducerMessage]error, named bool) {
	var perrs sarama.ProducerErrors
	if sendErr != nil && !errors.As(sendErr, &perrs) {
		return nil, false
	}
	failed = make(map[*sarama.ProducerMessage]error, len(perrs))
	for _, pe := range perrs {
		failed[pe.Msg] = pe.Err
	}
	return failed, true
}
