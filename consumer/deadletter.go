package consumer

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/retrytopics"
)

// deadLetters is where the consumer's dead letters go: a message given up
// on is written by writer to the dead-letter topic of its main topic.
type deadLetters struct {
	writer *dlq.Writer
	suffix string // Config.DeadLetterSuffix
}

// deadLetterTopic is the dead-letter topic of the message.
func (d *delivery) deadLetterTopic() string {
	return dlq.Topic(d.originPlace().Topic, d.p.deadLetters.suffix)
}

// deadLetterRoute is the route of a message given up on.
func (d *delivery) deadLetterRoute(cause error) route {
	kind := dlq.KindRetriesExhausted
	if !d.p.c.retryable(cause) {
		kind = dlq.KindPermanent
	}
	return route{cause: cause, kind: kind}
}

// writeDeadLetter writes the message to its dead-letter topic and calls
// OnDeadLetter with ctx. With Config.TracerProvider, ctx carries the
// write's span, whose trace context the dead-letter record carries.
func (d *delivery) writeDeadLetter(ctx context.Context, r route) error {
	c := d.p.c
	origin := d.origin()
	failure := dlq.Failure{
		Error:         errorText(r.cause),
		Kind:          r.kind,
		Attempts:      d.failedAttempts(),
		FailedAt:      time.Now(),
		FirstFailedAt: d.firstFailed,
		CorrelationID: d.m.CorrelationID,
		ConsumerGroup: c.cfg.Group,
		ReplayCount:   dlq.ReplayCount(origin.Headers),
	}
	env, err := dlq.New(origin, failure)
	if err != nil {
		// A value read from Kafka the envelope cannot hold must not stop
		// the partition: write what is certain, and say what was left out.
		origin.Partition, origin.Offset, origin.Timestamp = dlq.NoPartition, dlq.NoOffset, time.Time{}
		failure.FirstFailedAt = time.Time{}
		failure.Error = fmt.Sprintf("%s (dead letter without its original place: %v)", failure.Error, err)
		if env, err = dlq.New(origin, failure); err != nil {
			return err
		}
	}
	wctx := d.p.workCtx
	if c.tracer != nil {
		wctx = trace.ContextWithSpan(wctx, trace.SpanFromContext(ctx)) // for tracedPublisher
	}
	w, err := d.p.deadLetters.writer.Write(wctx, env)
	if err != nil {
		return err
	}
	d.sent(ctx, w.Partition, w.Offset)
	c.metrics.Message(d.m, OutcomeDeadLettered)
	d.log().Error("message dead-lettered", "error", r.cause, "error_kind", r.kind, "retry_count", failure.Attempts,
		"dlq_topic", w.Topic, "dlq_partition", w.Partition, "dlq_offset", w.Offset, "dlq_format", w.Format)
	if c.cfg.OnDeadLetter != nil {
		c.guard("Config.OnDeadLetter", func() {
			c.cfg.OnDeadLetter(ctx, DeadLetter{Message: d.m, Err: r.cause, Envelope: env, Written: w})
		})
	}
	return nil
}

// origin is the message as it was on its main topic, as the dlq envelope
// holds it: a message from a retry topic has the main topic's place and
// timestamp, and its headers without the retry headers.
func (d *delivery) origin() dlq.Original {
	o := d.originPlace()
	o.Key, o.Value = d.m.Key, d.m.Value
	headers := d.m.Headers
	if d.retried() != nil || d.malformed() != nil {
		headers = retrytopics.Strip(headers)
	}
	o.Headers = make([]dlq.Header, 0, len(headers))
	for _, h := range headers {
		if h != nil {
			o.Headers = append(o.Headers, dlq.Header(*h))
		}
	}
	return o
}

// originPlace is where and when the message was on its main topic: its
// topic, partition, offset and timestamp (unknown for a malformed retry
// record), without its key, value and headers.
func (d *delivery) originPlace() dlq.Original {
	m := d.m
	switch r := d.retried(); {
	case d.malformed() != nil:
		return dlq.Original{Topic: d.p.topology.Topic, Partition: dlq.NoPartition, Offset: dlq.NoOffset, Timestamp: m.Timestamp}
	case r != nil:
		return dlq.Original{Topic: r.OriginalTopic, Partition: r.OriginalPartition, Offset: r.OriginalOffset, Timestamp: r.OriginalTimestamp}
	}
	return dlq.Original{Topic: m.Topic, Partition: m.Partition, Offset: m.Offset, Timestamp: m.Timestamp}
}

// errorText is the handler's error as text. fmt, unlike a call of Error,
// survives an error whose Error panics (a typed nil pointer, say): it says
// "<nil>" or names the panic, instead of taking the consumer down.
func errorText(err error) string { return fmt.Sprint(err) }
