package consumer

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/trace"

	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/internal/recordtrace"
	"github.com/courierkit/courier/retrytopics"
)

// moves are the writes of a partition that move messages on: to the
// dead-letter topic or to a retry topic. They run beside the partition's
// handling: a message whose write is in flight stays unsettled (nothing is
// marked past it) while the partition goes on with the next messages.
type moves struct {
	// slots holds a token per write in flight; its capacity is
	// Config.MaxWritesInFlight.
	slots chan struct{}
	wg    sync.WaitGroup

	// failing counts the writes whose last try failed. While it is above
	// zero the partition takes no new message.
	failing atomic.Int32
	mu      sync.Mutex
	// recovered is closed when failing drops back to zero; nil while it is
	// zero.
	recovered chan struct{}
}

// failed records that a write failed for the first time.
func (l *moves) failed() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failing.Add(1) == 1 {
		l.recovered = make(chan struct{})
	}
}

// ended records that a write that had failed ended (written, or given up).
func (l *moves) ended() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failing.Add(-1) == 0 {
		close(l.recovered)
		l.recovered = nil
	}
}

// waitMoves waits while a write of the partition is failing, and reports
// whether the partition may handle the message it just took (false: the
// session ended while it waited).
func (p *partition) waitMoves() bool {
	if p.moves.failing.Load() == 0 {
		return true
	}
	p.moves.mu.Lock()
	recovered := p.moves.recovered
	p.moves.mu.Unlock()
	if recovered == nil {
		return true
	}
	select {
	case <-recovered:
		return true
	case <-p.claimCtx.Done():
		return false
	}
}

// route is where a message moves on to: a retry tier, or the dead-letter
// topic.
type route struct {
	// tier is the retry tier; nil for the dead-letter topic.
	tier *retrytopics.Tier
	// info is the retry headers of a tier write.
	info retrytopics.Info
	// cause is the last error; nil for a message deferred behind its key.
	cause error
	// kind is the dead letter's error kind.
	kind dlq.ErrorKind
}

// forward starts writing the message to its route, and reports whether it
// did (false: the session ended first). With MaxWritesInFlight writes
// of the partition in flight, it waits for one of them to end. The write
// retries until it succeeds or the session ends; once written, the message
// is settled.
func (d *delivery) forward(ctx context.Context, r route) bool {
	p := d.p
	for _, f := range p.features {
		if !f.moving(d, r) {
			return false
		}
	}
	select {
	case p.moves.slots <- struct{}{}:
	case <-p.claimCtx.Done():
		return false
	}
	if p.claimCtx.Err() != nil {
		<-p.moves.slots
		return false
	}
	p.moves.wg.Go(func() {
		defer func() { <-p.moves.slots }()
		to, written := d.write(ctx, r)
		p.c.metrics.InFlight(d.m.Topic, -1)
		if written {
			d.moved(to)
		} else {
			d.abandon()
		}
	})
	return true
}

// write writes the message to its route, retrying a failed write with the
// Backoff delays until it succeeds or the session ends, and reports where
// it was written, if it was. While it is failing, the partition takes no
// new message. A record too large for its retry topic goes to the
// dead-letter topic instead. With Config.TracerProvider, the writes to a
// topic have a span (its tries failed ones), a child of the span of ctx.
func (d *delivery) write(ctx context.Context, r route) (route, bool) {
	c := d.p.c
	failing := false
	var span trace.Span
	defer func() {
		if failing {
			d.p.moves.ended()
		}
		if span != nil {
			span.End()
		}
	}()
	wctx := ctx
	for writes := 1; ; writes++ {
		if c.tracer != nil && span == nil {
			wctx, span = d.startSend(ctx, r)
		}
		err := d.writeOnce(wctx, r)
		if err == nil {
			return r, true
		}
		if span != nil {
			recordtrace.Fail(span, err)
		}
		if r.tier != nil && dlq.TooLarge(err) {
			d.log().Warn("message too large for its retry topic; dead-lettering it", "error", err, "retry_topic", r.tier.Topic)
			r = d.tooLargeRoute(r, err)
			if span != nil {
				span.End()
				span = nil // the dead-letter write gets its own
			}
			continue
		}
		if !failing {
			failing = true
			d.p.moves.failed()
		}
		delay := c.cfg.Backoff.Delay(writes, rand.Float64)
		to := d.deadLetterTopic()
		if r.tier != nil {
			to = r.tier.Topic
		}
		d.log().Error("write failed; the partition takes no new message and nothing is committed past this one; retrying", "error", err,
			"to_topic", to, "writes", writes, "retry_in", delay)
		if !sleep(d.p.claimCtx, delay) {
			return r, false
		}
	}
}

// tooLargeRoute is the route of a message its retry topic refused as too
// large: the dead-letter topic, as a permanent failure (no retry topic
// takes it), naming the last error if it had one.
func (d *delivery) tooLargeRoute(r route, err error) route {
	cause := fmt.Errorf("too large for retry topic %s (raise its max.message.bytes above the main topic's): %w", r.tier.Topic, err)
	if r.cause != nil {
		cause = fmt.Errorf("%w; %w", r.cause, cause)
	}
	return route{cause: cause, kind: dlq.KindPermanent}
}

// writeOnce writes the message to its route once. With
// Config.TracerProvider, ctx carries the write's span, whose trace context
// the record carries.
func (d *delivery) writeOnce(ctx context.Context, r route) error {
	if r.tier != nil {
		return d.writeRetry(ctx, r)
	}
	return d.writeDeadLetter(ctx, r)
}
