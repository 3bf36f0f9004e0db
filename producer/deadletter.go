package producer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/record"
)

// deadCandidate is an event to give up on, with the error that did it.
// attempted is false for an event given up on in an earlier batch whose
// dead-letter write failed: it counts no new attempt.
type deadCandidate struct {
	e         *claimedEvent
	err       error
	attempted bool
}

// deadLetter gives up on events, returning one settlement for each, in
// order. With PublishDeadLetters it first writes each to its dead-letter
// topic: an event whose envelope the broker could not take for now stays
// failed and is retried (straight to the dead-letter topic, without another
// attempt on its own), so no dead letter goes missing from the topic. An
// envelope over the size limit is written raw instead (the original record
// with the dlq_* headers), as the consumer's dlq.Writer does; one the
// broker can never take even so is dead-lettered in the table only, where
// the whole event stays.
func (r *Relay) deadLetter(ctx context.Context, dead []deadCandidate, res *BatchResult) ([]settlement, []DeadLetter) {
	now := r.cfg.Now()
	events := make([]*claimedEvent, len(dead))
	letters := make([]DeadLetter, len(dead))
	for i, d := range dead {
		events[i] = d.e
		letters[i] = d.e.deadLetter(d.err, d.attempted, now)
	}
	dlqErrs := make([]error, len(dead))
	if r.cfg.PublishDeadLetters {
		dlqErrs = r.send(ctx, events, false, func(i int, e *claimedEvent) (*record.Record, error) {
			return r.deadLetterRecord(e, letters[i], dlq.FormatEnvelope)
		})
		r.sendRawWhereTooLarge(ctx, events, letters, dlqErrs)
	}

	settlements := make([]settlement, len(dead))
	var recorded []DeadLetter
	for i, d := range dead {
		e, letter := d.e, letters[i]
		if err := dlqErrs[i]; err != nil {
			topic := dlq.Topic(e.Topic, r.cfg.DeadLetterSuffix)
			if classify(err) != failPermanent {
				res.Failed++
				msg := fmt.Sprintf("%s (dead-letter topic %s refused the envelope, will retry: %v)", letter.Error, topic, err)
				settlements[i] = settlement{e: e, fate: fateWait, status: StatusFailed, attempted: d.attempted,
					err: dlq.TruncateError(msg), delay: r.backoff.Delay(letter.Attempts, rand.Float64)}
				r.logFailure(ctx, slog.LevelError, "dead-letter publish failed; will retry", e, err, "dlq_topic", topic)
				continue
			}
			letter.Error = dlq.TruncateError(fmt.Sprintf("%s (not written to %s: %v)", letter.Error, topic, err))
			r.logFailure(ctx, slog.LevelError, "dead-letter record refused for good; the event stays in the outbox table", e, err, "dlq_topic", topic)
		}
		res.DeadLettered++
		settlements[i] = settlement{e: e, fate: fateDead, attempted: d.attempted, err: letter.Error}
		recorded = append(recorded, letter)
		r.logFailure(ctx, slog.LevelError, "event dead-lettered", e, errors.New(letter.Error),
			"retry_count", letter.Attempts, "permanent", letter.Permanent)
	}
	return settlements, recorded
}

// deadLetter describes e as given up on after err.
func (e *claimedEvent) deadLetter(err error, attempted bool, now time.Time) DeadLetter {
	d := DeadLetter{
		EventID:       e.ID,
		Topic:         e.Topic,
		Type:          e.Type,
		Error:         dlq.TruncateError(err.Error()),
		Permanent:     classify(err) == failPermanent,
		Attempts:      e.Attempts,
		FirstFailedAt: now,
		FailedAt:      now,
	}
	if attempted {
		d.Attempts++
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

// sendRawWhereTooLarge writes raw, in one more send, the dead letters whose
// envelope the broker refused as too large, and puts that send's outcome
// in errs.
func (r *Relay) sendRawWhereTooLarge(ctx context.Context, events []*claimedEvent, letters []DeadLetter, errs []error) {
	var again []int
	for i, err := range errs {
		if err != nil && dlq.TooLarge(err) {
			again = append(again, i)
		}
	}
	if len(again) == 0 {
		return
	}
	raw := make([]*claimedEvent, len(again))
	for j, i := range again {
		raw[j] = events[i]
	}
	rawErrs := r.send(ctx, raw, false, func(j int, e *claimedEvent) (*record.Record, error) {
		return r.deadLetterRecord(e, letters[again[j]], dlq.FormatRaw)
	})
	for j, i := range again {
		if rawErrs[j] != nil {
			errs[i] = fmt.Errorf("the envelope was too large (%w) and so was the raw record: %w", errs[i], rawErrs[j])
			continue
		}
		errs[i] = nil
	}
}

// deadLetterRecord is the dead letter of e for its dead-letter topic in
// format (dlq.FormatEnvelope, or dlq.FormatRaw for an envelope too large),
// as the relay's dlq.Writer renders it (the consumer's dead letters are
// rendered the same way). The original record is the one the relay tried
// to publish, so a replay of the dead letter publishes exactly that.
func (r *Relay) deadLetterRecord(e *claimedEvent, d DeadLetter, format string) (*record.Record, error) {
	original, err := r.record(e)
	if err != nil {
		return nil, err
	}
	o := dlq.Original{Topic: e.Topic, Partition: dlq.NoPartition, Offset: dlq.NoOffset, Timestamp: e.CreatedAt,
		Key: original.Key, Value: original.Value, Headers: original.Headers}
	kind := dlq.KindRetriesExhausted
	if d.Permanent {
		kind = dlq.KindPermanent
	}
	env, err := dlq.New(o, dlq.Failure{Error: d.Error, Kind: kind, Attempts: d.Attempts,
		FailedAt: d.FailedAt, FirstFailedAt: d.FirstFailedAt, CorrelationID: d.CorrelationID})
	if err != nil {
		return nil, err
	}
	if err := validTopic(dlq.Topic(e.Topic, r.cfg.DeadLetterSuffix)); err != nil {
		// e.g. a topic of 249 characters: no retry makes room for the
		// suffix. (The writer refuses it too; this error names the
		// relay's ErrInvalidTopic.)
		return nil, permanentError{fmt.Errorf("dead-letter topic: %w", err)}
	}
	return r.dlq.Record(env, format)
}
