package producer_test

// Tests of the cluster's condition: a partition Kafka refuses for a reason
// of its own (no leader, too few in-sync replicas, a timeout) holds its
// events without spending their attempts, never dead-letters them, and
// leaves the other partitions alone.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/courierkit/courier/backoff"
	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/producer"
	"github.com/courierkit/courier/record"
)

// keysOn returns n keys the relay's partitioner puts on partition p of
// topic among partitions.
func keysOn(t testing.TB, topic string, p, partitions int32, n int) []string {
	t.Helper()
	var keys []string
	for i := 0; len(keys) < n; i++ {
		if key := fmt.Sprintf("k-%d", i); partitionOf(t, topic, key, partitions) == p {
			keys = append(keys, key)
		}
	}
	return keys
}

// enqueueOn enqueues perKey events of each key, the keys taking turns, and
// returns their ids in enqueue order.
func enqueueOn(t *testing.T, pg *testkit.PG, out *producer.Outbox, topic string, keys []string, perKey int) []string {
	t.Helper()
	var events []producer.Event
	for n := range perKey {
		for _, key := range keys {
			events = append(events, producer.Event{Topic: topic, Key: key, Type: "Counted", Payload: fmt.Appendf(nil, `{"key":%q,"n":%d}`, key, n)})
		}
	}
	res, err := out.EnqueueBatch(context.Background(), pg.Pool, events)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(res))
	for i, e := range res {
		ids[i] = e.ID.String()
	}
	return ids
}

// sickPartition is an outbox and a topic of two partitions on an
// in-process broker whose partition 0 answers every write with code.
func sickPartition(t *testing.T, code *kerr.Error) (*testkit.PG, *producer.Outbox, *testkit.Kafka, string, *kfake.FaultHandle) {
	t.Helper()
	pg, out := setup(t)
	k := testkit.NewKafka(t, testkit.InProcess())
	topic := k.Topic(t, 2)
	fault := k.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Partitions: []int32{0}, Err: code, Count: -1})
	return pg, out, k, topic, fault
}

// steppedConfig is heldConfig on clock, its hold a second a step: a test
// takes the steps by advancing the clock.
func steppedConfig(clock *fakeClock) producer.RelayConfig {
	cfg := heldConfig(&recordedMetrics{})
	cfg.Now = clock.Now
	cfg.Backoff = backoff.Backoff{Base: time.Second, Max: time.Second}
	return cfg
}

// heldConfig is a relay whose faults reach it (no retries inside the
// publisher) with a short backoff and two attempts: a partition held for
// a second has been held far past MaxAttempts × Backoff.Max.
func heldConfig(metrics *recordedMetrics) producer.RelayConfig {
	saramaCfg := producer.NewSaramaConfig()
	saramaCfg.Producer.Retry.Max = 0
	saramaCfg.Metadata.Retry.Max = 0
	return producer.RelayConfig{
		Sarama: saramaCfg, PollInterval: 10 * time.Millisecond, MaxAttempts: 2,
		Backoff: backoff.Backoff{Base: 10 * time.Millisecond, Max: 40 * time.Millisecond},
		Hooks:   []producer.Hook{metrics},
	}
}

// TestHeldPartitionNeverDeadLettersAndSparesItsNeighbour: the broker
// answers NOT_ENOUGH_REPLICAS for every write to partition 0 of a topic,
// for a hundred tries and more: far past MaxAttempts (2) × Backoff.Max
// (40ms). Partition 1's events are all published meanwhile, none ever
// failed. Partition 0's events count no attempt, none is dead-lettered,
// each says why it waits and where, as Relay.Held and Admin.HeldGroups do;
// the HeldHook hears the hold. Once the partition takes
// writes again, all its events are published in key order, once each, and
// the hook hears the hold end.
func TestHeldPartitionNeverDeadLettersAndSparesItsNeighbour(t *testing.T) {
	t.Parallel()
	pg, out, k, topic, fault := sickPartition(t, kerr.NotEnoughReplicas)
	sick := keysOn(t, topic, 0, 2, 6) // the last two come while it is held
	healthy := keysOn(t, topic, 1, 2, 4)
	held := enqueueOn(t, pg, out, topic, sick[:4], 5)
	published := enqueueOn(t, pg, out, topic, healthy, 50)
	kafka := consume(t, k, topic)
	metrics := &recordedMetrics{}
	relay := newRelay(t, pg, k, heldConfig(metrics))
	runRelay(t, relay)

	testkit.WaitFor(t, 30*time.Second, "the healthy partition's events to be published", func() bool {
		return countRows(t, pg.Pool, "status = 'published' AND id::text = ANY($1)", published) == len(published)
	})
	if n := countRows(t, pg.Pool, "id::text = ANY($1) AND (retry_count > 0 OR last_error IS NOT NULL)", published); n != 0 {
		t.Errorf("%d healthy events failed on the way, want none: a held partition beside them must not touch them", n)
	}
	testkit.WaitFor(t, 30*time.Second, "the held partition to be tried 100 times", func() bool { return fault.Hits() >= 100 })
	// Keys new to the partition, enqueued while it is held: failed unsent,
	// with the hold's error.
	during := enqueueOn(t, pg, out, topic, sick[4:], 3)
	held = append(held, during...)
	// The first event of each new key meets the hold; the others wait
	// behind it.
	testkit.WaitFor(t, 30*time.Second, "the events enqueued while held to meet the hold", func() bool {
		return countRows(t, pg.Pool, "id::text = ANY($1) AND last_error IS NOT NULL", during) >= 2
	})
	if n := countRows(t, pg.Pool, "id::text = ANY($1) AND status = 'pending' AND retry_count = 0", held); n != len(held) {
		t.Fatalf("%d of the %d events of the held partition are pending with no attempt counted, want all", n, len(held))
	}
	// The first event of each key says why it waits, naming the partition;
	// the others wait behind it.
	var keys int
	if err := pg.Pool.QueryRow(context.Background(), "SELECT count(DISTINCT partition_key) FROM courier_events WHERE id::text = ANY($1) AND last_error LIKE $2",
		held, "%"+topic+"/0: %fewer in-sync replicas%").Scan(&keys); err != nil || keys != len(sick) {
		t.Fatalf("%d of the %d keys of the held partition have an event saying why it waits (%v), want all", keys, len(sick), err)
	}
	if n := countRows(t, pg.Pool, "status = 'dead_lettered'"); n != 0 {
		t.Fatalf("%d events dead-lettered for the cluster's condition, want none", n)
	}
	if h := metrics.holds(); len(h) != 1 || h[0] != "held "+topic+"/0" {
		t.Errorf("the HeldHook heard %q, want the hold of partition 0 once", h)
	}
	if h := relay.Held(); len(h) != 1 || h[0].Topic != topic || h[0].Partition != 0 || !strings.Contains(h[0].Error, "NOT_ENOUGH_REPLICAS") {
		t.Errorf("Relay.Held() = %+v, want partition 0 held for NOT_ENOUGH_REPLICAS", h)
	}
	// Admin sees them in the table: the first waiting event of each key,
	// while its hold is not up.
	admin := newAdmin(t, pg)
	testkit.WaitFor(t, 10*time.Second, "Admin.HeldGroups to show the held partition", func() bool {
		groups, err := admin.HeldGroups(context.Background(), 20)
		if err != nil {
			t.Fatal(err)
		}
		return len(groups) == 1 && groups[0].Topic == topic && groups[0].Count >= 1 && groups[0].Count <= int64(len(sick)) &&
			strings.HasPrefix(groups[0].Error, topic+"/0: ")
	})

	fault.Remove()
	testkit.WaitFor(t, 30*time.Second, "the held events to be published once the partition takes writes", func() bool {
		return countRows(t, pg.Pool, "status = 'published'") == len(held)+len(published)
	})
	if n := countRows(t, pg.Pool, "retry_count > 0"); n != 0 {
		t.Errorf("%d events counted an attempt, want none", n)
	}
	msgs := kafka.waitDistinct(len(held)+len(published), 30*time.Second)
	if dups := checkKeyOrder(t, msgs); dups != 0 {
		t.Errorf("%d duplicates on the topic, want none", dups)
	}
	testkit.WaitFor(t, 10*time.Second, "the hold to end", func() bool { return len(metrics.holds()) == 2 })
	if h := metrics.holds(); h[1] != "unheld "+topic+"/0" {
		t.Errorf("the HeldHook heard %q, want the hold of partition 0 and its end", h)
	}
	if h := relay.Held(); len(h) != 0 {
		t.Errorf("Relay.Held() = %+v once the partition took its events, want none", h)
	}
	if groups, err := admin.HeldGroups(context.Background(), 20); err != nil || len(groups) != 0 {
		t.Errorf("Admin.HeldGroups = %+v, %v once every event was published, want none", groups, err)
	}
}

// TestHeldPartitionIsNotWrittenToUntilItsHoldIsUp: once partition 0 is
// held (NOT_ENOUGH_REPLICAS, a backoff of an hour), the relay sends it no
// write: the events of new keys on it, enqueued in five rounds while
// partition 1's events are published, meet the hold unsent, and the broker
// saw one write to partition 0 in all.
func TestHeldPartitionIsNotWrittenToUntilItsHoldIsUp(t *testing.T) {
	t.Parallel()
	pg, out, k, topic, fault := sickPartition(t, kerr.NotEnoughReplicas)
	sick := keysOn(t, topic, 0, 2, 6)
	healthy := keysOn(t, topic, 1, 2, 10)
	cfg := heldConfig(&recordedMetrics{})
	cfg.Backoff = backoff.Backoff{Base: time.Hour, Max: time.Hour}
	runRelay(t, newRelay(t, pg, k, cfg))
	var during []string
	for round := range 6 {
		ids := enqueueOn(t, pg, out, topic, sick[round:round+1], 1)
		published := enqueueOn(t, pg, out, topic, healthy, 1)
		testkit.WaitFor(t, 30*time.Second, fmt.Sprintf("round %d: partition 1's events published and the event of partition 0 held", round),
			func() bool {
				return countRows(t, pg.Pool, "status = 'published' AND id::text = ANY($1)", published) == len(published) &&
					countRows(t, pg.Pool, "status = 'pending' AND retry_count = 0 AND last_error LIKE '%NOT_ENOUGH_REPLICAS' AND id::text = ANY($1)", ids) == 1
			})
		if round > 0 {
			during = append(during, ids...)
		}
	}
	if n := fault.Hits(); n != 1 {
		t.Errorf("the broker saw %d writes to the held partition, want 1: the %d events enqueued while it was held must meet the hold unsent",
			n, len(during))
	}
}

// TestTimedOutPartitionIsHeld: a partition whose every write times out
// after its append (REQUEST_TIMED_OUT) is held like any other: the write
// gives its batch up before PublishTimeout, saying where and that its fate
// is unknown, rather than leave the publish timeout's error, which would
// defer it as an unreachable Kafka's. The relay lists the hold, partition
// 1's events are published, none is dead-lettered or counts an attempt,
// and the breaker stays closed.
func TestTimedOutPartitionIsHeld(t *testing.T) {
	t.Parallel()
	pg, out, k, topic, _ := sickPartition(t, kerr.RequestTimedOut)
	held := enqueueOn(t, pg, out, topic, keysOn(t, topic, 0, 2, 3), 2)
	published := enqueueOn(t, pg, out, topic, keysOn(t, topic, 1, 2, 3), 20)
	cfg := heldConfig(&recordedMetrics{})
	cfg.PublishTimeout = time.Second
	relay := newRelay(t, pg, k, cfg)
	runRelay(t, relay)
	testkit.WaitFor(t, 30*time.Second, "partition 1 published and partition 0 held for its timeouts", func() bool {
		h := relay.Held()
		return countRows(t, pg.Pool, "status = 'published' AND id::text = ANY($1)", published) == len(published) &&
			len(h) == 1 && h[0].Partition == 0 && strings.Contains(h[0].Error, "REQUEST_TIMED_OUT")
	})
	if n := countRows(t, pg.Pool, "id::text = ANY($1) AND status = 'pending' AND retry_count = 0", held); n != len(held) {
		t.Errorf("%d of partition 0's %d events pending with no attempt counted, want all", n, len(held))
	}
	if relay.Breaker() != producer.BreakerClosed {
		t.Errorf("breaker %v for a partition that times out, want closed: the broker answers", relay.Breaker())
	}
}

// TestEachProduceErrorIsHeldOrCountedAsKafkaClassesIt: the broker answers
// one event's first three produce requests with one error code. The
// cluster's conditions (Kafka's retriable codes, an unknown server error, a
// refused access), those answered after the append included, count no
// attempt: the event is published afterwards with retry_count 0, once. A
// corrupt record counts its three attempts, then is published. A record
// Kafka can never take is dead-lettered at its first attempt and is not on
// the topic.
func TestEachProduceErrorIsHeldOrCountedAsKafkaClassesIt(t *testing.T) {
	t.Parallel()
	type want struct {
		status   string
		attempts int
	}
	held, counted, refused := want{producer.StatusPublished, 0}, want{producer.StatusPublished, 3}, want{producer.StatusDeadLettered, 1}
	for _, c := range []struct {
		code *kerr.Error
		want want
	}{
		{kerr.NotLeaderForPartition, held},
		{kerr.LeaderNotAvailable, held},
		{kerr.NotEnoughReplicas, held},
		{kerr.NotEnoughReplicasAfterAppend, held}, // appended, then refused
		{kerr.RequestTimedOut, held},              // appended, then refused
		{kerr.KafkaStorageError, held},
		{kerr.NetworkException, held},
		{kerr.ThrottlingQuotaExceeded, held},
		{kerr.UnknownLeaderEpoch, held},
		{kerr.UnknownServerError, held},
		{kerr.TopicAuthorizationFailed, held},
		{kerr.CorruptMessage, counted},
		{kerr.MessageTooLarge, refused},
		{kerr.RecordListTooLarge, refused},
		{kerr.InvalidRecord, refused},
		{kerr.PolicyViolation, refused},
		{kerr.InvalidTimestamp, refused},
	} {
		t.Run(c.code.Message, func(t *testing.T) {
			t.Parallel()
			pg, out := setup(t)
			k := testkit.NewKafka(t, testkit.InProcess())
			topic := k.Topic(t, 1)
			id := enqueue(t, pg, out, producer.Event{Topic: topic, Key: "k", Type: "T", Payload: []byte(`{}`)})
			fault := k.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: c.code, Count: 3})
			cfg := heldConfig(&recordedMetrics{})
			cfg.MaxAttempts = 5
			runRelay(t, newRelay(t, pg, k, cfg))
			testkit.WaitFor(t, 30*time.Second, "the event to be "+c.want.status, func() bool {
				return rowOf(t, pg, id).Status == c.want.status
			})
			if row := rowOf(t, pg, id); row.Attempts != c.want.attempts {
				t.Errorf("%s after %d faults: %+v, want %d attempts counted", c.code.Message, fault.Hits(), row, c.want.attempts)
			}
			var on int
			for _, m := range k.ReadAll(t, topic) {
				if headerValue(m, producer.HeaderID) == id.String() {
					on++
				}
			}
			if wantOn := boolInt(c.want.status == producer.StatusPublished); on != wantOn {
				t.Errorf("%s: the event is on its topic %d times, want %d", c.code.Message, on, wantOn)
			}
		})
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestMissingTopicIsHeldForItsGrace: while the cluster says a topic does
// not exist, its event is held for MissingTopicGrace, counting no attempt;
// past the grace each failure counts, and MaxAttempts dead-letters it. With
// a negative grace it is held for ever. A topic created within the grace
// takes its event with no attempt counted.
func TestMissingTopicIsHeldForItsGrace(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		grace  time.Duration
		create time.Duration // when the topic appears; 0: never
		want   []eventRow    // after each run, 1m apart
	}{
		{"dead-lettered past the grace", 150 * time.Second, 0, []eventRow{
			{Status: producer.StatusPending}, {Status: producer.StatusPending}, {Status: producer.StatusPending},
			{Status: producer.StatusFailed, Attempts: 1}, {Status: producer.StatusDeadLettered, Attempts: 2}}},
		{"held for ever", -1, 0, []eventRow{
			{Status: producer.StatusPending}, {Status: producer.StatusPending}, {Status: producer.StatusPending},
			{Status: producer.StatusPending}, {Status: producer.StatusPending}}},
		{"created within the grace", 150 * time.Second, 2 * time.Minute, []eventRow{
			{Status: producer.StatusPending}, {Status: producer.StatusPending}, {Status: producer.StatusPublished}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			pg, out := setup(t)
			clock := newFakeClock()
			start := clock.Now()
			pub := &fakePublisher{}
			pub.setFail(func(*record.Record) error {
				if c.create > 0 && !clock.Now().Before(start.Add(c.create)) {
					return nil
				}
				return fmt.Errorf("look up topic %q: %w", "later", sarama.ErrUnknownTopicOrPartition)
			})
			relay := newRelay(t, pg, nil, producer.RelayConfig{Publisher: pub, Now: clock.Now, MaxAttempts: 2, MissingTopicGrace: c.grace})
			ev := orderCreated("o-1")
			ev.Topic = "later"
			id := enqueue(t, pg, out, ev)
			for i, want := range c.want {
				runOnce(t, relay)
				row := rowOf(t, pg, id)
				if row.Status != want.Status || row.Attempts != want.Attempts {
					t.Fatalf("after run %d (%v in): %+v, want %s with %d attempts", i+1, clock.Now().Sub(start), row, want.Status, want.Attempts)
				}
				clock.Advance(time.Minute)
			}
		})
	}
}

// TestDeadLetteredEventsWereNeverAppended: under a mix of faults that
// append and then fail (REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS_AFTER_APPEND),
// dropped connections, publishes cut short by PublishTimeout while the
// broker is slow, and events the broker refuses for good (POLICY_VIOLATION
// whenever their batch holds them), with MaxAttempts 2: the refused events
// are dead-lettered, every other event is published, and not one event is
// both dead-lettered and on its topic.
func TestDeadLetteredEventsWereNeverAppended(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name          string
		noIdempotence bool
	}{{"idempotent", false}, {"without idempotence", true}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			pg, out := setup(t)
			k := testkit.NewKafka(t, testkit.Brokers(3), testkit.InProcess())
			topic := k.Topic(t, 6)
			ids := enqueueOn(t, pg, out, topic, []string{"a", "b", "c", "d", "e", "f", "g", "h"}, 150)
			var poison []string
			for i := 7; i < len(ids); i += 97 {
				poison = append(poison, ids[i])
			}
			k.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: kerr.PolicyViolation, Count: -1,
				When: func(req kmsg.Request) bool { return producesAny(req, poison) }})
			sometimes := func(kmsg.Request) bool { return rand.Float64() < 0.15 }
			for _, code := range []*kerr.Error{kerr.RequestTimedOut, kerr.NotEnoughReplicasAfterAppend} {
				k.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: code, Count: -1, When: sometimes})
			}
			k.Cluster.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
				k.Cluster.KeepControl()
				switch rand.IntN(40) {
				case 0:
					return nil, fmt.Errorf("connection dropped"), true
				case 1: // slower than PublishTimeout: the relay gives up on an answer that comes
					k.Cluster.SleepControl(func() { <-time.After(300 * time.Millisecond) })
				}
				return nil, nil, false
			})
			saramaCfg := producer.NewSaramaConfig()
			saramaCfg.Producer.Retry.Max = 0
			for range 2 {
				runRelay(t, newRelay(t, pg, k, producer.RelayConfig{
					Sarama: saramaCfg, DisableIdempotence: c.noIdempotence, PollInterval: 20 * time.Millisecond,
					MaxAttempts: 2, PublishTimeout: 200 * time.Millisecond,
					Backoff: backoff.Backoff{Base: 5 * time.Millisecond, Max: 50 * time.Millisecond},
					Breaker: producer.BreakerConfig{OpenFor: 100 * time.Millisecond},
				}))
			}
			testkit.WaitFor(t, 2*time.Minute, "every event published or dead-lettered", func() bool {
				return countRows(t, pg.Pool, "status NOT IN ('published', 'dead_lettered')") == 0
			})
			var dead []string
			rows, err := pg.Pool.Query(context.Background(), "SELECT id::text FROM courier_events WHERE status = 'dead_lettered'")
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				var id string
				if err := rows.Scan(&id); err != nil {
					t.Fatal(err)
				}
				dead = append(dead, id)
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			onTopic := distinctIDs(k.ReadAll(t, topic))
			var both []string
			for _, id := range dead {
				if onTopic[id] {
					both = append(both, id)
				}
			}
			t.Logf("%d events, %d dead-lettered (%d refused for good), %d on the topic, %d both", len(ids), len(dead), len(poison), len(onTopic), len(both))
			if len(both) != 0 {
				t.Errorf("%d events are dead-lettered and also on their topic, want none: %v", len(both), both)
			}
			for _, id := range poison {
				if !slices.Contains(dead, id) {
					t.Errorf("event %s, refused for good, is not dead-lettered", id)
				}
			}
			if len(onTopic)+len(dead) != len(ids) {
				t.Errorf("%d on the topic and %d dead-lettered, want the %d events in all", len(onTopic), len(dead), len(ids))
			}
		})
	}
}

// producesAny reports whether a produce request carries a record batch
// holding one of ids.
func producesAny(req kmsg.Request, ids []string) bool {
	for _, t := range req.(*kmsg.ProduceRequest).Topics {
		for _, p := range t.Partitions {
			for _, id := range ids {
				if strings.Contains(string(p.Records), id) {
					return true
				}
			}
		}
	}
	return false
}

// TestHeldPartitionIsTriedOneEventAStepAndWakesWhenItTakesWrites: while
// the broker refuses every write to partition 0, each step of its hold
// claims and sends one event only, the step's probe; every other event
// sleeps, out of every claim, however many steps pass, the events behind
// the probe in its key too. When the partition takes writes again, an
// acknowledgement that ends the hold wakes them all at once, without their
// sleep running out, even with the probe purged (the relay's own hold
// ended); then they are all published in key order, none with an attempt
// counted.
func TestHeldPartitionIsTriedOneEventAStepAndWakesWhenItTakesWrites(t *testing.T) {
	t.Parallel()
	pg, out, k, topic, fault := sickPartition(t, kerr.NotEnoughReplicas)
	const keys, perKey = 5, 8
	sick := keysOn(t, topic, 0, 2, keys)
	clock := newFakeClock()
	cfg := steppedConfig(clock)
	relay := newRelay(t, pg, k, cfg)
	ctx := context.Background()
	ids := enqueueOn(t, pg, out, topic, sick, perKey)
	if res := runOnce(t, relay); res.Published != 0 || res.KafkaHeld != keys {
		t.Fatalf("first batch %+v, want the first event of each key held, nothing published", res)
	}
	waiting := pg.Schema + ".courier_outbox_waiting"
	asleep := func() int {
		t.Helper()
		var n int
		err := pg.Pool.QueryRow(ctx, "SELECT count(*) FROM "+waiting+" WHERE held_partition = 0 AND next_attempt_at > $1", clock.Now().Add(time.Minute)).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := asleep(); n != keys*perKey-1 {
		t.Fatalf("%d events asleep after the first failure, want %d: every one but the probe", n, keys*perKey-1)
	}
	for step := range 5 {
		clock.Advance(1100 * time.Millisecond)
		if res := runOnce(t, relay); res.Claimed != 1 || res.Published != 0 {
			t.Fatalf("step %d claimed %d events and published %d; want the probe alone, nothing published", step, res.Claimed, res.Published)
		}
		if n := asleep(); n != keys*perKey-1 {
			t.Fatalf("step %d: %d events asleep, want %d", step, n, keys*perKey-1)
		}
	}
	// The probe and the events of its key go some other way (an
	// operator's purge); the partition heals; an event of a new key ends
	// the relay's hold.
	tag, err := pg.Pool.Exec(ctx, "DELETE FROM "+waiting+` w WHERE w.partition_key = (
		SELECT p.partition_key FROM `+waiting+" p WHERE p.held_partition = 0 AND p.next_attempt_at <= $1)", clock.Now().Add(time.Minute))
	if err != nil || tag.RowsAffected() != perKey {
		t.Fatalf("purging the probe's key: %v, %v; want %d events", tag, err, perKey)
	}
	fault.Remove()
	fresh := enqueueOn(t, pg, out, topic, keysOn(t, topic, 0, 2, keys+1)[keys:], 1)
	clock.Advance(1100 * time.Millisecond)
	if res := runOnce(t, relay); res.Published != 1 {
		t.Fatalf("after healing, the batch published %d events, want the new one", res.Published)
	}
	if n := asleep(); n != 0 {
		t.Fatalf("%d events still asleep after an acknowledgement ended the hold, want none", n)
	}
	for range keys {
		runOnce(t, relay)
	}
	left := append(ids[:0:0], fresh...)
	for i, id := range ids {
		if i%keys != 0 { // the first key's events were purged
			left = append(left, id)
		}
	}
	if n := countRows(t, pg.Pool, "status = 'published' AND retry_count = 0 AND id::text = ANY($1)", left); n != len(left) {
		t.Fatalf("%d of %d events published with no attempt counted, want all", n, len(left))
	}
	msgs := k.ReadAll(t, topic)
	if dups := checkKeyOrder(t, msgs); dups != 0 || len(msgs) != len(left) {
		t.Fatalf("the topic holds %d records (%d duplicates), want the %d events once each", len(msgs), dups, len(left))
	}
}

// TestHeldKeyLongerThanABatchIsNeverDueBeforeTheEventAheadOfIt: a key of a
// held partition has more events waiting than a batch claims (30 against
// 4). No event of it is ever due before an earlier one of its key, which
// would have every claim walk it in vain: each step claims the probe
// alone, and once every sleep runs out together (holdSleep) and the next
// step takes a batch of them, the ones that batch could not take are put
// back to sleep with it. When the partition heals, all 30 are published
// once, in order, with no attempt counted.
func TestHeldKeyLongerThanABatchIsNeverDueBeforeTheEventAheadOfIt(t *testing.T) {
	t.Parallel()
	pg, out, k, topic, fault := sickPartition(t, kerr.NotEnoughReplicas)
	const events = 30
	clock := newFakeClock()
	cfg := steppedConfig(clock)
	cfg.BatchSize = 4
	relay := newRelay(t, pg, k, cfg)
	ctx := context.Background()
	ids := enqueueOn(t, pg, out, topic, keysOn(t, topic, 0, 2, 1), events)
	waiting := pg.Schema + ".courier_outbox_waiting"
	run := func(what string) producer.BatchResult {
		t.Helper()
		res := runOnce(t, relay)
		var early int
		err := pg.Pool.QueryRow(ctx, "SELECT count(*) FROM "+waiting+" f WHERE EXISTS (SELECT FROM "+waiting+
			" h WHERE h.topic = f.topic AND h.partition_key = f.partition_key AND h.seq < f.seq AND h.next_attempt_at > f.next_attempt_at)").Scan(&early)
		if err != nil {
			t.Fatal(err)
		}
		if early != 0 {
			t.Fatalf("after %s, %d events are due before an event ahead of them in their key, want none", what, early)
		}
		return res
	}
	for i := range events / cfg.BatchSize { // the first claims them all
		if res := run(fmt.Sprintf("batch %d of the first tries", i)); res.Claimed != cfg.BatchSize {
			t.Fatalf("batch %d of the first tries claimed %d events, want %d", i, res.Claimed, cfg.BatchSize)
		}
	}
	if res := run("the last of the first tries"); res.Claimed != events%cfg.BatchSize {
		t.Fatalf("the last of the first tries claimed %d events, want %d", res.Claimed, events%cfg.BatchSize)
	}
	for step := range 3 {
		clock.Advance(1100 * time.Millisecond)
		if res := run(fmt.Sprintf("step %d", step)); res.Claimed != 1 {
			t.Fatalf("step %d claimed %d events, want the probe alone", step, res.Claimed)
		}
	}
	clock.Advance(10 * time.Minute) // every sleep, and the relay's hold, ran out
	if res := run("the sleeps ran out"); res.Claimed != cfg.BatchSize || res.KafkaHeld != 1 {
		t.Fatalf("after the sleeps ran out, the batch claimed %d events, %d held; want a batch, the first held", res.Claimed, res.KafkaHeld)
	}
	clock.Advance(1100 * time.Millisecond)
	if res := run("the step after the sleeps ran out"); res.Claimed != 1 {
		t.Fatalf("the step after the sleeps ran out claimed %d events, want the probe alone", res.Claimed)
	}
	fault.Remove()
	for step := 0; countRows(t, pg.Pool, "status = 'published' AND retry_count = 0 AND id::text = ANY($1)", ids) < events; step++ {
		if step == events {
			t.Fatal("the healed partition's events were not all published")
		}
		clock.Advance(1100 * time.Millisecond)
		run(fmt.Sprintf("healed batch %d", step))
	}
	msgs := k.ReadAll(t, topic)
	if dups := checkKeyOrder(t, msgs); dups != 0 || len(msgs) != events {
		t.Fatalf("the topic holds %d records (%d duplicates), want the %d events once each", len(msgs), dups, events)
	}
}

// TestAWriteOnAHeldPartitionWakesItsSleepersWhicheverRelayMakesIt: relay B
// holds partition 0 and puts an event of it to sleep behind its hold; the
// probe of that hold goes some other way (an operator purges it) and the
// partition heals. Relay A, which never held the partition, publishes an
// event to it: that batch wakes B's sleeper, long before its sleep runs
// out, and A publishes it next.
func TestAWriteOnAHeldPartitionWakesItsSleepersWhicheverRelayMakesIt(t *testing.T) {
	t.Parallel()
	pg, out, k, topic, fault := sickPartition(t, kerr.NotEnoughReplicas)
	keys := keysOn(t, topic, 0, 2, 3)
	clock := newFakeClock()
	cfg := steppedConfig(clock)
	a, b := newRelay(t, pg, k, cfg), newRelay(t, pg, k, cfg)
	ctx := context.Background()
	probe := enqueueOn(t, pg, out, topic, keys[:1], 1)
	if res := runOnce(t, b); res.KafkaHeld != 1 {
		t.Fatalf("relay B's first batch %+v, want its event held", res)
	}
	sleeper := enqueueOn(t, pg, out, topic, keys[1:2], 1)
	if res := runOnce(t, b); res.KafkaHeld != 1 || res.Claimed != 1 {
		t.Fatalf("relay B's second batch %+v, want the new event held, behind B's hold", res)
	}
	waiting := pg.Schema + ".courier_outbox_waiting"
	if tag, err := pg.Pool.Exec(ctx, "DELETE FROM "+waiting+" WHERE id = $1", probe[0]); err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("purging the probe: %v, %v", tag, err)
	}
	fault.Remove()
	enqueueOn(t, pg, out, topic, keys[2:], 1)
	if res := runOnce(t, a); res.Published != 1 {
		t.Fatalf("relay A's batch %+v, want the new event published", res)
	}
	var due bool
	if err := pg.Pool.QueryRow(ctx, "SELECT next_attempt_at <= $2 AND held_partition IS NULL FROM "+waiting+" WHERE id = $1",
		sleeper[0], clock.Now()).Scan(&due); err != nil || !due {
		t.Fatalf("after relay A wrote to the partition, relay B's sleeper is due: %v (%v), want true", due, err)
	}
	if res := runOnce(t, a); res.Published != 1 {
		t.Fatalf("relay A's next batch %+v, want the sleeper published", res)
	}
}

// TestEventScheduledBehindAHeldKeyIsNotWokenBeforeItsTime: an event whose
// NotBefore is a minute ahead joins a key whose first event a hold keeps.
// When the partition heals and a write wakes its sleepers, the held event
// goes at once, but the scheduled one still waits for its NotBefore, and
// is published after it, in key order.
func TestEventScheduledBehindAHeldKeyIsNotWokenBeforeItsTime(t *testing.T) {
	t.Parallel()
	pg, out, k, topic, fault := sickPartition(t, kerr.NotEnoughReplicas)
	keys := keysOn(t, topic, 0, 2, 2)
	clock := newFakeClock()
	cfg := steppedConfig(clock)
	relay := newRelay(t, pg, k, cfg)
	ctx := context.Background()
	first := enqueueOn(t, pg, out, topic, keys[:1], 1)
	if res := runOnce(t, relay); res.KafkaHeld != 1 {
		t.Fatalf("first batch %+v, want its event held", res)
	}
	notBefore := clock.Now().Add(time.Minute)
	later, err := out.Enqueue(ctx, pg.Pool, producer.Event{Topic: topic, Key: keys[0], Type: "Counted",
		Payload: fmt.Appendf(nil, `{"key":%q,"n":1}`, keys[0]), NotBefore: notBefore})
	if err != nil {
		t.Fatal(err)
	}
	if res := runOnce(t, relay); res.Claimed != 1 || res.Published != 0 {
		t.Fatalf("second batch %+v, want the scheduled event claimed and moved to wait", res)
	}
	fault.Remove()
	enqueueOn(t, pg, out, topic, keys[1:], 1)
	clock.Advance(1100 * time.Millisecond)
	for range 3 { // the probe's hold is up: it and the new event go, and wake the partition
		runOnce(t, relay)
	}
	waiting := pg.Schema + ".courier_outbox_waiting"
	var due time.Time
	if err := pg.Pool.QueryRow(ctx, "SELECT next_attempt_at FROM "+waiting+" WHERE id = $1", later.ID).Scan(&due); err != nil {
		t.Fatalf("the scheduled event is no longer waiting: %v", err)
	}
	if due.Before(notBefore) {
		t.Fatalf("after the wake, the scheduled event is due at %v, before its NotBefore %v", due, notBefore)
	}
	if n := countRows(t, pg.Pool, "status = 'published' AND id::text = ANY($1)", first); n != 1 {
		t.Fatalf("the held event is not published after the partition healed")
	}
	clock.Advance(time.Minute)
	if res := runOnce(t, relay); res.Published != 1 {
		t.Fatalf("at its NotBefore, the batch %+v, want the scheduled event published", res)
	}
	if dups := checkKeyOrder(t, k.ReadAll(t, topic)); dups != 0 {
		t.Fatalf("%d duplicates on the topic", dups)
	}
}
