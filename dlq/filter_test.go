package dlq_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/IBM/sarama"

	"github.com/courierkit/courier/dlq"
)

// TestFilterMatchesErrorKindAndConsumerGroupExactly: ErrorKind and
// ConsumerGroup select the envelopes whose error_kind and consumer_group
// are exactly theirs; a relay dead letter (no group) never matches a
// group; a corrupt entry matches only when neither is asked for.
func TestFilterMatchesErrorKindAndConsumerGroupExactly(t *testing.T) {
	t.Parallel()
	entry := func(kind dlq.ErrorKind, group string) dlq.Entry {
		return dlq.Entry{Envelope: dlq.Envelope{OriginalTopic: "orders", ErrorKind: kind, ConsumerGroup: group}}
	}
	payoutsPermanent := entry(dlq.KindPermanent, "payouts")
	payoutsExhausted := entry(dlq.KindRetriesExhausted, "payouts")
	ledgerPermanent := entry(dlq.KindPermanent, "ledger")
	relay := entry(dlq.KindRetriesExhausted, "")
	prefix := entry(dlq.KindPermanent, "payouts-eu")
	corrupt := dlq.Entry{Err: errors.New("not an envelope")}

	for _, tc := range []struct {
		name   string
		filter dlq.Filter
		match  []dlq.Entry
		miss   []dlq.Entry
	}{
		{"kind", dlq.Filter{ErrorKind: dlq.KindPermanent},
			[]dlq.Entry{payoutsPermanent, ledgerPermanent, prefix}, []dlq.Entry{payoutsExhausted, relay, corrupt}},
		{"group", dlq.Filter{ConsumerGroup: "payouts"},
			[]dlq.Entry{payoutsPermanent, payoutsExhausted}, []dlq.Entry{ledgerPermanent, relay, prefix, corrupt}},
		{"kind and group", dlq.Filter{ErrorKind: dlq.KindRetriesExhausted, ConsumerGroup: "payouts"},
			[]dlq.Entry{payoutsExhausted}, []dlq.Entry{payoutsPermanent, ledgerPermanent, relay, corrupt}},
		{"neither", dlq.Filter{},
			[]dlq.Entry{payoutsPermanent, payoutsExhausted, ledgerPermanent, relay, prefix, corrupt}, nil},
	} {
		for _, e := range tc.match {
			if !tc.filter.Match(e) {
				t.Errorf("%s: %+v does not match kind %q group %q (corrupt: %v)", tc.name, tc.filter, e.Envelope.ErrorKind, e.Envelope.ConsumerGroup, e.Err)
			}
		}
		for _, e := range tc.miss {
			if tc.filter.Match(e) {
				t.Errorf("%s: %+v matches kind %q group %q (corrupt: %v)", tc.name, tc.filter, e.Envelope.ErrorKind, e.Envelope.ConsumerGroup, e.Err)
			}
		}
	}
}

// TestFilterRefusesAnUnknownKindAndABadGroup: a kind that is none of the
// envelope's kinds, or a group id no consumer can have, is refused with
// the field named, before Kafka is asked (Scan checks the filter as Replay
// does).
func TestFilterRefusesAnUnknownKindAndABadGroup(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		filter dlq.Filter
		want   string
	}{
		{dlq.Filter{ErrorKind: "Permanent"}, `ErrorKind "Permanent" is no error kind; use "retries_exhausted" or "permanent"`},
		{dlq.Filter{ConsumerGroup: "pay\x1b[31mouts"}, `ConsumerGroup "pay\x1b[31mouts" holds a control character`},
		{dlq.Filter{ConsumerGroup: strings.Repeat("g", 256)}, "has 256 bytes"},
		{dlq.Filter{ConsumerGroup: "bad\xff"}, "is not valid UTF-8"},
	} {
		_, err := dlq.Replay(context.Background(), dlq.ReplayConfig{Brokers: []string{"127.0.0.1:1"}, Topic: "orders.dlq", Filter: tc.filter})
		if !errors.Is(err, dlq.ErrInvalidReplayConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Replay with %+v: %v, want ErrInvalidReplayConfig saying %q", tc.filter, err, tc.want)
		}
	}
	// Valid ones pass the check, and Replay goes on to Kafka (which is not
	// there).
	quick := sarama.NewConfig()
	quick.Metadata.Retry.Max = 0
	for _, ok := range []dlq.Filter{{ErrorKind: dlq.KindRetriesExhausted}, {ErrorKind: dlq.KindPermanent, ConsumerGroup: "payouts-ü"}} {
		_, err := dlq.Replay(context.Background(), dlq.ReplayConfig{Brokers: []string{"127.0.0.1:1"}, Sarama: quick, Topic: "orders.dlq", Filter: ok})
		if err == nil || errors.Is(err, dlq.ErrInvalidReplayConfig) {
			t.Errorf("Replay with the valid filter %+v: %v, want an error of connecting", ok, err)
		}
	}
}
