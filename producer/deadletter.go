package producer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/IBM/sarama"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/courierkit/courier/dlq"
)

// deadLetter records the events given up on in this batch. With
// PublishDeadLetters it first writes each to its dead-letter topic: an event
// whose envelope the broker could not take for now stays failed and is
// retried, so no dead letter goes missing from the topic; one the broker can
// never take (an envelope over the size limit) is dead-lettered in the table
// only, where the whole event stays.
func (r *Relay) deadLetter(ctx context.Context, events []*claimedEvent, errs []error, res *BatchResult) ([]settlement, []DeadLetter) {
	if len(events) == 0 {
		return nil, nil
	}
	now := r.cfg.Now()
	letters := make([]DeadLetter, len(events))
	for i, e := range events {
		letters[i] = e.deadLetter(errs[i], now)
	}
	dlqErrs := make([]error, len(events))
	if r.cfg.PublishDeadLetters {
		dlqErrs, _, _ = r.publishEach(ctx, events, func(i int, e *claimedEvent) (*sarama.ProducerMessage, error) {
			return r.deadLetterRecord(e, letters[i])
		})
	}

	var outcomes []settlement
	var recorded []DeadLetter
	for i, e := range events {
		letter := letters[i]
		if err := dlqErrs[i]; err != nil {
			topic := e.Topic + r.cfg.DeadLetterSuffix
			if classify(err) != failPermanent {
				res.Failed++
				next := now.Add(r.backoff.Delay(e.RetryCount+1, rand.Float64))
				msg := fmt.Sprintf("%s (dead-letter topic %s refused the envelope, will retry: %v)", letter.Error, topic, err)
				outcomes = append(outcomes, settlement{id: e.ID, status: StatusFailed, err: dlq.TruncateError(msg),
					next: pgtype.Timestamptz{Time: next, Valid: true}})
				r.logFailure(ctx, slog.LevelError, "dead-letter publish failed; will retry", e, err, "dlq_topic", topic)
				continue
			}
			letter.Error = dlq.TruncateError(fmt.Sprintf("%s (not written to %s: %v)", letter.Error, topic, err))
			r.logFailure(ctx, slog.LevelError, "dead-letter record refused for good; the event stays in the outbox table", e, err, "dlq_topic", topic)
		}
		res.DeadLettered++
		outcomes = append(outcomes, settlement{id: e.ID, status: StatusDeadLettered, err: letter.Error})
		recorded = append(recorded, letter)
		r.logFailure(ctx, slog.LevelError, "event dead-lettered", e, errors.New(letter.Error),
			"retry_count", letter.RetryCount, "permanent", letter.Permanent)
	}
	return outcomes, recorded
}

// deadLetter describes e as given up on after err.
func (e *claimedEvent) deadLetter(err error, now time.Time) DeadLetter {
	d := DeadLetter{
		EventID:       e.ID,
		Topic:         e.Topic,
		Type:          e.Type,
		Error:         dlq.TruncateError(err.Error()),
		Permanent:     classify(err) == failPermanent,
		RetryCount:    e.RetryCount + 1,
		FirstFailedAt: now,
		FailedAt:      now,
	}
	if e.FirstFailedAt != nil {
		d.FirstFailedAt = *e.FirstFailedAt
	}
	for _, f := range []struct {
		dst *string
		src *string
	}{{&d.Key, e.Key}, {&d.TenantID, e.TenantID}, {&d.CorrelationID, e.CorrelationID}} {
		if f.src != nil {
			*f.dst = *f.src
		}
	}
	return d
}

// deadLetterRecord is the dlq envelope of e for its dead-letter topic. The
// original record is the one the relay tried to publish, so a replay of the
// envelope publishes exactly that.
func (r *Relay) deadLetterRecord(e *claimedEvent, d DeadLetter) (*sarama.ProducerMessage, error) {
	original, err := r.record(e)
	if err != nil {
		return nil, err
	}
	o := dlq.Original{Topic: e.Topic, Partition: dlq.NoPartition, Offset: dlq.NoOffset, Timestamp: e.CreatedAt, Value: e.Payload}
	if r.cfg.Structured {
		o.Value, _ = original.Value.Encode()
	}
	if e.Key != nil {
		o.Key = []byte(*e.Key)
	}
	for _, h := range original.Headers {
		o.Headers = append(o.Headers, dlq.Header{Key: h.Key, Value: h.Value})
	}
	kind := dlq.KindRetriesExhausted
	if d.Permanent {
		kind = dlq.KindPermanent
	}
	env, err := dlq.New(o, dlq.Failure{Error: d.Error, Kind: kind, RetryCount: d.RetryCount,
		FailedAt: d.FailedAt, FirstFailedAt: d.FirstFailedAt, CorrelationID: d.CorrelationID})
	if err != nil {
		return nil, err
	}
	rec, err := env.Record()
	if err != nil {
		return nil, err
	}
	msg := &sarama.ProducerMessage{Topic: dlq.Topic(e.Topic, r.cfg.DeadLetterSuffix), Value: sarama.ByteEncoder(rec.Value)}
	if rec.Key != nil {
		msg.Key = sarama.ByteEncoder(rec.Key)
	}
	for _, h := range rec.Headers {
		msg.Headers = append(msg.Headers, sarama.RecordHeader{Key: h.Key, Value: h.Value})
	}
	return msg, nil
}
