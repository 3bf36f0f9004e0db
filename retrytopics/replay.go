package retrytopics

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/record"
)

// ErrCannotReplayToGroup is matched by the errors of ReplayToGroup and of
// the routes ReplayRoute makes: the dead letter cannot go to a retry tier of
// the group that failed it. The error says why; such a dead letter can
// still be replayed to its topic, which every group reads.
var ErrCannotReplayToGroup = errors.New("retrytopics: cannot replay to the failed group")

// ReplayToGroup returns the record that replays the dead letter e to the
// consumer group that failed it, and to no other: e's original key, value
// and headers (retry headers left out) with the retry headers of round 1,
// due now, naming e's group, in the topic of t's first tier. Every group
// reading that tier leaves the record to the group it names, so only that
// group handles it again, at once, as a message back from its first tier:
// Message.Attempt counts on from e's failed attempts, and should it fail
// again it goes on to the second tier or the dead-letter topic as any
// message does.
//
// The retry headers: retry_attempt 1, retry_failed_attempts e.Attempts,
// retry_original_topic, _partition, _offset and _timestamp from e,
// retry_not_before now, retry_first_failed_at e.FirstFailedAt,
// retry_last_error e.Error and retry_consumer_group e.ConsumerGroup. The
// record's Partition is e's original partition (dlq.Replay keeps it when
// the tier topic has it, and sets replay_count).
//
// Use it as dlq.ReplayConfig.Route when every dead letter of the run comes
// from t.Topic (ReplayRoute builds the topology of each record's topic).
// The tier is the group's only when t has the delays of the group's
// consumer (consumer.Config.RetryTopics): a first tier the group does not
// read holds the record unhandled.
//
// It returns an error matching ErrCannotReplayToGroup when t has no tiers,
// when e names no consumer group (the relay dead-lettered it before it
// reached Kafka), when e's original topic is not t.Topic, when e's group is
// not a valid group id (ValidGroup), when e does not say where the record
// was (original_partition -1) or when e's retry_count is over MaxCount.
func (t Topology) ReplayToGroup(e dlq.Envelope) (*record.Record, error) {
	cannot := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrCannotReplayToGroup}, args...)...)
	}
	switch {
	case len(t.Tiers) == 0:
		return nil, cannot("%s has no retry tiers, so no group reads a tier of it; replay it to its topic", t.Topic)
	case e.ConsumerGroup == "":
		return nil, cannot("the dead letter names no consumer group: the relay dead-lettered it before it reached Kafka; replay it to its topic")
	case e.OriginalTopic != t.Topic:
		return nil, cannot("its original topic %s is not %s, whose retry tiers these are", e.OriginalTopic, t.Topic)
	case e.OriginalPartition < 0 || e.OriginalOffset < 0:
		return nil, cannot("the dead letter does not say where the record was on %s (original_partition %d), which a retry record must; replay it to its topic",
			e.OriginalTopic, e.OriginalPartition)
	case e.Attempts > MaxCount:
		return nil, cannot("its retry_count %d is over %d, the most a retry record carries; replay it to its topic", e.Attempts, MaxCount)
	}
	if err := ValidGroup(e.ConsumerGroup); err != nil {
		return nil, cannot("its consumer_group %q %v", short(e.ConsumerGroup), err)
	}
	o, err := e.Original()
	if err != nil {
		return nil, cannot("%v", err)
	}
	original := make([]*record.Header, len(o.Headers))
	for i := range o.Headers {
		original[i] = &o.Headers[i]
	}
	headers := Headers(original, Info{
		Round:             1,
		FailedAttempts:    e.Attempts,
		OriginalTopic:     e.OriginalTopic,
		OriginalPartition: e.OriginalPartition,
		OriginalOffset:    e.OriginalOffset,
		OriginalTimestamp: sinceEpoch(e.OriginalTimestamp),
		NotBefore:         time.Now(),
		FirstFailedAt:     sinceEpoch(e.FirstFailedAt),
		LastError:         e.Error,
		ConsumerGroup:     e.ConsumerGroup,
	})
	return &record.Record{Topic: t.Tiers[0].Topic, Key: o.Key, Value: o.Value, Headers: headers, Partition: e.OriginalPartition}, nil
}

// sinceEpoch is t, or zero (left out of the headers) when t is before 1970,
// which the retry headers cannot carry and an envelope can.
func sinceEpoch(t time.Time) time.Time {
	if t.Before(time.UnixMilli(0)) {
		return time.Time{}
	}
	return t
}

// maxRoutedTopics bounds the topologies a route of ReplayRoute keeps: a
// dead-letter topic normally holds the records of one topic, and a hostile
// one naming a new topic in every record must not grow it without end.
const maxRoutedTopics = 64

// ReplayRoute returns a dlq.ReplayConfig.Route that replays each dead
// letter to the consumer group that failed it, through the first retry
// tier of its original topic under cfg: for a dead letter of topic t, the
// ReplayToGroup of New(t, cfg, ""), whose topology it keeps for the next
// records of t. cfg must have the Delays (and Suffix) of the group's
// consumer; the dead-letter suffix plays no part. A dead letter it cannot
// route (see ReplayToGroup; or cfg is invalid for its topic) gets an error
// matching ErrCannotReplayToGroup, and dlq.Replay skips it. The route is
// safe for concurrent use.
//
//	report, err := dlq.Replay(ctx, dlq.ReplayConfig{
//		Brokers: brokers,
//		Topic:   "payouts.dlq",
//		Filter:  dlq.Filter{ConsumerGroup: "payouts"},
//		Route:   retrytopics.ReplayRoute(retrytopics.Config{Delays: []time.Duration{5 * time.Second, time.Minute}}),
//	})
func ReplayRoute(cfg Config) func(dlq.Envelope) (*record.Record, error) {
	cfg.Delays = slices.Clone(cfg.Delays)
	var (
		mu         sync.Mutex
		topologies = map[string]Topology{}
	)
	topology := func(topic string) (Topology, error) {
		mu.Lock()
		defer mu.Unlock()
		if t, ok := topologies[topic]; ok {
			return t, nil
		}
		t, err := New(topic, cfg, "")
		if err != nil {
			return Topology{}, fmt.Errorf("%w: %w", ErrCannotReplayToGroup, err)
		}
		if len(topologies) >= maxRoutedTopics {
			clear(topologies)
		}
		topologies[topic] = t
		return t, nil
	}
	return func(e dlq.Envelope) (*record.Record, error) {
		t, err := topology(e.OriginalTopic)
		if err != nil {
			return nil, err
		}
		return t.ReplayToGroup(e)
	}
}
