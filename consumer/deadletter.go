package consumer

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/courierkit/courier/dlq"
)

// deadLetters are the dead-letter writes of a partition. They run beside
// the partition's handling: a message whose write is in flight stays
// unsettled (nothing is marked past it) while the partition goes on with
// the next messages.
type deadLetters struct {
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
func (l *deadLetters) failed() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failing.Add(1) == 1 {
		l.recovered = make(chan struct{})
	}
}

// ended records that a write that had failed ended (written, or given up).
func (l *deadLetters) ended() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failing.Add(-1) == 0 {
		close(l.recovered)
		l.recovered = nil
	}
}

// waitDeadLetters waits while a dead-letter write of the partition is
// failing, and reports whether the partition may handle the message it
// just took (false: the session ended while it waited).
func (p *partition) waitDeadLetters() bool {
	if p.letters.failing.Load() == 0 {
		return true
	}
	p.letters.mu.Lock()
	recovered := p.letters.recovered
	p.letters.mu.Unlock()
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

// deadLetter starts writing the message to its dead-letter topic, and
// reports whether it did (false: the session ended first). With
// MaxDeadLettersInFlight writes of the partition in flight, it waits for
// one of them to end. The write retries until it succeeds or the session
// ends; once written, the message is settled.
func (d *delivery) deadLetter(ctx context.Context, cause error) bool {
	p := d.p
	kind := dlq.KindRetriesExhausted
	if !p.c.retryable(cause) {
		kind = dlq.KindPermanent
	}
	failure := dlq.Failure{
		Error:         cause.Error(),
		Kind:          kind,
		RetryCount:    d.failed,
		FailedAt:      time.Now(),
		FirstFailedAt: d.firstFailed,
		CorrelationID: d.m.CorrelationID,
		ConsumerGroup: p.c.cfg.Group,
	}
	select {
	case p.letters.slots <- struct{}{}:
	case <-p.sessCtx.Done():
		return false
	}
	if p.sessCtx.Err() != nil {
		<-p.letters.slots
		return false
	}
	p.letters.wg.Go(func() {
		defer func() { <-p.letters.slots }()
		written := d.write(ctx, cause, failure)
		p.c.metrics.InFlight(d.m.Topic, -1)
		if written {
			p.settle(d.m.Offset)
		}
	})
	return true
}

// write writes the dead letter, retrying a failed write with the Backoff
// delays until it succeeds or the session ends, and reports whether it was
// written. While it is failing, the partition takes no new message.
func (d *delivery) write(ctx context.Context, cause error, failure dlq.Failure) bool {
	c := d.p.c
	failing := false
	defer func() {
		if failing {
			d.p.letters.ended()
		}
	}()
	for writes := 1; ; writes++ {
		env, err := dlq.New(d.original(), failure)
		var w dlq.Written
		if err == nil {
			w, err = d.p.dlq.Publish(d.p.workCtx, env)
		}
		if err == nil {
			c.metrics.Message(d.m.Topic, OutcomeDeadLettered)
			d.log().Error("message dead-lettered", "error", cause, "error_kind", failure.Kind, "retry_count", d.failed,
				"dlq_topic", w.Topic, "dlq_partition", w.Partition, "dlq_offset", w.Offset, "dlq_format", w.Format)
			if c.cfg.OnDeadLetter != nil {
				c.guard("Config.OnDeadLetter", func() {
					c.cfg.OnDeadLetter(ctx, DeadLetter{Message: d.m, Err: cause, Envelope: env, Written: w})
				})
			}
			return true
		}
		if !failing {
			failing = true
			d.p.letters.failed()
		}
		delay := c.backoff.Delay(writes, rand.Float64)
		d.log().Error("dead-letter write failed; the partition takes no new message and nothing is committed past this one; retrying", "error", err,
			"dlq_topic", dlq.Topic(d.m.Topic, c.cfg.DeadLetterSuffix), "writes", writes, "retry_in", delay)
		if !sleep(d.p.sessCtx, delay) {
			return false
		}
	}
}

// original is the message as the dlq envelope holds it.
func (d *delivery) original() dlq.Original {
	m := d.m
	o := dlq.Original{Topic: m.Topic, Partition: m.Partition, Offset: m.Offset, Timestamp: m.Timestamp, Key: m.Key, Value: m.Value}
	o.Headers = make([]dlq.Header, 0, len(m.Headers))
	for _, h := range m.Headers {
		if h != nil {
			o.Headers = append(o.Headers, dlq.Header(*h))
		}
	}
	return o
}
