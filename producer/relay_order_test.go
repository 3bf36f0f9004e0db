package producer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/courierkit/courier/backoff"
	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/producer"
)

// keyedPayload is the payload of the ordering tests: the n-th event of a key.
type keyedPayload struct {
	Key string `json:"key"`
	N   int    `json:"n"`
}

// enqueueKeyed enqueues perKey events for each of keys keys on topic, the
// keys interleaved, in batches; event n of a key is enqueued after n-1.
func enqueueKeyed(t *testing.T, pg *testkit.PG, out *producer.Outbox, topic string, keys, perKey int) int {
	t.Helper()
	var batch []producer.Event
	flush := func() {
		if _, err := out.EnqueueBatch(context.Background(), pg.Pool, batch); err != nil {
			t.Fatal(err)
		}
		batch = batch[:0]
	}
	for n := range perKey {
		for k := range keys {
			key := fmt.Sprintf("key-%03d", k)
			payload, _ := json.Marshal(keyedPayload{Key: key, N: n})
			batch = append(batch, producer.Event{Topic: topic, Key: key, Type: "Counted", Payload: payload})
			if len(batch) == 1000 {
				flush()
			}
		}
	}
	if len(batch) > 0 {
		flush()
	}
	return keys * perKey
}

// checkKeyOrder fails the test when a key's events, first copies only, do
// not arrive in enqueue order (in partition order).
func checkKeyOrder(t *testing.T, msgs []*sarama.ConsumerMessage) (duplicates int) {
	t.Helper()
	byPartition := map[int32][]*sarama.ConsumerMessage{}
	for _, m := range msgs {
		byPartition[m.Partition] = append(byPartition[m.Partition], m)
	}
	seen := map[string]bool{}
	last := map[string]int{}
	for _, part := range byPartition {
		// Messages of a partition arrive in offset order from one consumer.
		for _, m := range part {
			var p keyedPayload
			if err := json.Unmarshal(m.Value, &p); err != nil {
				t.Fatalf("offset %d: %v", m.Offset, err)
			}
			if string(m.Key) != p.Key {
				t.Fatalf("record key %q carries payload of key %q", m.Key, p.Key)
			}
			id := headerValue(m, producer.HeaderID)
			if seen[id] {
				// A duplicate replays events Kafka already had; order is
				// the order of first copies, as a consumer deduplicating on
				// ce_id sees it.
				duplicates++
				continue
			}
			seen[id] = true
			if prev, ok := last[p.Key]; ok && p.N < prev {
				t.Fatalf("key %s: event %d arrived after event %d (partition %d offset %d)", p.Key, p.N, prev, m.Partition, m.Offset)
			}
			last[p.Key] = p.N
		}
	}
	return duplicates
}

// TestThreeRelaysKeepKeyOrderUnderProduceFaults drains 20,000 events over
// 500 keys with three relays while the broker fails about one produce
// request in seven, with errors of both kinds: every event arrives, and each
// key's events arrive in enqueue order.
func TestThreeRelaysKeepKeyOrderUnderProduceFaults(t *testing.T) {
	t.Parallel()
	pg, out := setup(t)
	k := testkit.NewKafka(t, testkit.Brokers(3), testkit.InProcess()) // the test injects faults
	topic := k.Topic(t, 6)
	total := enqueueKeyed(t, pg, out, topic, 500, 40)

	// Broker refusals (retriable: counted attempts) and dropped connections
	// (Kafka unreachable: deferrals that count none).
	for _, code := range []*kerr.Error{kerr.NotLeaderForPartition, kerr.UnknownServerError} {
		k.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: code, Count: -1,
			When: func(kmsg.Request) bool { return rand.IntN(14) == 0 }})
	}
	k.Cluster.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		if rand.IntN(14) != 0 {
			return nil, nil, false
		}
		k.Cluster.KeepControl()
		return nil, errors.New("connection dropped"), true // closes the connection
	})
	metrics := &recordedMetrics{}
	for range 3 {
		saramaCfg := producer.NewSaramaConfig()
		saramaCfg.Producer.Retry.Max = 0 // let the faults reach the relay
		relay := newRelay(t, pg, k, producer.RelayConfig{
			Sarama: saramaCfg, PollInterval: 50 * time.Millisecond, Hooks: []producer.Hook{metrics},
			MaxAttempts: 1000, Backoff: backoff.Backoff{Base: 5 * time.Millisecond, Max: 50 * time.Millisecond},
			Breaker: producer.BreakerConfig{OpenFor: 100 * time.Millisecond},
		})
		runRelay(t, relay)
	}
	testkit.WaitFor(t, 3*time.Minute, "every event published", func() bool {
		return countRows(t, pg.Pool, "status <> 'published'") == 0
	})
	msgs := consume(t, k, topic).waitDistinct(total, time.Minute)
	dups := checkKeyOrder(t, msgs)
	metrics.mu.Lock()
	defer metrics.mu.Unlock()
	t.Logf("%d events, %d duplicates, failures by reason %v", total, dups, metrics.failures)
	if metrics.failures["retriable"] == 0 || metrics.failures["broker_unavailable"] == 0 {
		t.Fatalf("no injected failure reached the relay (%v): the test proves nothing", metrics.failures)
	}
}

// TestRelayPublishesAHotKeyInOneRequest: a batch of 500 events of one key
// leaves in one produce request and arrives in enqueue order. (A relay that
// waited for each event's acknowledgement before sending the next of its
// key would need 500 round trips.)
func TestRelayPublishesAHotKeyInOneRequest(t *testing.T) {
	t.Parallel()
	pg, out := setup(t)
	k := testkit.NewKafka(t, testkit.InProcess()) // the test counts requests
	topic := k.Topic(t, 3)
	total := enqueueKeyed(t, pg, out, topic, 1, 500)
	relay := newRelay(t, pg, k, producer.RelayConfig{})
	requests := observeProduce(k)

	if res := runOnce(t, relay); res.Published != total {
		t.Fatalf("batch %+v, want all %d published", res, total)
	}
	if n := requests.Hits(); n != 1 {
		t.Fatalf("%d produce requests for one batch of one key, want 1", n)
	}
	checkKeyOrder(t, consume(t, k, topic).waitDistinct(total, 30*time.Second))
}
