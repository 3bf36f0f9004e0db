package consumer

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/courierkit/courier/internal/recordtrace"
	"github.com/courierkit/courier/record"
	"github.com/courierkit/courier/retrytopics"
)

// retryTiers is where a partition's topic stands in its retry topology
// (Config.RetryTopics).
type retryTiers struct {
	// topology is the retry topology of the partition's topic (a main
	// topic or one of its retry topics); nil without Config.RetryTopics.
	topology *retrytopics.Topology
	// tierDelay is the delay of the retry tier the partition's topic is;
	// 0 for a main topic.
	tierDelay time.Duration
}

// newRetryTiers places topic in its retry topology t (nil: none).
func newRetryTiers(t *retrytopics.Topology, topic string) retryTiers {
	r := retryTiers{topology: t}
	if t != nil {
		for _, tier := range t.Tiers {
			if tier.Topic == topic {
				r.tierDelay = tier.Delay
			}
		}
	}
	return r
}

// retryState is what the retry headers of a record on a retry topic say.
type retryState struct {
	retry   *retrytopics.Info // nil for a record of a main topic
	corrupt error             // malformed retry headers: dead-lettered unhandled
}

// dueAt is when the message may be handled: its retry_not_before, but no
// later than its tier's delay after the record was written, so that a
// record whose header points far ahead (a writer with a bad clock) cannot
// hold up its partition. Zero for a message to handle now: one of a main
// topic, or another group's record, which is skipped unhandled.
func (d *delivery) dueAt() time.Time {
	r := d.retried()
	if r == nil || d.foreign() {
		return time.Time{}
	}
	if limit := d.m.Timestamp.Add(d.p.tierDelay); !d.m.Timestamp.IsZero() && r.NotBefore.After(limit) {
		return limit
	}
	return r.NotBefore
}

// due reports whether the message may be handled now.
func (d *delivery) due() bool {
	at := d.dueAt()
	return at.IsZero() || !at.After(time.Now())
}

// waitDue waits until the message is due, and reports whether it is
// (false: the session ended first). A wait longer than Sarama's
// Consumer.MaxProcessingTime pauses the partition, so that nothing more is
// fetched meanwhile (Sarama heartbeats on its own); a shorter one does not
// need to, and spares the fetcher a pause and a resume.
//
// A retry record counts as in flight (see offsets.oldest) from when it is
// due, not from when it was taken: waiting out its tier's delay is not
// being stuck.
func (p *partition) waitDue(d *delivery) bool {
	at := d.dueAt()
	if at.IsZero() {
		return true
	}
	if wait := time.Until(at); wait > 0 {
		if wait > p.c.cfg.saramaConfig().Consumer.MaxProcessingTime {
			p.pause()
			defer p.resume()
		}
		if !sleep(p.claimCtx, wait) {
			return false
		}
	}
	p.pending.inFlight(d.m.Offset, p.now())
	return true
}

// takenAt is when the message d, just taken, goes in flight: now, or
// notInFlight for a retry record that is not due yet (waitDue puts it in
// flight once it is).
func (p *partition) takenAt(d *delivery) time.Duration {
	if d.due() {
		return p.now()
	}
	return notInFlight
}

// prior is how many attempts failed before this delivery.
func (d *delivery) prior() int {
	if r := d.retried(); r != nil {
		return r.FailedAttempts
	}
	return 0
}

// malformed is the error of a retry record with malformed retry headers.
func (d *delivery) malformed() error {
	if d.tracking == nil {
		return nil
	}
	return d.corrupt
}

// retried is what the retry headers say; nil for a record of a main topic.
func (d *delivery) retried() *retrytopics.Info {
	if d.tracking == nil {
		return nil
	}
	return d.retry
}

// readRetry reads the retry headers of a record on a retry topic.
func (d *delivery) readRetry() {
	info, found, err := retrytopics.Parse(d.m.Headers)
	switch {
	case err != nil:
		d.corrupt = fmt.Errorf("record on retry topic %s: %w", d.m.Topic, err)
		return
	case !found:
		d.corrupt = fmt.Errorf("record on retry topic %s has no retry headers (retry_attempt, retry_not_before, …); "+
			"only the consumer writes to retry topics", d.m.Topic)
		return
	}
	if err := d.checkRetry(info); err != nil && (info.ConsumerGroup == "" || info.ConsumerGroup == d.p.c.cfg.Group) {
		d.corrupt = fmt.Errorf("record on retry topic %s: %w", d.m.Topic, err)
		return
	}
	// A forged or skewed retry_not_before must not park the partition:
	// no record waits longer than its tier's delay from now.
	if limit := time.Now().Add(d.p.tierDelay); info.NotBefore.After(limit) {
		info.NotBefore = limit
	}
	d.retry = &info
	d.failedBefore(info.FirstFailedAt)
	d.m.OriginalTopic, d.m.RetryRound = info.OriginalTopic, info.Round
}

// checkRetry checks the retry headers against the retry topic the record
// was read from: a record of <t>.retry.* belongs to <t>, whatever its
// headers claim, and its round is one of <t>'s tiers (or 0, for a record
// that followed its key there).
func (d *delivery) checkRetry(info retrytopics.Info) error {
	t := d.p.topology
	if info.OriginalTopic != t.Topic {
		return &retrytopics.HeaderError{Header: retrytopics.HeaderOriginalTopic, Value: info.OriginalTopic,
			Reason: "names another topic than " + t.Topic + ", whose retry topic the record was read from"}
	}
	if info.Round > len(t.Tiers) {
		return &retrytopics.HeaderError{Header: retrytopics.HeaderAttempt, Value: strconv.Itoa(info.Round),
			Reason: fmt.Sprintf("is above the %d retry tiers of %s", len(t.Tiers), t.Topic)}
	}
	return nil
}

// foreign reports whether the record is another consumer group's, in a
// retry topic the groups share: this group leaves it alone.
func (d *delivery) foreign() bool {
	r := d.retried()
	return r != nil && r.ConsumerGroup != "" && r.ConsumerGroup != d.p.c.cfg.Group
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
		FailedAttempts:    d.failedAttempts(),
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

// writeRetry writes the message to its retry tier; with
// Config.TracerProvider, with the trace context of the span of ctx, the
// write's.
func (d *delivery) writeRetry(ctx context.Context, r route) error {
	m := d.m
	headers := retrytopics.Headers(m.Headers, r.info)
	if d.p.c.tracer != nil {
		headers = recordtrace.Stamp(ctx, headers)
	}
	msg := record.Message(&record.Record{Topic: r.tier.Topic, Key: m.Key, Value: m.Value, Headers: headers})
	if err := d.p.workCtx.Err(); err != nil {
		return err
	}
	partition, offset, err := d.p.producer.SendMessage(msg)
	if err != nil {
		return fmt.Errorf("write to retry topic %s: %w", r.tier.Topic, err)
	}
	d.sent(ctx, partition, offset)
	log := d.log().With("retry_topic", r.tier.Topic, "retry_partition", partition, "retry_offset", offset,
		"retry_round", r.info.Round, "failed_attempts", r.info.FailedAttempts, "not_before", r.info.NotBefore)
	if r.cause == nil {
		d.p.c.metrics.Message(m, OutcomeDeferred)
		log.Info("message follows an earlier message of its key to a retry topic")
		return nil
	}
	d.p.c.metrics.Message(m, OutcomeSentToRetry)
	log.Warn("message sent to a retry topic", "error", r.cause)
	return nil
}
