package consumer

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"

	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/retrytopics"
)

// moves are the writes of a partition that move messages on: to the
// dead-letter topic or to a retry topic. They run beside the partition's
// handling: a message whose write is in flight stays unsettled (nothing is
// marked past it) while the partition goes on with the next messages.
type moves struct {
	// slots holds a token per write in flight; its capacity is
	// Config.MaxDeadLettersInFlight.
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
	case <-p.sessCtx.Done():
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

// deadLetterRoute is the route of a message given up on.
func (d *delivery) deadLetterRoute(cause error) route {
	kind := dlq.KindRetriesExhausted
	if !d.p.c.retryable(cause) {
		kind = dlq.KindPermanent
	}
	return route{cause: cause, kind: kind}
}

// failedRoute is where a message whose attempts failed with cause goes:
// the next retry tier when there is one and cause is retryable, else the
// dead-letter topic.
func (d *delivery) failedRoute(cause error) route {
	t := d.p.topology
	if t == nil || !d.p.c.retryable(cause) {
		return d.deadLetterRoute(cause)
	}
	tier, ok := t.Next(d.m.RetryRound)
	if !ok {
		return d.deadLetterRoute(cause)
	}
	return route{tier: &tier, info: d.retryInfo(tier.Round, tier, cause), cause: cause}
}

// retryInfo is the retry headers of the message moving to tier, in round.
func (d *delivery) retryInfo(round int, tier retrytopics.Tier, cause error) retrytopics.Info {
	o := d.originPlace()
	info := retrytopics.Info{
		Round:             round,
		FailedAttempts:    d.prior() + d.failed,
		OriginalTopic:     o.Topic,
		OriginalPartition: o.Partition,
		OriginalOffset:    o.Offset,
		OriginalTimestamp: o.Timestamp,
		NotBefore:         time.Now().Add(tier.Delay),
		FirstFailedAt:     d.firstFailed,
		ConsumerGroup:     d.p.c.cfg.Group,
	}
	if r := d.retried(); r != nil {
		info.LastError = r.LastError
	}
	if cause != nil {
		info.LastError = errorText(cause)
	}
	return info
}

// forward starts writing the message to its route, and reports whether it
// did (false: the session ended first). With MaxDeadLettersInFlight writes
// of the partition in flight, it waits for one of them to end. The write
// retries until it succeeds or the session ends; once written, the message
// is settled.
func (d *delivery) forward(ctx context.Context, r route) bool {
	p := d.p
	if r.tier != nil && p.c.cfg.KeyOrder != nil && d.keyed() {
		// Parked before the write: a crash between the two leaves the key
		// parked (its later messages wait for the TTL), never a message in a
		// tier that its key's later messages overtake.
		if !p.persistIn(p.sessCtx, "park the key", true, func(ctx context.Context) error {
			return p.c.cfg.KeyOrder.Park(ctx, d.parkedAs(), r.info.NotBefore)
		}) {
			return false
		}
		d.markParked()
	}
	select {
	case p.moves.slots <- struct{}{}:
	case <-p.sessCtx.Done():
		return false
	}
	if p.sessCtx.Err() != nil {
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
// dead-letter topic instead.
func (d *delivery) write(ctx context.Context, r route) (route, bool) {
	c := d.p.c
	failing := false
	defer func() {
		if failing {
			d.p.moves.ended()
		}
	}()
	for writes := 1; ; writes++ {
		err := d.writeOnce(ctx, r)
		if err == nil {
			return r, true
		}
		if r.tier != nil && dlq.TooLarge(err) {
			d.log().Warn("message too large for its retry topic; dead-lettering it", "error", err, "retry_topic", r.tier.Topic)
			r = d.tooLargeRoute(r, err)
			continue
		}
		if !failing {
			failing = true
			d.p.moves.failed()
		}
		delay := c.backoff.Delay(writes, rand.Float64)
		to := dlq.Topic(d.originPlace().Topic, c.cfg.DeadLetterSuffix)
		if r.tier != nil {
			to = r.tier.Topic
		}
		d.log().Error("write failed; the partition takes no new message and nothing is committed past this one; retrying", "error", err,
			"to_topic", to, "writes", writes, "retry_in", delay)
		if !sleep(d.p.sessCtx, delay) {
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

// writeOnce writes the message to its route once.
func (d *delivery) writeOnce(ctx context.Context, r route) error {
	if r.tier != nil {
		return d.writeRetry(r)
	}
	return d.writeDeadLetter(ctx, r)
}

// writeRetry writes the message to its retry tier.
func (d *delivery) writeRetry(r route) error {
	m := d.m
	msg := &sarama.ProducerMessage{Topic: r.tier.Topic, Headers: retrytopics.Headers(m.Headers, r.info)}
	if m.Key != nil {
		msg.Key = sarama.ByteEncoder(m.Key)
	}
	if m.Value != nil {
		msg.Value = sarama.ByteEncoder(m.Value)
	}
	if err := d.p.workCtx.Err(); err != nil {
		return err
	}
	partition, offset, err := d.p.producer.SendMessage(msg)
	if err != nil {
		return fmt.Errorf("write to retry topic %s: %w", r.tier.Topic, err)
	}
	log := d.log().With("retry_topic", r.tier.Topic, "retry_partition", partition, "retry_offset", offset,
		"retry_round", r.info.Round, "failed_attempts", r.info.FailedAttempts, "not_before", r.info.NotBefore)
	if r.cause == nil {
		d.p.c.metrics.Message(m.Topic, OutcomeDeferred)
		log.Info("message follows an earlier message of its key to a retry topic")
		return nil
	}
	d.p.c.metrics.Message(m.Topic, OutcomeSentToRetry)
	log.Warn("message sent to a retry topic", "error", r.cause)
	return nil
}

// writeDeadLetter writes the message to its dead-letter topic and calls
// OnDeadLetter.
func (d *delivery) writeDeadLetter(ctx context.Context, r route) error {
	c := d.p.c
	origin := d.origin()
	failure := dlq.Failure{
		Error:         errorText(r.cause),
		Kind:          r.kind,
		RetryCount:    d.prior() + d.failed,
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
	w, err := d.p.dlq.Write(d.p.workCtx, env)
	if err != nil {
		return err
	}
	c.metrics.Message(d.m.Topic, OutcomeDeadLettered)
	d.log().Error("message dead-lettered", "error", r.cause, "error_kind", r.kind, "retry_count", failure.RetryCount,
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
