package retrytopics_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/retrytopics"
)

// deadLetter is the envelope of o failed with f.
func deadLetter(t *testing.T, o dlq.Original, f dlq.Failure) dlq.Envelope {
	t.Helper()
	env, err := dlq.New(o, f)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

var (
	failedFirst = time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	written     = time.Date(2026, 3, 1, 8, 59, 0, 0, time.UTC)
)

// ordersDeadLetter is the envelope of a record of "orders" the group
// payouts gave up on after 4 attempts, replayed once before. Its headers
// hold a stale retry header (which a replay drops) and an application
// header named retry_* (which it keeps).
func ordersDeadLetter(t *testing.T) dlq.Envelope {
	return deadLetter(t, dlq.Original{
		Topic: "orders", Partition: 2, Offset: 41, Timestamp: written, Key: []byte{0xff, 'k'}, Value: []byte(`{"amount":5}`),
		Headers: []dlq.Header{{Key: []byte("ce_id"), Value: []byte("evt-1")}, {Key: []byte(retrytopics.HeaderAttempt), Value: []byte("3")},
			{Key: []byte("retry_reason"), Value: []byte("mine")}, {Key: []byte("null"), Value: nil}},
	}, dlq.Failure{Error: "psp timeout", Kind: dlq.KindRetriesExhausted, Attempts: 4, FirstFailedAt: failedFirst,
		FailedAt: failedFirst.Add(time.Minute), ConsumerGroup: "payouts", ReplayCount: 1})
}

// ordersTopology is the tiers of "orders": 5s, then 1m.
func ordersTopology(t *testing.T) retrytopics.Topology {
	t.Helper()
	topo, err := retrytopics.New("orders", retrytopics.Config{Delays: []time.Duration{5 * time.Second, time.Minute}}, "")
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

func TestReplayToGroupWritesTheFirstTierDueNowForTheGroup(t *testing.T) {
	t.Parallel()
	before := time.Now().Truncate(time.Millisecond)
	rec, err := ordersTopology(t).ReplayToGroup(ordersDeadLetter(t))
	after := time.Now()
	if err != nil {
		t.Fatal(err)
	}
	if rec.Topic != "orders.retry.5s" || rec.Partition != 2 || !bytes.Equal(rec.Key, []byte{0xff, 'k'}) || string(rec.Value) != `{"amount":5}` {
		t.Fatalf("record %s/%d %q=%q, want orders.retry.5s/2 with the original key and value", rec.Topic, rec.Partition, rec.Key, rec.Value)
	}
	info, found, err := retrytopics.Parse(ptrs(rec.Headers))
	if err != nil || !found {
		t.Fatalf("Parse: %v (found %v)", err, found)
	}
	if info.NotBefore.Before(before) || info.NotBefore.After(after) {
		t.Errorf("retry_not_before %v, want now (between %v and %v)", info.NotBefore, before, after)
	}
	info.NotBefore = time.Time{}
	want := retrytopics.Info{Round: 1, FailedAttempts: 4, OriginalTopic: "orders", OriginalPartition: 2, OriginalOffset: 41,
		OriginalTimestamp: written, FirstFailedAt: failedFirst, LastError: "psp timeout", ConsumerGroup: "payouts"}
	if !info.OriginalTimestamp.Equal(want.OriginalTimestamp) || !info.FirstFailedAt.Equal(want.FirstFailedAt) {
		t.Errorf("times %v %v, want %v %v", info.OriginalTimestamp, info.FirstFailedAt, written, failedFirst)
	}
	info.OriginalTimestamp, info.FirstFailedAt, want.OriginalTimestamp, want.FirstFailedAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	if info != want {
		t.Errorf("retry headers say %+v, want %+v", info, want)
	}
	// The original headers come first, in order, without the stale retry
	// header; the application's retry_reason stays.
	kept := retrytopics.Strip(ptrs(rec.Headers))
	wantKept := []dlq.Header{{Key: []byte("ce_id"), Value: []byte("evt-1")}, {Key: []byte("retry_reason"), Value: []byte("mine")}, {Key: []byte("null"), Value: nil}}
	if len(kept) != len(wantKept) {
		t.Fatalf("%d original headers kept, want %d: ce_id, retry_reason, null", len(kept), len(wantKept))
	}
	for i, h := range kept {
		if !bytes.Equal(h.Key, wantKept[i].Key) || !bytes.Equal(h.Value, wantKept[i].Value) || (h.Value == nil) != (wantKept[i].Value == nil) {
			t.Errorf("header %d = %q:%q, want %q:%q", i, h.Key, h.Value, wantKept[i].Key, wantKept[i].Value)
		}
		if !bytes.Equal(rec.Headers[i].Key, h.Key) {
			t.Errorf("header %d is %q, want the original headers first", i, rec.Headers[i].Key)
		}
	}
}

func TestReplayToGroupRefusesWhatNoGroupTierCanTake(t *testing.T) {
	t.Parallel()
	noTiers, err := retrytopics.New("orders", retrytopics.Config{}, "")
	if err != nil {
		t.Fatal(err)
	}
	orders := ordersTopology(t)
	base := ordersDeadLetter(t)
	with := func(change func(*dlq.Envelope)) dlq.Envelope {
		e := base
		change(&e)
		return e
	}
	for _, tc := range []struct {
		name string
		topo retrytopics.Topology
		env  dlq.Envelope
		want string
	}{
		{"no tiers", noTiers, base, "orders has no retry tiers"},
		{"relay dead letter", orders, deadLetter(t, dlq.Original{Topic: "orders", Partition: dlq.NoPartition, Offset: dlq.NoOffset},
			dlq.Failure{Error: "broker refused it", Kind: dlq.KindPermanent}), "the relay dead-lettered it before it reached Kafka; replay it to its topic"},
		{"another topic", orders, with(func(e *dlq.Envelope) { e.OriginalTopic = "refunds" }), "its original topic refunds is not orders"},
		{"control character in the group", orders, with(func(e *dlq.Envelope) { e.ConsumerGroup = "pay\x1b]0;x\x07outs" }), "holds a control character"},
		{"group too long", orders, with(func(e *dlq.Envelope) { e.ConsumerGroup = strings.Repeat("g", 256) }), "has 256 bytes"},
		{"place unknown", orders, with(func(e *dlq.Envelope) { e.OriginalPartition, e.OriginalOffset = dlq.NoPartition, dlq.NoOffset }), "original_partition -1"},
		{"too many attempts", orders, with(func(e *dlq.Envelope) { e.Attempts = retrytopics.MaxCount + 1 }), "retry_count 1000001 is over 1000000"},
		{"broken envelope", orders, with(func(e *dlq.Envelope) { e.OriginalKey, e.OriginalKeyBase64 = ptr("a"), ptr("YQ==") }), "original_key"},
	} {
		rec, err := tc.topo.ReplayToGroup(tc.env)
		if !errors.Is(err, retrytopics.ErrCannotReplayToGroup) || !strings.Contains(err.Error(), tc.want) || rec != nil {
			t.Errorf("%s: %v, %v; want ErrCannotReplayToGroup saying %q", tc.name, rec, err, tc.want)
		}
		if err != nil && strings.ContainsAny(err.Error(), "\x1b\x07") {
			t.Errorf("%s: the error carries a raw control character: %q", tc.name, err)
		}
	}
}

// TestReplayToGroupLeavesOutTimesBefore1970: an envelope can hold times
// the retry headers cannot; they are left out rather than written as
// headers the consumer would refuse.
func TestReplayToGroupLeavesOutTimesBefore1970(t *testing.T) {
	t.Parallel()
	e := ordersDeadLetter(t)
	e.OriginalTimestamp = time.Date(1969, 12, 31, 0, 0, 0, 0, time.UTC)
	e.FirstFailedAt = time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC)
	rec, err := ordersTopology(t).ReplayToGroup(e)
	if err != nil {
		t.Fatal(err)
	}
	info, _, err := retrytopics.Parse(ptrs(rec.Headers))
	if err != nil || !info.OriginalTimestamp.IsZero() || !info.FirstFailedAt.IsZero() {
		t.Errorf("Parse: %+v, %v; want readable headers without the two times", info, err)
	}
}

// TestReplayRouteBuildsEachTopicsTiers: the route sends each dead letter
// to the first tier of its own original topic, and refuses all with the
// config's error when the delays are invalid.
func TestReplayRouteBuildsEachTopicsTiers(t *testing.T) {
	t.Parallel()
	delays := []time.Duration{2 * time.Second, time.Minute}
	route := retrytopics.ReplayRoute(retrytopics.Config{Delays: delays, Suffix: ".again"})
	delays[0] = time.Hour // the route keeps its own copy
	orders := ordersDeadLetter(t)
	refunds := orders
	refunds.OriginalTopic = "refunds"
	for _, e := range []dlq.Envelope{orders, refunds, orders} {
		rec, err := route(e)
		if err != nil || rec.Topic != e.OriginalTopic+".again.2s" {
			t.Errorf("route of a dead letter of %s: %v, %v; want %s.again.2s", e.OriginalTopic, rec, err, e.OriginalTopic)
		}
	}
	relay := orders
	relay.ConsumerGroup = ""
	if _, err := route(relay); !errors.Is(err, retrytopics.ErrCannotReplayToGroup) {
		t.Errorf("route of a relay dead letter: %v, want ErrCannotReplayToGroup", err)
	}
	bad := retrytopics.ReplayRoute(retrytopics.Config{Delays: []time.Duration{time.Microsecond}})
	if _, err := bad(orders); !errors.Is(err, retrytopics.ErrCannotReplayToGroup) || !errors.Is(err, retrytopics.ErrInvalidConfig) ||
		!strings.Contains(err.Error(), "Delays[0] is 1µs") {
		t.Errorf("route with a 1µs delay: %v, want ErrCannotReplayToGroup and ErrInvalidConfig naming Delays[0]", err)
	}
}

func ptr(s string) *string { return &s }
